//! Three `understudy` processes form a cluster; clients register
//! persistent instances through every node while the leader's process is
//! SIGKILLed. Every registration that was acknowledged must be on both
//! survivors once they agree on a new leader. The test prints how many
//! writes were acknowledged, lost (must be 0) and how long writes were
//! unavailable.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

const SERVICE: &str = "com.example.Ledger";

struct Proc {
    id: u64,
    http: u16,
    child: Option<Child>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port the OS just had free.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start(n: u64) -> Vec<Proc> {
    // Distinct ports: the OS may hand a just-released port out again.
    let mut taken = BTreeSet::new();
    let mut port = || loop {
        let p = free_port();
        if taken.insert(p) {
            return p;
        }
    };
    let ports: Vec<(u16, u16, u16)> = (0..n).map(|_| (port(), port(), port())).collect();
    (1..=n)
        .map(|id| {
            let (http, grpc, raft) = ports[(id - 1) as usize];
            let mut command = Command::new(env!("CARGO_BIN_EXE_understudy"));
            for (key, _) in std::env::vars() {
                if key.starts_with("UNDERSTUDY_") {
                    command.env_remove(key);
                }
            }
            command.args([
                "--node-id",
                &id.to_string(),
                "--http-port",
                &http.to_string(),
                "--grpc-port",
                &grpc.to_string(),
                "--raft-port",
                &raft.to_string(),
                "--raft-heartbeat-ms",
                "50",
                "--raft-election-timeout-ms",
                "300",
                "--write-timeout-ms",
                "2000",
                "--log",
                // Peers refusing connections after the kill are expected.
                "error,openraft=off",
            ]);
            for peer in (1..=n).filter(|p| *p != id) {
                command.args([
                    "--peer",
                    &format!("{peer}=127.0.0.1:{}", ports[(peer - 1) as usize].2),
                ]);
            }
            let child = command
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("the understudy binary starts");
            Proc {
                id,
                http,
                child: Some(child),
            }
        })
        .collect()
}

async fn status(client: &reqwest::Client, http: u16) -> Option<Value> {
    let reply = client
        .get(format!("http://127.0.0.1:{http}/understudy/v1/cluster"))
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .ok()?;
    reply.json().await.ok()
}

/// Waits until every node in `nodes` names the same leader, one of them.
async fn agreed_leader(client: &reqwest::Client, nodes: &mut [&mut Proc], within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let mut leaders = BTreeSet::new();
        for p in nodes.iter() {
            let leader = status(client, p.http)
                .await
                .and_then(|s| s["leader"].as_u64());
            leaders.insert(leader);
        }
        if leaders.len() == 1 {
            if let Some(Some(leader)) = leaders.iter().next().copied() {
                if nodes.iter().any(|p| p.id == leader) {
                    return leader;
                }
            }
        }
        for p in nodes.iter_mut() {
            if let Some(Ok(Some(exit))) = p.child.as_mut().map(Child::try_wait) {
                panic!("node {} exited early: {exit}", p.id);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leader among the nodes: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
    let mut procs = start(3);
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
    if let Some(mut child) = victim.child.take() {
        child.kill().expect("SIGKILL the leader");
        let _ = child.wait();
    }
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
