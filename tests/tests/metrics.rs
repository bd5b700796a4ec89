//! Every metric family docs/operations.md ("Metrics") lists is scraped,
//! and moves as it should under known traffic: HTTP and Nacos gRPC
//! requests, pushes, native watches, writes, expiry, raft indexes and the
//! registry sizes.
//!
//! A fresh node lists every family `metrics::FAMILIES` declares, and
//! nothing undeclared is exported.
//!
//! The recorder is process-wide, so this file holds one test: in its own
//! process nothing else moves the counters, and the deltas are exact.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, WatchRequest};
use understudy_server::config::Settings;
use understudy_server::metrics::{Kind, FAMILIES};
use understudy_tests::nacos_grpc::{Answers, RawClient};
use understudy_tests::{eventually, Server};

/// One scrape: each series (name and sorted labels) with its value.
#[derive(Debug, Default)]
struct Scrape {
    series: BTreeMap<(String, BTreeMap<String, String>), f64>,
    families: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: &str) -> Self {
        let mut scrape = Scrape::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                scrape.families.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("a value: {line}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, labels)) => {
                    let labels = labels.strip_suffix('}').expect("closing brace");
                    let labels = labels
                        .split("\",")
                        .filter(|l| !l.is_empty())
                        .map(|pair| {
                            let (k, v) = pair.split_once("=\"").expect("key=\"value\"");
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            scrape.series.insert((name, labels), value);
        }
        scrape
    }

    /// The sum of the series of `name` that carry every one of `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series
            .iter()
            .filter(|((n, l), _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| v)
            .sum()
    }

    fn has(&self, name: &str) -> bool {
        self.series.keys().any(|(n, _)| n == name)
    }
}

async fn scrape(client: &reqwest::Client, server: &Server, path: &str) -> Scrape {
    let reply = client
        .get(server.url(path))
        .send()
        .await
        .expect("the server answers");
    assert_eq!(reply.status(), 200, "{path}");
    let content_type = reply.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    Scrape::parse(&reply.text().await.expect("a body"))
}

async fn register(client: &reqwest::Client, server: &Server, namespace: &str, service: &str) {
    let reply = client
        .post(server.url("/nacos/v1/ns/instance"))
        .form(&[
            ("namespaceId", namespace),
            ("serviceName", service),
            ("ip", "10.1.0.1"),
            ("port", "8080"),
        ])
        .send()
        .await
        .expect("the server answers");
    assert_eq!(reply.text().await.unwrap(), "ok");
}

/// Waits until a scrape satisfies `check`, returning that scrape.
async fn scrape_until(
    client: &reqwest::Client,
    server: &Server,
    what: &str,
    check: impl Fn(&Scrape) -> bool,
) -> Scrape {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = scrape(client, server, "/metrics").await;
        if check(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} never showed in the metrics"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn every_metric_family_is_scraped_and_moves_under_known_traffic() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        beat_interval_ms: Some(100),
        unhealthy_timeout_ms: Some(400),
        delete_timeout_ms: Some(800),
        push_timeout_ms: Some(300),
        push_retry_ms: Some(100),
        ..Settings::default()
    })
    .await?;
    let client = reqwest::Client::new();
    let before = scrape(&client, &server, "/metrics").await;
    // A fresh node lists every declared family, with the series known
    // before any event at zero (commands are applied as the node forms
    // its one-member cluster).
    for f in FAMILIES {
        assert_eq!(
            before.families.get(f.name).map(String::as_str),
            Some(f.kind.as_str()),
            "{} is not listed by a fresh node",
            f.name
        );
        for labels in f.zero {
            let name = match f.kind {
                Kind::Histogram => format!("{}_count", f.name),
                _ => f.name.to_owned(),
            };
            let labels: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let value = before.series.get(&(name.clone(), labels.clone()));
            let value = *value.unwrap_or_else(|| panic!("a fresh node has no {name}{labels:?}"));
            if f.name != "understudy_commands_applied_total" {
                assert_eq!(value, 0.0, "{name}{labels:?} on a fresh node");
            }
        }
    }
    assert_eq!(
        before.sum("understudy_raft_role", &[("role", "leader")]),
        1.0
    );
    assert_eq!(before.sum("understudy_node_info", &[("node", "1")]), 1.0);
    assert!(before.sum("understudy_raft_term", &[]) >= 1.0);

    // HTTP: one registration into a namespace of its own.
    register(&client, &server, "metrics-ns", "by-http").await;
    let after_http = scrape(&client, &server, "/metrics").await;
    let http_ok = [("method", "POST"), ("status", "200")];
    let route = ("route", "/nacos/v1/ns/instance");
    assert_eq!(
        after_http.sum(
            "understudy_http_requests_total",
            &[route, http_ok[0], http_ok[1]]
        ) - before.sum(
            "understudy_http_requests_total",
            &[route, http_ok[0], http_ok[1]]
        ),
        1.0
    );
    assert_eq!(
        after_http.sum("understudy_http_request_seconds_count", &[route])
            - before.sum("understudy_http_request_seconds_count", &[route]),
        1.0
    );
    let ns = [("namespace", "metrics-ns")];
    assert_eq!(after_http.sum("understudy_services", &ns), 1.0);
    assert_eq!(after_http.sum("understudy_instances", &ns), 1.0);
    assert_eq!(
        after_http.sum("understudy_instances", &[("namespace", "public")]),
        0.0
    );
    assert_eq!(after_http.sum("understudy_namespaces", &[]), 2.0);
    assert_eq!(
        after_http.sum("understudy_write_seconds_count", &[])
            - before.sum("understudy_write_seconds_count", &[]),
        1.0
    );
    assert!(
        after_http.sum("understudy_raft_commit_index", &[])
            > before.sum("understudy_raft_commit_index", &[])
    );
    assert!(
        after_http.sum("understudy_raft_last_applied", &[])
            > before.sum("understudy_raft_last_applied", &[])
    );
    assert!(after_http.sum("understudy_register_visible_seconds_count", &[]) >= 1.0);
    assert!(after_http.has("understudy_view_lag_seconds"));
    assert!(after_http.sum("understudy_beat_tracked_instances", &[]) >= 1.0);

    // Nacos gRPC: a connection registers, another subscribes and is pushed.
    let (pushes, mut pushed) = mpsc::unbounded_channel();
    let subscriber = RawClient::connect(server.grpc, Some(pushes)).await?;
    let provider = RawClient::connect(server.grpc, None).await?;
    subscriber.subscribe("by-grpc").await?;
    provider.register("by-grpc", "10.2.0.1", 9000).await?;
    tokio::time::timeout(Duration::from_secs(5), pushed.recv())
        .await?
        .expect("a push");
    let grpc = [("type", "InstanceRequest"), ("outcome", "ok")];
    let after_grpc = scrape_until(&client, &server, "the push's acknowledgement", |s| {
        s.sum(
            "understudy_pushes_acknowledged_total",
            &[("success", "true")],
        ) >= 1.0
    })
    .await;
    assert_eq!(after_grpc.sum("understudy_grpc_connections", &[]), 2.0);
    assert_eq!(after_grpc.sum("understudy_grpc_requests_total", &grpc), 1.0);
    assert_eq!(
        after_grpc.sum(
            "understudy_grpc_requests_total",
            &[("type", "SubscribeServiceRequest"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        after_grpc.sum(
            "understudy_grpc_request_seconds_count",
            &[("type", "InstanceRequest")]
        ),
        1.0
    );
    assert_eq!(after_grpc.sum("understudy_subscriptions", &[]), 1.0);
    assert_eq!(after_grpc.sum("understudy_pushes_sent_total", &[]), 1.0);
    assert_eq!(after_grpc.sum("understudy_push_seconds_count", &[]), 1.0);
    assert_eq!(after_grpc.sum("understudy_push_retries_total", &[]), 0.0);
    assert_eq!(
        after_grpc.sum("understudy_instances", &[("namespace", "public")]),
        1.0
    );

    // A push nobody answers times out and is retried.
    let deaf = RawClient::connect_answering(server.grpc, None, Answers::Nothing).await?;
    deaf.subscribe("by-grpc").await?;
    provider.register("by-grpc", "10.2.0.2", 9000).await?;
    let after_timeout = scrape_until(&client, &server, "the push retry", |s| {
        s.sum("understudy_push_retries_total", &[]) >= 1.0
    })
    .await;
    assert!(after_timeout.sum("understudy_pushes_timed_out_total", &[]) >= 1.0);
    drop(deaf);

    // An unknown request type is an error outcome.
    let (kind, answer) = provider
        .call("BogusRequest", serde_json::json!({"headers": {}}))
        .await?;
    assert_eq!(kind, "ErrorResponse", "{answer}");
    let after_error = scrape(&client, &server, "/metrics").await;
    assert_eq!(
        after_error.sum(
            "understudy_grpc_requests_total",
            &[("type", "other"), ("outcome", "error")]
        ),
        1.0
    );

    // Native: a watch gets its snapshot, then one event per change.
    let mut registry = RegistryClient::connect(format!("http://{}", server.grpc)).await?;
    let mut watch = registry
        .watch(WatchRequest {
            namespace: "metrics-ns".to_owned(),
            ..WatchRequest::default()
        })
        .await?
        .into_inner();
    let first = watch.message().await?.expect("the snapshot");
    assert!(matches!(first.event, Some(watch_event::Event::Reset(_))));
    let bad = registry
        .watch(WatchRequest {
            namespace: "bad namespace!".to_owned(),
            ..WatchRequest::default()
        })
        .await;
    assert!(bad.is_err(), "an invalid namespace is refused");
    register(&client, &server, "metrics-ns", "second").await;
    // The new service, then its instance (and perhaps the first
    // instance's health turning).
    let mut received = 0.0;
    loop {
        let event = watch.message().await?.expect("an event");
        let Some(watch_event::Event::Change(change)) = event.event else {
            panic!("a change, not {event:?}");
        };
        received += 1.0;
        let second = change.service.as_ref().is_some_and(|s| s.name == "second");
        if second && matches!(change.kind, Some(change::Kind::Upsert(_))) {
            break;
        }
    }
    assert!(received >= 2.0);
    let after_watch = scrape_until(&client, &server, "the watch events", |s| {
        s.sum("understudy_watch_events_total", &[]) >= received
    })
    .await;
    assert_eq!(after_watch.sum("understudy_watches", &[]), 1.0);
    assert_eq!(
        after_watch.sum("understudy_watch_snapshots_total", &[("reason", "INITIAL")]),
        1.0
    );
    let watch_ok = [("method", "Watch"), ("code", "Ok")];
    assert_eq!(
        after_watch.sum("understudy_native_requests_total", &watch_ok),
        1.0
    );
    assert_eq!(
        after_watch.sum(
            "understudy_native_requests_total",
            &[("method", "Watch"), ("code", "InvalidArgument")]
        ),
        1.0
    );
    assert_eq!(
        after_watch.sum(
            "understudy_native_request_seconds_count",
            &[("method", "Watch")]
        ),
        2.0
    );

    // Expiry: the HTTP instances never beat; they turn unhealthy, then go.
    let after_expiry = scrape_until(&client, &server, "the expiry", |s| {
        s.sum(
            "understudy_instances_removed_total",
            &[("cause", "expired")],
        ) >= 2.0
    })
    .await;
    assert_eq!(
        after_expiry.sum("understudy_health_changes_total", &[("to", "unhealthy")]),
        2.0
    );
    assert_eq!(after_expiry.sum("understudy_instances", &ns), 0.0);

    // A connection closing removes its instance, and the gauge (of every
    // connection to the gRPC port, the native one included) follows.
    drop((watch, registry));
    drop(provider);
    let closed = scrape_until(&client, &server, "the closed connection", |s| {
        s.sum(
            "understudy_instances_removed_total",
            &[("cause", "connection_closed")],
        ) >= 1.0
    })
    .await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            scrape(&client, &server, "/metrics")
                .await
                .sum("understudy_grpc_connections", &[])
                == 1.0
        })
        .await,
        "the connection gauge never fell back: {}",
        scrape(&client, &server, "/metrics")
            .await
            .sum("understudy_grpc_connections", &[])
    );
    assert_eq!(
        closed.sum("understudy_instances", &[("namespace", "public")]),
        0.0
    );

    // The Nacos path serves the same text.
    let nacos = scrape(&client, &server, "/nacos/actuator/prometheus").await;
    for family in [
        "understudy_http_requests_total",
        "understudy_grpc_requests_total",
        "understudy_pushes_sent_total",
        "understudy_watch_events_total",
        "understudy_raft_commit_index",
        "understudy_instances",
    ] {
        assert!(nacos.has(family), "{family} is missing at the Nacos path");
    }
    assert_eq!(
        nacos
            .families
            .get("understudy_http_request_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert_eq!(
        nacos
            .families
            .get("understudy_instances")
            .map(String::as_str),
        Some("gauge")
    );
    // Nothing was exported under an undeclared name.
    for name in nacos.families.keys() {
        assert!(
            FAMILIES.iter().any(|f| f.name == *name),
            "{name} is exported but not declared in FAMILIES"
        );
    }
    drop(subscriber);
    server.stop().await?;
    Ok(())
}
