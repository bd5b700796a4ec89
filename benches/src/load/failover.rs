//! Failover: how long a cluster refuses writes after its leader is killed,
//! and whether any acknowledged write is lost. Writers on every node
//! register persistent instances over HTTP v1, each a new one, paced; the
//! leader is killed with SIGKILL, the window is the time from the kill to
//! the first acknowledgement of a write sent after it, and the killed node
//! is started again (same data dir) before the next kill. At the end every
//! acknowledged instance must be listed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::compare::Spawned;
use super::http::HttpConn;
use super::{histogram, micros, Run};

/// Services the writes spread over.
const SERVICES: u64 = 16;
/// Writers per node.
const WRITERS: usize = 2;
/// The pause between one writer's writes.
const PACE: Duration = Duration::from_millis(5);
/// Longest a write may take before it counts as refused.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// One acknowledged write: when it was sent, when its answer came, and
/// the instance it registered.
#[derive(Debug, Clone, Copy)]
struct Ack {
    sent: Instant,
    answered: Instant,
    n: u64,
}

fn service(n: u64) -> String {
    format!("failover-{}", n % SERVICES)
}

fn ip(n: u64) -> String {
    format!("10.{}.{}.{}", 64 + (n >> 16) % 64, (n >> 8) % 256, n % 256)
}

