//! A real server on a real socket, on real time with short configured
//! timeouts: register, list, beat, watch it expire, shut down gracefully.

use std::time::Duration;

use serde_json::Value;
use understudy_server::config::Settings;
use understudy_tests::{eventually, Server};

async fn hosts(client: &reqwest::Client, server: &Server, service: &str) -> Vec<Value> {
    let info: Value = client
        .get(server.url(&format!("/nacos/v1/ns/instance/list?serviceName={service}")))
        .send()
        .await
        .expect("the server answers")
        .json()
        .await
        .expect("a ServiceInfo");
    info["hosts"]
        .as_array()
        .cloned()
        .expect("hosts is an array")
}

#[tokio::test]
async fn register_list_beat_and_expire_over_a_socket() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        beat_interval_ms: Some(100),
        unhealthy_timeout_ms: Some(400),
        delete_timeout_ms: Some(800),
        ..Settings::default()
    })
    .await?;
    let client = reqwest::Client::new();

    let reply = client
        .post(server.url("/nacos/v1/ns/instance"))
        .form(&[
            ("serviceName", "smoke"),
            ("ip", "127.0.0.1"),
            ("port", "9000"),
        ])
        .send()
        .await?;
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.text().await?, "ok");
    assert_eq!(hosts(&client, &server, "smoke").await.len(), 1);

    let beat: Value = client
        .put(server.url("/nacos/v1/ns/instance/beat?serviceName=smoke&ip=127.0.0.1&port=9000"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(beat["code"], 10200);
    assert_eq!(beat["clientBeatInterval"], 100);

    // No more beats: unhealthy after 400 ms, gone after 800 ms.
    assert!(
        eventually(Duration::from_secs(5), || async {
            hosts(&client, &server, "smoke")
                .await
                .first()
                .map(|h| h["healthy"] == false)
                == Some(true)
        })
        .await,
        "the instance never turned unhealthy"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            hosts(&client, &server, "smoke").await.is_empty()
        })
        .await,
        "the instance was never removed"
    );

    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        metrics.contains("understudy_http_requests_total"),
        "{metrics}"
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn shutdown_stops_accepting_connections() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let address = server.http;
    let client = reqwest::Client::new();
    assert_eq!(
        client.get(server.url("/health")).send().await?.status(),
        200
    );
    server.stop().await?;
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "still accepting after shutdown"
    );
    Ok(())
}

#[tokio::test]
async fn compacting_the_raft_log_keeps_every_registration() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let client = reqwest::Client::new();
    for n in 1..=20 {
        let reply = client
            .post(server.url("/nacos/v1/ns/instance"))
            .form(&[
                ("serviceName", "compacted"),
                ("ip", &format!("10.0.0.{n}")),
                ("port", "8080"),
                ("ephemeral", "false"),
            ])
            .send()
            .await?;
        assert_eq!(reply.text().await?, "ok");
    }
    let answer: Value = client
        .post(server.url("/understudy/v1/raft/compact"))
        .send()
        .await?
        .json()
        .await?;
    let compacted = answer["compactedTo"].as_u64().expect("an index");
    assert!(compacted >= 20, "{answer}");
    assert_eq!(hosts(&client, &server, "compacted").await.len(), 20);
    // Writes go on after the compaction.
    let reply = client
        .post(server.url("/nacos/v1/ns/instance"))
        .form(&[
            ("serviceName", "compacted"),
            ("ip", "10.0.1.1"),
            ("port", "8080"),
            ("ephemeral", "false"),
        ])
        .send()
        .await?;
    assert_eq!(reply.text().await?, "ok");
    assert_eq!(hosts(&client, &server, "compacted").await.len(), 21);
    server.stop().await
}
