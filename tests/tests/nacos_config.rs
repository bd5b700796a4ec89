//! The config service: the official Rust client's config API, HTTP long
//! polling, what Dubbo 3 does at start, malformed requests, v1 answers as
//! Nacos writes them, and Nacos' read-after-write lag on demand (the
//! `config-read-lag` fault).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nacos_sdk::api::config::{
    ConfigChangeListener, ConfigResponse, ConfigService, ConfigServiceBuilder,
};
use nacos_sdk::api::props::ClientProps;
use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

async fn config_client(server: &Server) -> ConfigService {
    ConfigServiceBuilder::new(
        ClientProps::new()
            .server_addr(server.http.to_string())
            .config_load_cache_at_start(false)
            .cache_dir(
                std::env::temp_dir()
                    .join(format!("understudy-config-cache-{}", std::process::id())),
            )
            .env_first(false),
    )
    .build()
    .await
    .expect("the config client connects")
}

#[derive(Default)]
struct Seen {
    contents: Mutex<Vec<String>>,
}

impl ConfigChangeListener for Seen {
    fn notify(&self, response: ConfigResponse) {
        self.contents
            .lock()
            .unwrap()
            .push(response.content().clone());
    }
}

impl Seen {
    fn last(&self) -> Option<String> {
        self.contents.lock().unwrap().last().cloned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_publishes_reads_listens_and_removes() -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let config = config_client(&server).await;
    assert!(
        config
            .get_config("app.yaml".into(), "g".into())
            .await
            .is_err(),
        "missing at first"
    );

    // nacos-sdk 0.8.3 does not call a listener for the first content it
    // sees (its cache starts "initializing"), so the listener is added to
    // an existing config; creation pushes are checked at the wire below.
    assert!(
        config
            .publish_config(
                "app.yaml".into(),
                "g".into(),
                "a: 1".into(),
                Some("yaml".into())
            )
            .await?
    );
    let got = config.get_config("app.yaml".into(), "g".into()).await?;
    assert_eq!(
        (got.content().as_str(), got.content_type().as_str()),
        ("a: 1", "yaml")
    );
    assert_eq!(got.md5(), &understudy_core::content_md5("a: 1"));
    let seen = Arc::new(Seen::default());
    config
        .add_listener("app.yaml".into(), "g".into(), seen.clone())
        .await?;
    // The SDK sends its listen request in the background; publishing before
    // it arrives would leave the SDK to find out at its next full sync.
    let http = reqwest::Client::new();
    let metrics = server.url("/metrics");
    assert!(
        eventually(Duration::from_secs(5), || async {
            let text = http
                .get(&metrics)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            text.lines()
                .any(|l| l.starts_with("understudy_config_listeners ") && !l.ends_with(" 0"))
        })
        .await,
        "the listener never reached the server"
    );

    // A change reaches the listener within a second.
    let other = config_client(&server).await;
    let changed_at = tokio::time::Instant::now();
    assert!(
        other
            .publish_config("app.yaml".into(), "g".into(), "a: 2".into(), None)
            .await?
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            seen.last().as_deref() == Some("a: 2")
        })
        .await
    );
    let took = changed_at.elapsed();
    assert!(took <= Duration::from_secs(1), "the change took {took:?}");

    // CAS: the right md5 wins, a wrong one loses.
    let md5 = understudy_core::content_md5("a: 2");
    assert!(
        config
            .publish_config_cas("app.yaml".into(), "g".into(), "a: 3".into(), None, md5)
            .await?
    );
    let wrong = config
        .publish_config_cas(
            "app.yaml".into(),
            "g".into(),
            "a: 4".into(),
            None,
            "not-the-md5".into(),
        )
        .await;
    assert!(
        !matches!(wrong, Ok(true)),
        "a CAS publish with a wrong md5 succeeded"
    );
    // The server's own answer (the SDK serves listened configs from its cache).
    let stored = http
        .get(server.url("/nacos/v1/cs/configs?dataId=app.yaml&group=g"))
        .send()
        .await?
        .text()
        .await?;
    assert_eq!(stored, "a: 3");

    assert!(config.remove_config("app.yaml".into(), "g".into()).await?);
    let gone = http
        .get(server.url("/nacos/v1/cs/configs?dataId=app.yaml&group=g"))
        .send()
        .await?;
    assert_eq!(gone.status(), 404);
    // A client without a listener asks the server, which says it is gone.
    assert!(other
        .get_config("app.yaml".into(), "g".into())
        .await
        .is_err());
    server.stop().await?;
    Ok(())
}

