//! Past capacity: a node with few request slots and slow applies is
//! flooded with registrations over HTTP and gRPC. It must answer the
//! excess at once with a busy error, keep every heartbeated instance
//! healthy (beats take no slot), keep its work bounded, and serve at full
//! rate again once the flood stops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::StreamExt as _;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, WatchRequest};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::Server;

const SLOTS: usize = 8;
const KEPT: u16 = 5;
const FLOOD: Duration = Duration::from_secs(4);

/// Resident memory of this process (server and clients), bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    busy: AtomicU64,
    other: AtomicU64,
}

impl Tally {
    fn get(&self) -> (u64, u64, u64) {
        (
            self.ok.load(Ordering::Relaxed),
            self.busy.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
        )
    }
}

async fn register(
    http: &reqwest::Client,
    server: &Server,
    service: &str,
    port: u32,
) -> (u16, String, bool) {
    let reply = http
        .post(server.url("/nacos/v1/ns/instance"))
        .form(&[
            ("serviceName", service),
            ("ip", "10.5.0.1"),
            ("port", &(port % 60_000 + 1).to_string()),
            ("ephemeral", "false"),
        ])
        .send()
        .await
        .expect("the server answers");
    let status = reply.status().as_u16();
    let retry_after = reply.headers().get("retry-after").is_some();
    (status, reply.text().await.unwrap_or_default(), retry_after)
}