/// Kills the leader `kills` times under paced writes; the run's latencies
/// are the windows without writes, `missed` the acknowledged writes lost.
pub async fn run(cluster: &mut Spawned, kills: usize) -> anyhow::Result<Run> {
    let target = cluster.target().clone();
    let nodes = target.http.len();
    anyhow::ensure!(nodes >= 3, "failover needs at least 3 nodes");
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Vec::<Ack>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for w in 0..nodes * WRITERS {
        let addr = target.http[w % nodes];
        let (stop, acks, next) = (stop.clone(), acks.clone(), next.clone());
        writers.push(tokio::spawn(async move {
            let mut conn: Option<HttpConn> = None;
            while !stop.load(Ordering::Relaxed) {
                let Some(open) = conn.as_mut() else {
                    match tokio::time::timeout(WRITE_TIMEOUT, HttpConn::connect(addr)).await {
                        Ok(Ok(opened)) => conn = Some(opened),
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                    continue;
                };
                let n = next.fetch_add(1, Ordering::Relaxed);
                let path = format!(
                    "/nacos/v1/ns/instance?serviceName={}&ip={}&port=8000&ephemeral=false",
                    service(n),
                    ip(n)
                );
                let sent = Instant::now();
                let answer = open.send(hyper::Method::POST, &path);
                match tokio::time::timeout(WRITE_TIMEOUT, answer).await {
                    Ok(Ok((status, body))) if status.is_success() && &body[..] == b"ok" => {
                        let answered = Instant::now();
                        acks.lock().expect("acks").push(Ack { sent, answered, n });
                    }
                    // Refused: the connection stays.
                    Ok(Ok(_)) => {}
                    // Broken or stuck: open another.
                    _ => conn = None,
                }
                tokio::time::sleep(PACE).await;
            }
        }));
    }
    let started = Instant::now();
    let mut windows = histogram();
    let mut restarted: Option<(usize, u64)> = None;
    for _ in 0..kills {
        let (leader, revision) = steady(&target.http, restarted).await?;
        // Writes flow before the kill.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killed_at = Instant::now();
        cluster.kill(leader)?;
        let deadline = killed_at + Duration::from_secs(30);
        let survivor = target.http[(leader + 1) % nodes];
        let mut elected = None;
        let window = loop {
            if elected.is_none() {
                let known = status(survivor).await.and_then(|s| s["leader"].as_u64());
                if known.is_some_and(|id| id != leader as u64 + 1) {
                    elected = Some(killed_at.elapsed());
                }
            }
            let first = acks
                .lock()
                .expect("acks")
                .iter()
                .filter(|a| a.sent >= killed_at)
                .map(|a| a.answered)
                .min();
            if let Some(answered) = first {
                break answered - killed_at;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "no write was accepted within 30 s of killing node {}",
                leader + 1
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let elected = match elected {
            Some(after) => format!("{:.0} ms", after.as_secs_f64() * 1000.0),
            None => "—".to_owned(),
        };
        println!(
            "  failover: killed leader node {}; a survivor named a new leader after {elected}, writes accepted again after {:.0} ms",
            leader + 1,
            window.as_secs_f64() * 1000.0
        );
        windows.record(micros(window))?;
        cluster.restart(leader)?;
        restarted = Some((leader, revision));
    }
    steady(&target.http, restarted).await?;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await?;
    }
    let acked: Vec<u64> = acks.lock().expect("acks").iter().map(|a| a.n).collect();
    let lost = lost(&target.http, &acked).await?;
    let mut run = Run::new(
        "failover",
        &target,
        format!("{nodes} durable nodes, {kills} leader kills"),
    )
    .timed(acked.len() as u64, started.elapsed(), None)
    .latencies(&windows);
    run.missed = Some(lost);
    Ok(run)
}

/// Node `n`'s cluster status, if it answers.
async fn status(addr: std::net::SocketAddr) -> Option<serde_json::Value> {
    let ask = async {
        let mut conn = HttpConn::connect(addr).await.ok()?;
        let (status, body) = conn
            .send(hyper::Method::GET, "/understudy/v1/cluster")
            .await
            .ok()?;
        status
            .is_success()
            .then(|| serde_json::from_slice(&body).ok())
            .flatten()
    };
    tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .ok()
        .flatten()
}

/// Waits until every node answers and names the same leader, and a node
/// started again has applied up to `restarted`'s revision; returns the
/// leader (counting from 0) and its revision.
pub(super) async fn steady(
    http: &[std::net::SocketAddr],
    restarted: Option<(usize, u64)>,
) -> anyhow::Result<(usize, u64)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut leaders = BTreeSet::new();
        let mut revisions = Vec::new();
        for addr in http {
            let s = status(*addr).await;
            leaders.insert(s.as_ref().and_then(|s| s["leader"].as_u64()));
            revisions.push(s.and_then(|s| s["revision"].as_u64()));
        }
        let caught_up = match restarted {
            Some((n, revision)) => revisions[n].is_some_and(|r| r >= revision),
            None => true,
        };
        match leaders.into_iter().collect::<Vec<_>>()[..] {
            [Some(id)] if caught_up => {
                let leader = usize::try_from(id)? - 1;
                return Ok((leader, revisions[leader].unwrap_or(0)));
            }
            ref seen => last = format!("leaders {seen:?}, revisions {revisions:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the cluster did not settle on one leader within 60 s: {last}")
}

/// How many of the `acked` instances no node lists, once every node has
/// the same revision.
async fn lost(http: &[std::net::SocketAddr], acked: &[u64]) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut revisions = BTreeSet::new();
        for addr in http {
            let s = status(*addr).await;
            revisions.insert(s.and_then(|s| s["revision"].as_u64()));
        }
        if revisions.len() == 1 && !revisions.contains(&None) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the nodes did not reach one revision within 30 s: {revisions:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut listed = BTreeSet::new();
    let mut conn = HttpConn::connect(http[0]).await?;
    for s in 0..SERVICES {
        let path = format!("/nacos/v1/ns/instance/list?serviceName={}", service(s));
        let (status, body) = conn.send(hyper::Method::GET, &path).await?;
        anyhow::ensure!(status.is_success(), "listing answered {status}");
        let answer: serde_json::Value = serde_json::from_slice(&body)?;
        for host in answer["hosts"].as_array().into_iter().flatten() {
            if let Some(ip) = host["ip"].as_str() {
                listed.insert(ip.to_owned());
            }
        }
    }
    Ok(acked.iter().filter(|n| !listed.contains(&ip(**n))).count() as u64)
}