fn listening(records: &[(&str, &str, &str)]) -> String {
    let raw: String = records
        .iter()
        .map(|(d, g, m)| format!("{d}\u{2}{g}\u{2}{m}\u{1}"))
        .collect();
    // The value is encoded twice, as clients do: once here, once by the form.
    let once: String = understudy_tests::url_encode(&raw);
    format!("Listening-Configs={}", understudy_tests::url_encode(&once))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polling_holds_until_timeout_or_answers_a_change_at_once() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        long_poll_floor_ms: Some(300),
        ..Settings::default()
    })
    .await?;
    let http = reqwest::Client::new();
    let publish = |content: &'static str| {
        let http = http.clone();
        let url = server.url("/nacos/v1/cs/configs");
        async move {
            let body = http
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("dataId=polled&group=g&content={content}"))
                .send()
                .await?
                .text()
                .await?;
            anyhow::ensure!(body == "true", "{body}");
            anyhow::Ok(())
        }
    };
    publish("v1").await?;
    let md5 = understudy_core::content_md5("v1");
    let poll = |timeout: u64, records: String| {
        let http = http.clone();
        let url = server.url("/nacos/v1/cs/configs/listener");
        async move {
            let started = tokio::time::Instant::now();
            let body = http
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .header("Long-Pulling-Timeout", timeout.to_string())
                .body(records)
                .send()
                .await?
                .text()
                .await?;
            anyhow::Ok((body, started.elapsed()))
        }
    };

    // An outdated md5 answers at once.
    let (body, took) = poll(30_000, listening(&[("polled", "g", "stale")])).await?;
    assert_eq!(body.trim(), "polled%02g%01");
    assert!(took < Duration::from_secs(1), "{took:?}");

    // Up to date: held until the timeout (max(floor, timeout - 500) = 500 ms), then empty.
    let (body, took) = poll(1_000, listening(&[("polled", "g", &md5)])).await?;
    assert_eq!(body.trim(), "");
    assert!(
        took >= Duration::from_millis(450),
        "answered early: {took:?}"
    );

    // A change while held answers at once with the changed key.
    let held = tokio::spawn(poll(
        30_000,
        listening(&[("polled", "g", &md5), ("other", "g", "")]),
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!held.is_finished(), "answered before any change");
    publish("v2").await?;
    let (body, took) = held.await??;
    assert_eq!(body.trim(), "polled%02g%01");
    assert!(took < Duration::from_secs(5), "{took:?}");

    // v2 endpoints.
    let got: Value = http
        .get(server.url("/nacos/v2/cs/config?dataId=polled&group=g"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(got, json!({"code":0,"message":"success","data":"v2"}));
    let missing = http
        .get(server.url("/nacos/v2/cs/config?dataId=nope&group=g"))
        .send()
        .await?;
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().await?["code"], 20004);
    let v1_missing = http
        .get(server.url("/nacos/v1/cs/configs?dataId=nope&group=g"))
        .send()
        .await?;
    assert_eq!(v1_missing.status(), 404);
    assert_eq!(v1_missing.text().await?, "config data not exist\n");
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_on_a_missing_config_is_told_when_it_is_created() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let listener = RawClient::connect(server.grpc, None).await?;
    let (_, answer) = listener
        .call(
            "ConfigBatchListenRequest",
            json!({"listen":true,"configListenContexts":[
            {"dataId":"later","group":"g","tenant":"","md5":""}]}),
        )
        .await?;
    assert_eq!(
        answer["changedConfigs"],
        json!([]),
        "missing and md5 \"\" is up to date"
    );
    let publisher = RawClient::connect(server.grpc, None).await?;
    let (_, published) = publisher
        .call(
            "ConfigPublishRequest",
            json!({"dataId":"later","group":"g","tenant":"","content":"x=1"}),
        )
        .await?;
    assert_eq!(published["success"], true, "{published}");
    assert!(
        eventually(Duration::from_secs(2), || async {
            !listener.config_notifications().is_empty()
        })
        .await,
        "no ConfigChangeNotifyRequest"
    );
    let note = &listener.config_notifications()[0];
    // An empty tenant is left out, as Nacos leaves out its null one.
    assert_eq!(
        (
            note["dataId"].as_str(),
            note["group"].as_str(),
            note.get("tenant")
        ),
        (Some("later"), Some("g"), None),
        "{note}"
    );
    assert_eq!(note["headers"], json!({}));
    // The tenant is echoed as each listener wrote it.
    let public = RawClient::connect(server.grpc, None).await?;
    public
        .call("ConfigBatchListenRequest", json!({"listen":true,"configListenContexts":[
            {"dataId":"later","group":"g","tenant":"public","md5":understudy_core::content_md5("x=1")}]}))
        .await?;
    publisher
        .call(
            "ConfigRemoveRequest",
            json!({"dataId":"later","group":"g","tenant":""}),
        )
        .await?;
    assert!(
        eventually(Duration::from_secs(2), || async {
            !public.config_notifications().is_empty()
        })
        .await
    );
    assert_eq!(public.config_notifications()[0]["tenant"], "public");
    server.stop().await?;
    Ok(())
}

/// What Dubbo 3's Nacos registry, metadata report and mapping do at start
/// (protocol reference §13.5), over the wire as its Java client sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dubbo_3_application_starts() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let provider = RawClient::connect(server.grpc, None).await?;
    let consumer = RawClient::connect(server.grpc, None).await?;

    // Start-up checks: the probe service and probe config.
    assert!(provider.query("Dubbo-Nacos-Test").await?.is_empty());
    let (kind, probe) = provider
        .call(
            "ConfigQueryRequest",
            json!({"dataId":"Dubbo-Nacos-Test","group":"Dubbo-Nacos-Test","tenant":""}),
        )
        .await?;
    assert_eq!(kind, "ConfigQueryResponse");
    assert_eq!(
        (
            probe["errorCode"].as_i64(),
            probe["lastModified"].as_i64(),
            probe["beta"].as_bool()
        ),
        (Some(300), Some(0), Some(false))
    );

    // Service-name mapping: read, then CAS publish with "0" for a first write.
    let interface = "org.apache.dubbo.demo.DemoService";
    let publish = |content: &str, cas: &str| {
        json!({"dataId":interface,"group":"mapping","tenant":"","content":content,"casMd5":cas,
               "additionMap":{"type":"text","appName":"","tag":"","betaIps":"","src_user":"","encryptedDataKey":""}})
    };
    let (kind, first) = provider
        .call("ConfigPublishRequest", publish("demo-provider", "0"))
        .await?;
    assert_eq!(
        (kind.as_str(), first["success"].as_bool()),
        ("ConfigPublishResponse", Some(true)),
        "{first}"
    );
    let (_, stale) = provider
        .call("ConfigPublishRequest", publish("demo-provider,other", "0"))
        .await?;
    assert_eq!(
        stale["success"], false,
        "a CAS publish on a stale md5 must fail: {stale}"
    );
    let md5 = understudy_core::content_md5("demo-provider");
    let (_, second) = provider
        .call("ConfigPublishRequest", publish("demo-provider,other", &md5))
        .await?;
    assert_eq!(second["success"], true, "{second}");

    // Metadata (metadata-type=remote) and the application instance.
    let (_, metadata) = provider
        .call("ConfigPublishRequest", json!({"dataId":"demo-provider","group":"5c2a4b7e","tenant":"","content":"{\"app\":\"demo-provider\"}","additionMap":{}}))
        .await?;
    assert_eq!(metadata["success"], true, "{metadata}");
    provider
        .register("demo-provider", "10.0.0.7", 20880)
        .await?;

    // The consumer: mapping lookup and listen, then subscribe to the app.
    let (_, mapping) = consumer
        .call(
            "ConfigQueryRequest",
            json!({"dataId":interface,"group":"mapping","tenant":""}),
        )
        .await?;
    assert_eq!(mapping["content"], "demo-provider,other");
    let (kind, listened) = consumer
        .call("ConfigBatchListenRequest", json!({"listen":true,"configListenContexts":[
            {"dataId":interface,"group":"mapping","tenant":"","md5":understudy_core::content_md5("demo-provider,other")},
            {"dataId":"dubbo.properties","group":"dubbo","tenant":"","md5":""}]}))
        .await?;
    assert_eq!(kind, "ConfigChangeBatchListenResponse");
    assert_eq!(listened["changedConfigs"], json!([]), "both up to date");
    consumer.subscribe("demo-provider").await?;
    assert_eq!(
        consumer.view("demo-provider"),
        Some(vec!["10.0.0.7:20880".to_owned()])
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_config_requests_get_clear_errors_and_write_nothing() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        max_config_bytes: Some(1024),
        ..Settings::default()
    })
    .await?;
    let http = reqwest::Client::new();
    let post = |body: String| {
        let http = http.clone();
        let url = server.url("/nacos/v1/cs/configs");
        async move {
            let reply = http
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await?;
            anyhow::Ok((reply.status().as_u16(), reply.text().await?))
        }
    };
    let big = "x".repeat(2048);
    for (body, field) in [
        (format!("dataId=d&group=g&content={big}"), "content"),
        ("dataId=a%20b&group=g&content=x".to_owned(), "dataId"),
        ("dataId=d&content=x".to_owned(), "group"),
        ("dataId=d&group=g".to_owned(), "content"),
        ("dataId=d&group=g&content=%20%20".to_owned(), "content"),
        ("dataId=d&group=g%2Fh&content=x".to_owned(), "group"),
        (
            "dataId=d&group=g&tenant=a%20b&content=x".to_owned(),
            "tenant",
        ),
    ] {
        let (status, text) = post(body.clone()).await?;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(
            text.contains(field),
            "{body}: does not name {field}: {text}"
        );
    }
    let listener = http
        .post(server.url("/nacos/v1/cs/configs/listener"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("Listening-Configs=a%2502b%2502c%2502d%2502e%2501")
        .send()
        .await?;
    assert_eq!(listener.status(), 400);
    assert!(listener.text().await?.contains("Listening-Configs"));

    // gRPC: the handler's own response type, naming the field.
    let client = RawClient::connect(server.grpc, None).await?;
    let (kind, reply) = client
        .call(
            "ConfigPublishRequest",
            json!({"dataId":"d","group":"g","tenant":"","content":big}),
        )
        .await?;
    assert_eq!(
        (kind.as_str(), reply["errorCode"].as_i64()),
        ("ConfigPublishResponse", Some(400)),
        "{reply}"
    );
    assert!(
        reply["message"]
            .as_str()
            .unwrap_or_default()
            .contains("content"),
        "{reply}"
    );
    let (_, reply) = client
        .call("ConfigQueryRequest", json!({"dataId":"","group":"g"}))
        .await?;
    assert!(
        reply["message"]
            .as_str()
            .unwrap_or_default()
            .contains("dataId"),
        "{reply}"
    );

    // Nothing was written.
    let probe = http
        .get(server.url("/nacos/v1/cs/configs?dataId=d&group=g"))
        .send()
        .await?;
    assert_eq!(probe.status(), 404);
    server.stop().await?;
    Ok(())
}

/// Nacos serves config reads from a cache dumped after each write, so a
/// read right after a write answers the state before it. The chaos API's
/// `config-read-lag` gives a node's DC that behaviour; without it reads
/// answer the write at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_read_lag_answers_reads_as_before_a_write_until_it_passes() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        dc: Some("sh".into()),
        ..Settings::default()
    })
    .await?;
    let http = reqwest::Client::new();
    let chaos = |query: &str| {
        http.post(server.url(&format!("/understudy/v1/chaos/config-read-lag?{query}")))
            .send()
    };
    let configs = server.url("/nacos/v1/cs/configs");
    let publish = |content: &str| {
        http.post(&configs)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("dataId=lagged&group=g&content={content}"))
            .send()
    };
    let read = || async {
        let answer = http
            .get(format!("{configs}?dataId=lagged&group=g"))
            .send()
            .await
            .expect("the node answers");
        let status = answer.status().as_u16();
        (status, answer.text().await.unwrap_or_default())
    };
    let reads = |expected: &'static str| {
        let read = &read;
        async move {
            eventually(Duration::from_secs(10), || async {
                read().await == (200, expected.to_owned())
            })
            .await
        }
    };

    let bad = chaos("dc=sh&lag=soon").await?;
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await?.contains("lag"));
    let no_dc = chaos("lag=1s").await?;
    assert_eq!(no_dc.status(), 400);
    assert!(no_dc.text().await?.contains("dc"));
    let set: Value = chaos("dc=sh&lag=1s").await?.json().await?;
    assert_eq!(
        set["faults"]["configReadLagsMs"],
        json!({"sh": 1000}),
        "{set}"
    );

    // A new config: not found at once, then found.
    assert_eq!(publish("v1").await?.text().await?, "true");
    assert_eq!(read().await.0, 404, "a read right after the first publish");
    assert!(reads("v1").await, "the published content never showed");

    // An update: the old content at once, then the new.
    assert_eq!(publish("v2").await?.text().await?, "true");
    assert_eq!(read().await, (200, "v1".to_owned()));
    assert!(reads("v2").await, "the update never showed");

    // The same over gRPC, and after a delete.
    let client = RawClient::connect(server.grpc, None).await?;
    let query = || async {
        let (_, answer) = client
            .call(
                "ConfigQueryRequest",
                json!({"dataId":"lagged","group":"g","tenant":""}),
            )
            .await
            .expect("the node answers");
        answer
    };
    assert_eq!(publish("v3").await?.text().await?, "true");
    let old = query().await;
    assert_eq!(
        (old["content"].as_str(), old["md5"].as_str()),
        (
            Some("v2"),
            Some(understudy_core::content_md5("v2").as_str())
        ),
        "{old}"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            query().await["content"] == "v3"
        })
        .await,
        "gRPC never read the update"
    );
    let removed = http
        .delete(format!("{configs}?dataId=lagged&group=g"))
        .send()
        .await?;
    assert_eq!(removed.text().await?, "true");
    assert_eq!(
        read().await,
        (200, "v3".to_owned()),
        "just after the delete"
    );
    assert!(
        eventually(Duration::from_secs(10), || async { read().await.0 == 404 }).await,
        "the removal never showed"
    );

    // Without the lag, a read answers the write at once.
    let cleared: Value = chaos("dc=sh&lag=0").await?.json().await?;
    assert_eq!(
        cleared["faults"]["configReadLagsMs"],
        json!({}),
        "{cleared}"
    );
    assert_eq!(publish("v4").await?.text().await?, "true");
    assert_eq!(read().await, (200, "v4".to_owned()));
    server.stop().await?;
    Ok(())
}

