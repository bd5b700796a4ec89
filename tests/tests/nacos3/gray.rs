//! Gray (beta and tag) releases of a config, as two listening Nacos gRPC
//! clients on different loopback addresses see them: the one the rule
//! takes gets the gray content and is told when it changes; the other
//! keeps the formal content; stopping the release gives both the formal
//! content. The HTTP API answers per caller address too.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::{Answers, RawClient};
use understudy_tests::{eventually, Server};

const WAIT: Duration = Duration::from_secs(10);

/// Unanswered pushes are retried only after a minute: every change a
/// client is told of within `WAIT` follows its answer to the one before.
fn settings() -> Settings {
    Settings {
        push_retry_ms: Some(60_000),
        ..Settings::default()
    }
}

async fn client(server: &Server, from: &str, labels: Value) -> anyhow::Result<RawClient> {
    let from: IpAddr = from.parse()?;
    RawClient::connect_from(server.grpc, None, Answers::All, Some(from), labels).await
}

/// What `client` reads of app.yaml: its content and the beta flag and tag.
async fn read(client: &RawClient) -> anyhow::Result<(String, bool, Option<String>)> {
    let (kind, body) = client
        .call(
            "ConfigQueryRequest",
            json!({"headers":{},"dataId":"app.yaml","group":"shop","tenant":""}),
        )
        .await?;
    anyhow::ensure!(kind == "ConfigQueryResponse", "{kind}: {body}");
    Ok((
        body["content"].as_str().unwrap_or_default().to_owned(),
        body["beta"].as_bool().unwrap_or(false),
        body["tag"].as_str().map(str::to_owned),
    ))
}

async fn listen(client: &RawClient, md5: &str) -> anyhow::Result<()> {
    let (kind, body) = client
        .call(
            "ConfigBatchListenRequest",
            json!({"headers":{},"listen":true,"configListenContexts":[
                {"dataId":"app.yaml","group":"shop","tenant":"","md5":md5}]}),
        )
        .await?;
    anyhow::ensure!(kind == "ConfigChangeBatchListenResponse", "{kind}: {body}");
    Ok(())
}

async fn publish(server: &Server, content: &str, beta_ips: Option<&str>, tag: Option<&str>) {
    let mut form = vec![
        ("dataId", "app.yaml"),
        ("groupName", "shop"),
        ("content", content),
    ];
    if let Some(tag) = tag {
        form.push(("tag", tag));
    }
    let mut request = reqwest::Client::new()
        .post(server.url("/nacos/v3/admin/cs/config"))
        .form(&form);
    if let Some(ips) = beta_ips {
        request = request.header("betaIps", ips);
    }
    let reply = request.send().await.expect("the server answers");
    assert_eq!(reply.status(), StatusCode::OK, "{:?}", reply.text().await);
}

/// Waits until `client` has been told of at least `n` config changes.
async fn told(client: &RawClient, n: usize) -> bool {
    eventually(WAIT, || async { client.config_notifications().len() >= n }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beta_release_reaches_the_addresses_it_names_until_it_is_stopped() -> anyhow::Result<()> {
    let server = Server::start(settings()).await?;
    publish(&server, "formal", None, None).await;
    let one = client(&server, "127.0.0.1", json!({})).await?;
    let two = client(&server, "127.0.0.2", json!({})).await?;
    for c in [&one, &two] {
        let (content, beta, _) = read(c).await?;
        assert_eq!((content.as_str(), beta), ("formal", false));
        listen(c, &understudy_core::content_md5("formal")).await?;
    }

    publish(&server, "gray", Some("127.0.0.2"), None).await;
    assert!(told(&two, 1).await, "the gray client is told");
    assert_eq!(read(&two).await?, ("gray".to_owned(), true, None));
    assert_eq!(read(&one).await?, ("formal".to_owned(), false, None));
    let beta =
        reqwest::get(server.url("/nacos/v3/admin/cs/config/beta?dataId=app.yaml&groupName=shop"))
            .await?
            .json::<Value>()
            .await?;
    assert_eq!(beta["data"]["content"], "gray", "{beta}");
    assert_eq!(beta["data"]["grayName"], "beta");
    assert!(
        beta["data"]["grayRule"]
            .as_str()
            .unwrap()
            .contains("127.0.0.2"),
        "{beta}"
    );
    // Over HTTP too, by the caller's address (this test calls from 127.0.0.1).
    let mine = reqwest::get(server.url("/nacos/v1/cs/configs?dataId=app.yaml&group=shop")).await?;
    assert!(mine.headers().get("isBeta").is_none());
    assert_eq!(mine.text().await?, "formal");

    // Stopping it: the gray client is told and reads the formal content.
    let seen = two.config_notifications().len();
    let stopped = reqwest::Client::new()
        .delete(server.url("/nacos/v3/admin/cs/config/beta?dataId=app.yaml&groupName=shop"))
        .send()
        .await?;
    assert_eq!(stopped.status(), StatusCode::OK);
    assert!(told(&two, seen + 1).await, "told of the stop");
    assert_eq!(read(&two).await?, ("formal".to_owned(), false, None));
    assert_eq!(read(&one).await?, ("formal".to_owned(), false, None));
    let gone =
        reqwest::get(server.url("/nacos/v3/admin/cs/config/beta?dataId=app.yaml&groupName=shop"))
            .await?;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    drop((one, two));
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_release_reaches_the_clients_that_carry_the_tag() -> anyhow::Result<()> {
    let server = Server::start(settings()).await?;
    publish(&server, "formal", None, None).await;
    let plain = client(&server, "127.0.0.1", json!({})).await?;
    let tagged = client(&server, "127.0.0.2", json!({"Vipserver-Tag": "canary"})).await?;
    for c in [&plain, &tagged] {
        listen(c, &understudy_core::content_md5("formal")).await?;
    }
    publish(&server, "canary content", None, Some("canary")).await;
    assert!(told(&tagged, 1).await);
    assert_eq!(
        read(&tagged).await?,
        (
            "canary content".to_owned(),
            false,
            Some("canary".to_owned())
        )
    );
    assert_eq!(read(&plain).await?, ("formal".to_owned(), false, None));

    // Removing with the tag stops the release, not the config.
    let seen = tagged.config_notifications().len();
    let removed = reqwest::Client::new()
        .delete(server.url("/nacos/v3/admin/cs/config?dataId=app.yaml&groupName=shop&tag=canary"))
        .send()
        .await?;
    assert_eq!(removed.status(), StatusCode::OK);
    assert!(told(&tagged, seen + 1).await);
    assert_eq!(read(&tagged).await?, ("formal".to_owned(), false, None));
    assert_eq!(read(&plain).await?, ("formal".to_owned(), false, None));
    drop((plain, tagged));
    server.stop().await
}
