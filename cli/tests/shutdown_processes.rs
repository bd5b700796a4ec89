//! Graceful shutdown of the leader of a 3-node cluster, with real
//! processes and the official Rust Nacos client (`nacos-sdk`). Providers
//! that know every node are connected, at least one of them to the
//! leader; the leader gets SIGTERM. It must hand leadership over, send
//! its clients away and exit 0; the clients must end up on the other two
//! nodes, and a subscriber there must never see a provider's instance go.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::naming::{client, History};
use common::{agreed_leader, start, Proc};
use nacos_sdk::api::naming::ServiceInstance;

const SERVICE: &str = "com.example.Drained";

/// How many gRPC connections each node holds, from its metrics (0 for a
/// node that does not answer).
async fn connections(http: &reqwest::Client, nodes: &[&Proc]) -> Vec<u64> {
    let mut counts = Vec::new();
    for node in nodes {
        let text = match http
            .get(format!("http://127.0.0.1:{}/metrics", node.http))
            .timeout(Duration::from_secs(2))
            .send()
            .await
        {
            Ok(reply) => reply.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let count = text
            .lines()
            .find_map(|line| line.strip_prefix("understudy_grpc_connections "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64);
        counts.push(count);
    }
    counts
}

async fn wait_for<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_hands_over_and_moves_its_clients_without_losing_a_registration() {
    let http = reqwest::Client::new();
    let mut procs = start(&["dc1"; 3], &["--shutdown-grace-ms", "5000"]);
    let mut all: Vec<&mut Proc> = procs.iter_mut().collect();
    let leader_id = agreed_leader(&http, &mut all, Duration::from_secs(30)).await;
    let leader = procs.iter().position(|p| p.id == leader_id).unwrap();
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();

    // The subscriber sits on a node that stays.
    let subscriber = client(&[&procs[others[1]]], "subscriber").await;
    let history = Arc::new(History::default());
    subscriber
        .subscribe(SERVICE.into(), None, vec![], history.clone())
        .await
        .expect("subscribe");

    // Providers that know every node (the leader first); add them until
    // one is on the leader.
    let mut everyone: Vec<&Proc> = procs.iter().collect();
    everyone.swap(0, leader);
    let leader_at = 0;
    let mut providers = Vec::new();
    let mut endpoints = Vec::new();
    let mut on_leader = 0;
    while on_leader == 0 || providers.len() < 3 {
        assert!(
            providers.len() < 24,
            "no provider connected to the leader among {}",
            providers.len()
        );
        let before = connections(&http, &everyone).await;
        let n = providers.len() + 1;
        let provider = client(&everyone, &format!("provider-{n}")).await;
        let endpoint = format!("10.9.0.{n}:8080");
        provider
            .register_instance(
                SERVICE.into(),
                None,
                ServiceInstance {
                    ip: format!("10.9.0.{n}"),
                    port: 8080,
                    ..ServiceInstance::default()
                },
            )
            .await
            .expect("register a provider");
        let total: u64 = before.iter().sum::<u64>() + 1;
        let deadline = Instant::now() + Duration::from_secs(10);
        let after = loop {
            let now = connections(&http, &everyone).await;
            if now.iter().sum::<u64>() == total {
                break now;
            }
            assert!(
                Instant::now() < deadline,
                "the provider never connected: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        on_leader += after[leader_at] - before[leader_at];
        providers.push(provider);
        endpoints.push(endpoint);
    }
    endpoints.sort();
    let clients = providers.len() as u64 + 1;
    wait_for(
        "the subscriber to see every provider",
        Duration::from_secs(10),
        || {
            let seen = history.latest();
            let want = endpoints.clone();
            async move { seen == Some(want) }
        },
    )
    .await;

    let stopped_at = Instant::now();
    let status = procs[leader].terminate(Duration::from_secs(15)).await;
    let stop_took = stopped_at.elapsed();
    assert!(status.success(), "the leader exited with {status}");

    // The others lead on their own; every client is on them.
    let mut survivors: Vec<&mut Proc> = procs
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, p)| p)
        .collect();
    let new_leader = agreed_leader(&http, &mut survivors, Duration::from_secs(10)).await;
    assert_ne!(new_leader, leader_id);
    let remaining: Vec<&Proc> = others.iter().map(|i| &procs[*i]).collect();
    wait_for(
        "every client to reconnect to the other nodes",
        Duration::from_secs(20),
        || {
            let http = &http;
            let remaining = &remaining;
            async move { connections(http, remaining).await.iter().sum::<u64>() == clients }
        },
    )
    .await;
    let moved_after = stopped_at.elapsed();

    // No registration was lost: the survivors list every provider, and the
    // subscriber never saw the list change.
    for node in &remaining {
        let answer: serde_json::Value = http
            .get(format!(
                "http://127.0.0.1:{}/nacos/v1/ns/instance/list?serviceName={SERVICE}",
                node.http
            ))
            .send()
            .await
            .expect("a survivor answers")
            .json()
            .await
            .expect("a ServiceInfo");
        let mut listed: Vec<String> = answer["hosts"]
            .as_array()
            .expect("hosts")
            .iter()
            .map(|h| format!("{}:{}", h["ip"].as_str().unwrap(), h["port"]))
            .collect();
        listed.sort();
        assert_eq!(listed, endpoints, "node {} lost a registration", node.id);
    }
    assert_eq!(
        history.differed_since(&endpoints, stopped_at),
        None,
        "the subscriber saw a provider's instance go"
    );
    println!(
        "leader {leader_id} stopped in {stop_took:?} (exit 0); node {new_leader} leads; \
         {on_leader} of {} providers moved off it, all {clients} clients on the others after {moved_after:?}",
        providers.len()
    );
    drop(providers);
    drop(subscriber);
}
