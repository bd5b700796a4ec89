//! Client races on demand (`/understudy/v1/chaos/hold`, `acks`,
//! `events`): a connection's request held until a change has been pushed
//! to it and acknowledged, seen from a raw Nacos gRPC client and from the
//! node's own trace.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::{Answers, Push, RawClient};
use understudy_tests::Server;

/// Status and JSON body of an HTTP call.
async fn call(method: reqwest::Method, url: String, form: &[(&str, &str)]) -> (u16, Value) {
    let reply = reqwest::Client::new()
        .request(method, url)
        .form(form)
        .send()
        .await
        .expect("the server answers");
    let status = reply.status().as_u16();
    let text = reply.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn post(server: &Server, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
    call(reqwest::Method::POST, server.url(path), form).await
}

async fn get(server: &Server, path_and_query: &str) -> (u16, Value) {
    call(reqwest::Method::GET, server.url(path_and_query), &[]).await
}

/// Enables or disables `10.0.0.1:80` of `service` through the console's
/// API, as the seed's operator does.
async fn set_enabled(server: &Server, service: &str, enabled: bool) -> anyhow::Result<()> {
    let enabled = if enabled { "true" } else { "false" };
    let (status, body) = call(
        reqwest::Method::PUT,
        server.url("/nacos/v1/ns/instance"),
        &[
            ("serviceName", service),
            ("ip", "10.0.0.1"),
            ("port", "80"),
            ("ephemeral", "true"),
            ("enabled", enabled),
        ],
    )
    .await;
    anyhow::ensure!(status == 200, "setting enabled={enabled}: {status} {body}");
    Ok(())
}

/// Registers `10.0.0.1:80` of `service` from a provider connection and
/// disables it.
async fn offline_provider(server: &Server, service: &str) -> anyhow::Result<RawClient> {
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register(service, "10.0.0.1", 80).await?;
    set_enabled(server, service, false).await?;
    Ok(provider)
}

/// Whether a ServiceInfo shows `10.0.0.1:80` enabled.
fn enabled(info: &Value) -> bool {
    info["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|h| h["ip"] == "10.0.0.1" && h["port"] == 80 && h["enabled"] == true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_is_answered_only_after_the_actions_push_was_acknowledged(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let _provider = offline_provider(&server, "seed").await?;
    let (status, hold) = post(
        &server,
        "/understudy/v1/chaos/hold",
        &[
            ("serviceName", "seed"),
            ("ip", "10.0.0.1"),
            ("port", "80"),
            ("enabled", "true"),
            ("timeout", "10s"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{hold}");
    assert_eq!(hold["stage"], "waiting");

    let (pushes_tx, mut pushes) = mpsc::unbounded_channel::<Push>();
    let consumer = RawClient::connect(server.grpc, Some(pushes_tx)).await?;
    consumer.subscribe("seed").await?;
    let (_, holds) = get(&server, "/understudy/v1/chaos/holds").await;
    assert_eq!(holds["holds"][0]["stage"], "armed", "{holds}");
    assert_eq!(
        holds["holds"][0]["connectionId"],
        consumer.connection_id.as_str()
    );

    // The consumer's next request: held while the provider is enabled and
    // the push is acknowledged.
    consumer.subscribe("seed-legacy").await?;
    let answered = Instant::now();
    let push = pushes
        .try_recv()
        .expect("a push arrived before the held request was answered");
    assert_eq!(push.service, "DEFAULT_GROUP@@seed");
    assert!(
        enabled(&push.info),
        "the push shows the enabled provider: {}",
        push.info
    );
    assert!(push.at <= answered);

    let (_, holds) = get(&server, "/understudy/v1/chaos/holds").await;
    let fired = &holds["holds"][0];
    assert_eq!(fired["stage"], "released", "{holds}");
    let outcome = fired["outcome"].as_str().unwrap_or_default();
    assert!(outcome.ends_with("acknowledged"), "{outcome}");
    assert!(
        fired["request"].as_str().is_some_and(
            |r| r.starts_with("SubscribeServiceRequest") && r.ends_with("@@seed-legacy")
        ),
        "{fired}"
    );

    let (status, events) = get(
        &server,
        &format!(
            "/understudy/v1/chaos/events?serviceName=seed&connectionId={}",
            consumer.connection_id
        ),
    )
    .await;
    assert_eq!(status, 200);
    let list = events["events"].as_array().cloned().unwrap_or_default();
    let order: Vec<&str> = list.iter().filter_map(|e| e["event"].as_str()).collect();
    // The push goes out as the change is applied, so it may be recorded
    // before the action's own return.
    let mut sorted = order.clone();
    sorted.retain(|e| *e != "actionApplied");
    if let Some(at) = sorted.iter().position(|e| *e == "pushSent") {
        sorted.insert(at, "actionApplied");
    }
    assert_eq!(
        sorted,
        [
            "subscribed",
            "held",
            "actionProposed",
            "actionApplied",
            "pushSent",
            "pushAcked",
            "released"
        ],
        "{events}"
    );
    let revision_of = |name: &str| {
        list.iter()
            .find(|e| e["event"] == name)
            .and_then(|e| e["revision"].as_u64())
    };
    let revision = revision_of("actionApplied").expect("the action's revision");
    assert_eq!(revision_of("pushSent"), Some(revision));
    assert_eq!(revision_of("pushAcked"), Some(revision));

    let (status, acks) = get(
        &server,
        &format!(
            "/understudy/v1/chaos/acks?serviceName=seed&connectionId={}&wait=2s",
            consumer.connection_id
        ),
    )
    .await;
    assert_eq!(status, 200, "{acks}");
    assert_eq!(acks["revision"].as_u64(), Some(revision));
    assert_eq!(
        acks["connections"][0]["ackedRevision"].as_u64(),
        Some(revision)
    );
    assert_eq!(acks["caughtUp"], true);
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_acknowledges_is_released_at_the_timeout_and_waits_on_it_fail(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let _provider = offline_provider(&server, "mute").await?;
    let (status, _) = post(
        &server,
        "/understudy/v1/chaos/hold",
        &[
            ("serviceName", "mute"),
            ("ip", "10.0.0.1"),
            ("port", "80"),
            ("enabled", "true"),
            ("timeout", "800ms"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    let consumer = RawClient::connect_answering(server.grpc, None, Answers::Nothing).await?;
    consumer.subscribe("mute").await?;
    let started = Instant::now();
    consumer.query("mute").await?;
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "held for the whole timeout, not {:?}",
        started.elapsed()
    );
    let (_, holds) = get(&server, "/understudy/v1/chaos/holds").await;
    let outcome = holds["holds"][0]["outcome"].as_str().unwrap_or_default();
    assert!(outcome.starts_with("timed out after 800 ms"), "{outcome}");

    let (status, acks) = get(
        &server,
        "/understudy/v1/chaos/acks?serviceName=mute&wait=300ms",
    )
    .await;
    assert_eq!(status, 409, "{acks}");
    assert!(
        acks.to_string().contains(&consumer.connection_id),
        "the answer names the connection behind: {acks}"
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_without_an_action_waits_for_the_next_change_by_anyone() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let _provider = offline_provider(&server, "gate").await?;
    let (status, _) = post(
        &server,
        "/understudy/v1/chaos/hold",
        &[("serviceName", "gate")],
    )
    .await;
    assert_eq!(status, 200);
    let (pushes_tx, mut pushes) = mpsc::unbounded_channel::<Push>();
    let consumer = RawClient::connect(server.grpc, Some(pushes_tx)).await?;
    consumer.subscribe("gate").await?;
    let held = tokio::spawn(async move { consumer.query("other").await.map(|_| Instant::now()) });
    // Held until somebody changes the service: wait for the hold to hold.
    let holding = understudy_tests::eventually(Duration::from_secs(5), || async {
        get(&server, "/understudy/v1/chaos/holds").await.1["holds"][0]["stage"] == "holding"
    })
    .await;
    assert!(holding, "the query was not held");
    assert!(!held.is_finished());
    let enabled_at = Instant::now();
    set_enabled(&server, "gate", true).await?;
    let answered = held.await??;
    let push = pushes
        .try_recv()
        .expect("the change's push came before the answer");
    assert!(enabled(&push.info));
    assert!(enabled_at <= push.at && push.at <= answered);
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_holds_and_waits_are_refused_naming_the_field() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    type Form<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Form<'_>, &str); 5] = [
        (&[], "serviceName"),
        (&[("serviceName", "s"), ("ip", "10.0.0.1")], "port"),
        (
            &[("serviceName", "s"), ("ip", "10.0.0.1"), ("port", "80")],
            "enabled",
        ),
        (&[("serviceName", "s"), ("timeout", "1h")], "timeout"),
        (&[("serviceName", "s"), ("timeout", "soon")], "timeout"),
    ];
    for (form, field) in cases {
        let (status, body) = post(&server, "/understudy/v1/chaos/hold", form).await;
        assert_eq!(status, 400, "{form:?}: {body}");
        assert!(
            body.to_string().contains(field),
            "{form:?} should name {field}: {body}"
        );
    }
    let (status, body) = get(
        &server,
        "/understudy/v1/chaos/acks?serviceName=s&connectionId=nobody",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = get(
        &server,
        "/understudy/v1/chaos/acks?serviceName=s&wait=forever",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("wait"), "{body}");
    let (_, holds) = get(&server, "/understudy/v1/chaos/holds").await;
    assert_eq!(
        holds["holds"],
        Value::Array(vec![]),
        "no partial hold was set"
    );
    let (status, cleared) = post(&server, "/understudy/v1/chaos/unhold", &[]).await;
    assert_eq!((status, cleared["cleared"].as_u64()), (200, Some(0)));
    server.stop().await?;
    Ok(())
}
