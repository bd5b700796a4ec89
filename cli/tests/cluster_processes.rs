//! Three `understudy` processes form a cluster; clients register
//! persistent instances through every node while the leader's process is
//! SIGKILLed. Every registration that was acknowledged must be on both
//! survivors once they agree on a new leader. The test prints how many
//! writes were acknowledged, lost (must be 0) and how long writes were
//! unavailable.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{agreed_leader, start, Proc};
use serde_json::Value;

const SERVICE: &str = "com.example.Ledger";

async fn register(client: &reqwest::Client, http: u16, port: u32) -> bool {
    let url = format!(
        "http://127.0.0.1:{http}/nacos/v1/ns/instance?serviceName={SERVICE}&ip=10.9.{}.{}&port={}&ephemeral=false",
        port / 250,
        port % 250,
        port
    );
    match client
        .post(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(reply) => reply.status().is_success() && reply.text().await.is_ok_and(|t| t == "ok"),
        Err(_) => false,
    }
}

async fn listed(client: &reqwest::Client, http: u16) -> BTreeSet<u32> {
    let url = format!("http://127.0.0.1:{http}/nacos/v1/ns/instance/list?serviceName={SERVICE}");
    let body: Value = client
        .get(url)
        .send()
        .await
        .expect("a survivor answers")
        .json()
        .await
        .expect("a JSON list");
    body["hosts"]
        .as_array()
        .map(|hosts| {
            hosts
                .iter()
                .filter_map(|h| h["port"].as_u64())
                .map(|p| p as u32)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_registrations_survive_the_leader_process_being_killed() {
    let client = reqwest::Client::new();
    let mut procs = start(&["dc1"; 3], &[]);
    let mut all: Vec<&mut Proc> = procs.iter_mut().collect();
    let leader = agreed_leader(&client, &mut all, Duration::from_secs(30)).await;

    let acked = Arc::new(Mutex::new(Vec::<(u32, Instant)>::new()));
    let dead = Arc::new(Mutex::new(None::<u16>));
    let https: Vec<u16> = procs.iter().map(|p| p.http).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u32 {
        let (client, acked, dead, https, stop) = (
            client.clone(),
            acked.clone(),
            dead.clone(),
            https.clone(),
            stop.clone(),
        );
        writers.push(tokio::spawn(async move {
            let mut k = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let port = 1 + w * 100_000 + k;
                k += 1;
                // Spread writes over the nodes, skipping the killed one.
                let target = https[(k as usize + w as usize) % https.len()];
                if *dead.lock().unwrap() == Some(target) {
                    continue;
                }
                if register(&client, target, port).await {
                    acked.lock().unwrap().push((port, Instant::now()));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let victim = procs
        .iter_mut()
        .find(|p| p.id == leader)
        .expect("the leader's process");
    *dead.lock().unwrap() = Some(victim.http);
    let killed_at = Instant::now();
    victim.kill();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer");
    }

    let mut survivors: Vec<&mut Proc> = procs.iter_mut().filter(|p| p.id != leader).collect();
    let new_leader = agreed_leader(&client, &mut survivors, Duration::from_secs(30)).await;
    assert_ne!(new_leader, leader);
    let acked = acked.lock().unwrap().clone();
    let wanted: BTreeSet<u32> = acked.iter().map(|(p, _)| *p).collect();
    let after_kill: Vec<Instant> = acked
        .iter()
        .map(|(_, at)| *at)
        .filter(|at| *at > killed_at)
        .collect();
    assert!(
        !after_kill.is_empty(),
        "no write was acknowledged after the kill"
    );
    let unavailable = after_kill
        .iter()
        .min()
        .map_or(Duration::ZERO, |first| first.duration_since(killed_at));
    // Both survivors hold every acknowledged registration (the follower
    // may trail the new leader by a moment).
    let mut lost = wanted.len();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        lost = 0;
        for p in &survivors {
            let present = listed(&client, p.http).await;
            lost = lost.max(wanted.difference(&present).count());
        }
        if lost == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "acknowledged {} writes ({} after the kill), lost {lost}, writes unavailable for {:?} after SIGKILL of leader {leader}; new leader {new_leader}",
        wanted.len(),
        after_kill.len(),
        unavailable
    );
    assert!(
        wanted.len() > 20,
        "too few writes to mean anything: {}",
        wanted.len()
    );
    assert_eq!(lost, 0, "acknowledged registrations lost");
}

/// The comparison's failover and durable modes and the cost curves,
/// briefly, on this build's binary: one leader kill finds no acknowledged
/// write lost and measures a window; a durable node registers, and
/// reports its bytes on disk; every curve gets its points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failover_and_durable_measurements_run_on_real_processes() -> anyhow::Result<()> {
    use understudy_benches::load::{self, compare, failover};
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_understudy"));
    let mut cluster = compare::start_understudy(binary, 3, true, &[]).await?;
    let run = failover::run(&mut cluster, 1).await?;
    println!("{run}");
    assert_eq!(run.missed, Some(0), "{run}");
    assert!(run.ops > 0 && run.max_ms.is_some(), "{run}");
    drop(cluster);
    let node = compare::start_understudy(binary, 1, true, &[]).await?;
    let memory = load::memory(node.target(), 50, 4).await?;
    assert_eq!(memory.ops, 200, "{memory}");
    let on_disk = node.disk_bytes();
    assert!(on_disk > 0, "the data dir holds {on_disk} bytes");
    drop(node);
    // The cost curves, tiny: every curve gets a point per size, and the
    // SVG draws each.
    let plan = load::curves::Plan {
        understudy: binary.to_owned(),
        rnacos: None,
        instances: vec![100, 300],
        subscribers: vec![5, 10],
        connections: vec![1, 2],
        seconds: 0.2,
    };
    let points = load::curves::run(&plan).await?;
    // Two points on each single-node curve, and the 3-node cluster's
    // register throughput through its leader and through its followers.
    assert_eq!(points.len(), 12, "{points:?}");
    assert!(points.iter().all(|p| p.y > 0.0), "{points:?}");
    let cluster = points
        .iter()
        .filter(|p| p.server.starts_with("understudy×3 via "));
    assert_eq!(cluster.count(), 4, "{points:?}");
    let svg = load::curves::svg(&points);
    // A line per server (understudy and the cluster through its leader and
    // through its followers) in each of the four panels.
    assert_eq!(svg.matches("<polyline").count(), 12, "{svg}");
    assert_eq!(svg.matches("<circle").count(), 12, "{svg}");
    Ok(())
}