/// The v1 answers as Nacos gives them: its JSON content type on all but a
/// config's content, the detail under `show=all`, its parameter filter's
/// and Spring's refusals, Nacos 2's answer to a lost compare-and-set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_config_answers_read_as_nacos_writes_them() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let http = reqwest::Client::new();
    let url = server.url("/nacos/v1/cs/configs");
    let post = |form: &'static str, cas: Option<&'static str>| {
        let mut request = http
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form);
        if let Some(md5) = cas {
            request = request.header("casMd5", md5);
        }
        async move {
            let reply = request.send().await?;
            let kind = reply.headers()["content-type"].to_str()?.to_owned();
            anyhow::Ok((reply.status().as_u16(), kind, reply.text().await?))
        }
    };
    let json = "application/json;charset=UTF-8";
    assert_eq!(
        post("dataId=d.yaml&group=g&content=a%3A%201&type=yaml", None).await?,
        (200, json.to_owned(), "true".to_owned())
    );
    let detail: Value = http
        .get(server.url("/nacos/v1/cs/configs?dataId=d.yaml&group=g&show=all"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        (
            &detail["content"],
            &detail["type"],
            &detail["tenant"],
            &detail["createUser"],
            &detail["desc"]
        ),
        (
            &json!("a: 1"),
            &json!("yaml"),
            &json!(""),
            &Value::Null,
            &Value::Null
        ),
        "{detail}"
    );
    assert!(detail["id"].is_string(), "{detail}");
    assert_eq!(
        post("dataId=d%20x&group=g&content=x", None).await?,
        (
            400,
            json.to_owned(),
            "Param 'dataId' is illegal, illegal characters should not appear in the param.\r\n"
                .to_owned()
        )
    );
    let (status, kind, body) = post("dataId=d.yaml&group=g", None).await?;
    assert_eq!((status, kind.as_str()), (400, json), "{body}");
    let body: Value = serde_json::from_str(&body)?;
    assert_eq!(
        (&body["message"], &body["path"]),
        (
            &json!("Required parameter 'content' is not present."),
            &json!("/nacos/v1/cs/configs")
        )
    );
    assert_eq!(
        post("dataId=d.yaml&group=g&content=b", Some("0000")).await?,
        (
            500,
            "text/plain;charset=UTF-8".to_owned(),
            "caused: Cas publish fail, server md5 may have changed.;".to_owned()
        )
    );
    let gone = http
        .get(server.url("/nacos/v1/cs/configs?dataId=nope&group=g"))
        .send()
        .await?;
    assert_eq!(gone.headers()["content-type"], json);
    server.stop().await?;
    Ok(())
}
