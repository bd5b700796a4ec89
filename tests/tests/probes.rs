//! Server-side probes of persistent instances: TCP connects and HTTP
//! GETs turn an instance unhealthy after the configured failures in a
//! row and healthy again after the configured passes; the metadata key
//! `understudy.health_check` chooses an instance's own probe; ephemeral
//! instances and instances without a probe are left alone.

use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use serde_json::Value;
use understudy_server::config::Settings;
use understudy_tests::{eventually, Server};

async fn register(
    http: &reqwest::Client,
    server: &Server,
    service: &str,
    port: u16,
    metadata: &str,
) {
    let port = port.to_string();
    let reply = http
        .post(server.url("/nacos/v1/ns/instance"))
        .form(&[
            ("serviceName", service),
            ("ip", "127.0.0.1"),
            ("port", port.as_str()),
            ("ephemeral", "false"),
            ("metadata", metadata),
        ])
        .send()
        .await
        .expect("the server answers");
    assert_eq!(reply.text().await.unwrap(), "ok");
}

/// `port -> healthy` for the instances of `service`.
async fn health(http: &reqwest::Client, server: &Server, service: &str) -> Vec<(u64, bool)> {
    let info: Value = http
        .get(server.url(&format!("/nacos/v1/ns/instance/list?serviceName={service}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut hosts: Vec<(u64, bool)> = info["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["port"].as_u64().unwrap(), h["healthy"].as_bool().unwrap()))
        .collect();
    hosts.sort();
    hosts
}

async fn is_healthy(
    http: &reqwest::Client,
    server: &Server,
    service: &str,
    port: u16,
) -> Option<bool> {
    health(http, server, service)
        .await
        .into_iter()
        .find(|(p, _)| *p == u64::from(port))
        .map(|(_, h)| h)
}

/// A port nothing listens on (bound once, then let go).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn probing(check: &str) -> Settings {
    Settings {
        health_check: Some(check.to_owned()),
        health_check_interval_ms: Some(100),
        health_check_timeout_ms: Some(80),
        health_check_unhealthy_threshold: Some(2),
        health_check_healthy_threshold: Some(1),
        ..Settings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_probes_follow_whether_the_port_accepts() -> anyhow::Result<()> {
    let server = Server::start(probing("tcp")).await?;
    let http = reqwest::Client::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let up = listener.local_addr()?.port();
    let down = closed_port();
    register(&http, &server, "tcp", up, "{}").await;
    register(&http, &server, "tcp", down, "{}").await;

    assert!(
        eventually(Duration::from_secs(5), || async {
            is_healthy(&http, &server, "tcp", down).await == Some(false)
        })
        .await,
        "the closed port never turned unhealthy"
    );
    // Probed in the same rounds, the open one stayed healthy.
    assert_eq!(is_healthy(&http, &server, "tcp", up).await, Some(true));

    drop(listener);
    assert!(
        eventually(Duration::from_secs(5), || async {
            is_healthy(&http, &server, "tcp", up).await == Some(false)
        })
        .await,
        "the port that closed never turned unhealthy"
    );
    let _reopened = tokio::net::TcpListener::bind(("127.0.0.1", up)).await?;
    assert!(
        eventually(Duration::from_secs(5), || async {
            is_healthy(&http, &server, "tcp", up).await == Some(true)
        })
        .await,
        "the reopened port never turned healthy again"
    );
    let metrics = http
        .get(server.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        metrics.contains("understudy_health_changes_total{to=\"unhealthy\"}"),
        "{metrics}"
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_probes_and_per_instance_choices() -> anyhow::Result<()> {
    // The default is no probe: only instances that ask are probed.
    let server = Server::start(probing("none")).await?;
    let http = reqwest::Client::new();
    let app = axum::Router::new()
        .route("/health", get(|| async { "UP" }))
        .route(
            "/bad",
            get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "DOWN") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    // The same port, three services: a passing path, a failing path, and
    // no probe at all on a port nothing listens on.
    register(
        &http,
        &server,
        "good",
        port,
        r#"{"understudy.health_check":"http:/health"}"#,
    )
    .await;
    register(
        &http,
        &server,
        "bad",
        port,
        r#"{"understudy.health_check":"http:/bad"}"#,
    )
    .await;
    let down = closed_port();
    register(&http, &server, "unprobed", down, "{}").await;

    assert!(
        eventually(Duration::from_secs(5), || async {
            is_healthy(&http, &server, "bad", port).await == Some(false)
        })
        .await,
        "the failing path never turned unhealthy"
    );
    assert_eq!(is_healthy(&http, &server, "good", port).await, Some(true));
    assert_eq!(
        is_healthy(&http, &server, "unprobed", down).await,
        Some(true),
        "an instance without a probe was probed"
    );
    server.stop().await?;
    Ok(())
}

/// As Nacos refuses an operator's health call while a health check runs
/// on the instance, a probed instance refuses it; one without a probe
/// (the default) takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_health_call_is_refused_while_a_probe_runs() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let http = reqwest::Client::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    register(
        &http,
        &server,
        "probed",
        port,
        r#"{"understudy.health_check":"tcp"}"#,
    )
    .await;
    register(&http, &server, "unprobed", port, "{}").await;
    let set = |service: &'static str| {
        let port = port.to_string();
        let http = http.clone();
        let url = server.url("/nacos/v1/ns/health/instance");
        async move {
            let reply = http
                .put(url)
                .form(&[
                    ("serviceName", service),
                    ("ip", "127.0.0.1"),
                    ("port", port.as_str()),
                    ("healthy", "false"),
                ])
                .send()
                .await
                .expect("the server answers");
            (reply.status(), reply.text().await.expect("a body"))
        }
    };
    assert_eq!(
        set("probed").await,
        (
            StatusCode::BAD_REQUEST,
            "health check is still working, service: DEFAULT_GROUP@@probed, cluster: DEFAULT"
                .to_owned()
        )
    );
    assert_eq!(is_healthy(&http, &server, "probed", port).await, Some(true));
    assert_eq!(set("unprobed").await, (StatusCode::OK, "ok".to_owned()));
    assert_eq!(
        is_healthy(&http, &server, "unprobed", port).await,
        Some(false)
    );
    server.stop().await?;
    Ok(())
}