/// The `understudy_requests_in_progress` gauge.
async fn in_progress(http: &reqwest::Client, server: &Server) -> f64 {
    let text = http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("understudy_requests_in_progress "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the gauge is scraped")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooded_node_sheds_with_busy_keeps_beaten_instances_healthy_and_recovers() {
    let server = Arc::new(
        Server::start(Settings {
            max_concurrent_requests: Some(SLOTS),
            request_queue_timeout_ms: Some(50),
            // Every write waits 100 ms to become visible: slots stay taken.
            apply_delay: Some(vec!["dc1=100ms".to_owned()]),
            beat_interval_ms: Some(300),
            unhealthy_timeout_ms: Some(1_200),
            delete_timeout_ms: Some(2_400),
            ..Settings::default()
        })
        .await
        .unwrap(),
    );
    let http = reqwest::Client::new();

    // Heartbeated instances, and a watch that sees any health change.
    for port in 1..=KEPT {
        let reply = http
            .post(server.url("/nacos/v1/ns/instance"))
            .form(&[
                ("serviceName", "kept"),
                ("ip", "10.4.0.1"),
                ("port", &port.to_string()),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
    }
    let mut watch = RegistryClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap()
        .watch(WatchRequest {
            service: "kept".to_owned(),
            ..WatchRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let snapshot = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("a snapshot")
        .expect("open")
        .expect("not an error");
    assert!(matches!(snapshot.event, Some(watch_event::Event::Reset(_))));
    let unhealthy_seen = Arc::new(AtomicU64::new(0));
    let watching = {
        let unhealthy_seen = unhealthy_seen.clone();
        tokio::spawn(async move {
            while let Some(Ok(event)) = watch.next().await {
                let Some(watch_event::Event::Change(c)) = event.event else {
                    continue;
                };
                match c.kind {
                    Some(change::Kind::Upsert(i)) if !i.healthy => {
                        unhealthy_seen.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(change::Kind::Removed(_)) => {
                        unhealthy_seen.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        })
    };
    let beats_failed = Arc::new(AtomicU64::new(0));
    let beating = tokio_util::sync::CancellationToken::new();
    let mut beaters = Vec::new();
    for port in 1..=KEPT {
        let (server, http, failed, stop) = (
            server.clone(),
            http.clone(),
            beats_failed.clone(),
            beating.clone(),
        );
        beaters.push(tokio::spawn(async move {
            let url = server.url(&format!(
                "/nacos/v1/ns/instance/beat?serviceName=kept&ip=10.4.0.1&port={port}"
            ));
            while !stop.is_cancelled() {
                let ok = http
                    .put(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }));
    }

    // The flood: HTTP registrations and Nacos gRPC registrations.
    let rss_before = rss();
    let http_tally = Arc::new(Tally::default());
    let grpc_tally = Arc::new(Tally::default());
    let next_port = Arc::new(AtomicU64::new(0));
    let flooding = tokio_util::sync::CancellationToken::new();
    let mut flood = Vec::new();
    for task in 0..48 {
        let (server, http, tally, ports, stop) = (
            server.clone(),
            http.clone(),
            http_tally.clone(),
            next_port.clone(),
            flooding.clone(),
        );
        flood.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let port = ports.fetch_add(1, Ordering::Relaxed) as u32;
                let (status, body, retry_after) =
                    register(&http, &server, &format!("flood-{}", task % 4), port).await;
                let counter = match status {
                    200 => &tally.ok,
                    503 if retry_after && body.contains("max_concurrent_requests") => &tally.busy,
                    _ => &tally.other,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in 0..16_u16 {
        let client = RawClient::connect(server.grpc, None).await.unwrap();
        let (tally, stop) = (grpc_tally.clone(), flooding.clone());
        flood.push(tokio::spawn(async move {
            let mut port = 1;
            while !stop.is_cancelled() {
                port = port % 1000 + 1;
                let counter = match client
                    .register(&format!("grpc-flood-{task}"), "10.6.0.1", port)
                    .await
                {
                    Ok(()) => &tally.ok,
                    Err(e)
                        if format!("{e:#}").contains("\"errorCode\":503")
                            && format!("{e:#}").contains("max_concurrent_requests") =>
                    {
                        &tally.busy
                    }
                    Err(_) => &tally.other,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut rss_peak = rss_before;
    let mut most_in_progress = 0.0_f64;
    let flood_ends = tokio::time::Instant::now() + FLOOD;
    while tokio::time::Instant::now() < flood_ends {
        rss_peak = rss_peak.max(rss());
        most_in_progress = most_in_progress.max(in_progress(&http, &server).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    flooding.cancel();
    for task in flood {
        task.await.unwrap();
    }
    let (http_ok, http_busy, http_other) = http_tally.get();
    let (grpc_ok, grpc_busy, grpc_other) = grpc_tally.get();
    println!(
        "overload: http ok {http_ok} busy {http_busy} other {http_other}; grpc ok {grpc_ok} busy {grpc_busy} other {grpc_other}; \
         most in progress {most_in_progress}; rss {} -> peak {} MiB",
        rss_before >> 20,
        rss_peak >> 20
    );
    assert!(
        http_busy > 0 && grpc_busy > 0,
        "the excess is refused as busy"
    );
    assert!(http_ok > 0 && grpc_ok > 0, "the slots keep working");
    assert_eq!((http_other, grpc_other), (0, 0), "no other kind of failure");
    assert!(
        most_in_progress <= SLOTS as f64,
        "work in progress stays within the slots: {most_in_progress}"
    );
    assert!(
        rss_peak.saturating_sub(rss_before) < 128 << 20,
        "memory grew by {} MiB under the flood",
        (rss_peak - rss_before) >> 20
    );

    // Load dropped to what the slots hold: every registration goes through.
    let recovered_from = tokio::time::Instant::now();
    let mut after = Vec::new();
    for task in 0..SLOTS as u32 {
        let (server, http) = (server.clone(), http.clone());
        after.push(tokio::spawn(async move {
            for n in 0..5 {
                let (status, body, _) = register(&http, &server, "after", task * 10 + n).await;
                assert_eq!(status, 200, "after the flood: {body}");
            }
        }));
    }
    for task in after {
        task.await.unwrap();
    }
    println!(
        "overload: {} registrations after the flood, none refused, in {:?}",
        SLOTS * 5,
        recovered_from.elapsed()
    );
    assert_eq!(
        in_progress(&http, &server).await,
        0.0,
        "every slot is free again"
    );

    beating.cancel();
    for task in beaters {
        task.await.unwrap();
    }
    assert_eq!(
        beats_failed.load(Ordering::Relaxed),
        0,
        "no heartbeat was refused"
    );
    let listed = server.instance_list("serviceName=kept").await;
    let hosts = listed["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), usize::from(KEPT), "{listed}");
    assert!(hosts.iter().all(|h| h["healthy"] == true), "{listed}");
    assert_eq!(
        unhealthy_seen.load(Ordering::Relaxed),
        0,
        "no heartbeated instance went unhealthy or away during the flood"
    );
    watching.abort();
    Arc::into_inner(server)
        .expect("every task is done")
        .stop()
        .await
        .unwrap();
}
