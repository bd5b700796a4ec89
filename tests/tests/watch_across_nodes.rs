//! A native watch's resume token is good on every node of the cluster: a
//! watcher that moves to another node resumes there with only the changes
//! it missed, even when that node is behind (it waits for it to catch up
//! rather than starting over from an older snapshot).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_stream::StreamExt as _;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, ResumeToken, WatchEvent, WatchRequest};
use understudy_server::config::Settings;
use understudy_server::sim::{raft_timings, Sim, SimSpec};

const SERVICE: &str = "com.example.Moving";

async fn watch(
    grpc: std::net::SocketAddr,
    resume: Option<ResumeToken>,
) -> anyhow::Result<tonic::Streaming<WatchEvent>> {
    let mut client = RegistryClient::connect(format!("http://{grpc}")).await?;
    Ok(client
        .watch(WatchRequest {
            namespace: String::new(),
            group: String::new(),
            service: SERVICE.to_owned(),
            resume,
            progress_ms: 0,
        })
        .await?
        .into_inner())
}

async fn next(stream: &mut tonic::Streaming<WatchEvent>) -> anyhow::Result<WatchEvent> {
    Ok(tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the stream ended"))??)
}

/// The next event that upserts an instance: its port and token.
async fn next_upsert(
    stream: &mut tonic::Streaming<WatchEvent>,
) -> anyhow::Result<(u32, ResumeToken)> {
    loop {
        let event = next(stream).await?;
        match event.event {
            Some(watch_event::Event::Change(c)) => {
                if let Some(change::Kind::Upsert(i)) = c.kind {
                    return Ok((i.port, event.token.expect("a token")));
                }
            }
            Some(watch_event::Event::Reset(r)) => {
                anyhow::bail!("a reset ({:?}) instead of the missed changes", r.reason())
            }
            Some(watch_event::Event::Progress(_)) | None => {}
        }
    }
}

async fn register(http: std::net::SocketAddr, port: u16) -> anyhow::Result<()> {
    let answer = reqwest::Client::new()
        .post(format!(
            "http://{http}/nacos/v1/ns/instance?serviceName={SERVICE}&ip=10.0.0.1&port={port}&ephemeral=false"
        ))
        .send()
        .await?
        .text()
        .await?;
    anyhow::ensure!(answer == "ok", "registration answered {answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_resumes_on_another_node_even_one_that_is_behind() -> anyhow::Result<()> {
    let spec = SimSpec {
        dcs: vec![("hz".into(), 2), ("sh".into(), 1)],
        links: Vec::new(),
        apply_delays: BTreeMap::from([("sh".to_owned(), Duration::from_millis(800))]),
        seed: 3,
        bind: "127.0.0.1".parse()?,
        base_port: 0,
        settings: Settings {
            log: None,
            ..raft_timings(100)
        },
    };
    let sim = Sim::start(&spec, Duration::from_secs(20)).await?;
    let nodes = sim.nodes();
    let (hz1, hz2, sh) = (&nodes[&1], &nodes[&2], &nodes[&3]);

    let mut first = watch(hz1.grpc, None).await?;
    match next(&mut first).await?.event {
        Some(watch_event::Event::Reset(_)) => {}
        other => anyhow::bail!("expected the initial snapshot, got {other:?}"),
    }
    register(hz1.http, 81).await?;
    let (port, token) = next_upsert(&mut first).await?;
    assert_eq!(port, 81);
    drop(first);

    // Another node of the same DC: the same history, no snapshot.
    register(hz1.http, 82).await?;
    let mut on_hz2 = watch(hz2.grpc, Some(token.clone())).await?;
    assert_eq!(next_upsert(&mut on_hz2).await?.0, 82);

    // A node 800 ms behind: it waits to catch up to the token, then sends
    // only what came after it, never an older snapshot.
    let mut on_sh = watch(sh.grpc, Some(token.clone())).await?;
    let (port, later) = next_upsert(&mut on_sh).await?;
    assert_eq!(port, 82, "the change after the token, and only it");
    assert!(later.revision > token.revision);
    register(hz1.http, 83).await?;
    assert_eq!(next_upsert(&mut on_sh).await?.0, 83);

    sim.stop().await;
    Ok(())
}
