//! Ephemeral ownership across nodes, with real processes and the official
//! Rust Nacos client (`nacos-sdk`). Three `understudy` nodes, each on a
//! Nacos port pair (P, P + 1000). A provider that knows two nodes and a
//! provider that knows only one are connected to the same node, which is
//! then SIGKILLed. A subscriber on the third node must never see the first
//! provider's instance disappear (its client reconnects to the other node
//! within the owner grace period and re-registers, which moves the
//! instance in place), and must see the second provider's instance removed
//! once the grace period is over (its client has nowhere to go).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::naming::{client, History};
use common::{agreed_leader, start, Proc};
use nacos_sdk::api::naming::ServiceInstance;

const SERVICE: &str = "com.example.Owned";
/// Long enough for the SDK to notice (a health check every 5 s) and reconnect.
const GRACE_MS: u64 = 20_000;
const MOVING: &str = "10.1.0.1:8080";
const STRANDED: &str = "10.1.0.2:8080";

fn instance(endpoint: &str) -> ServiceInstance {
    let (ip, port) = endpoint.split_once(':').expect("ip:port");
    ServiceInstance {
        ip: ip.to_owned(),
        port: port.parse().expect("a port"),
        ..ServiceInstance::default()
    }
}

/// How many gRPC connections a node holds, from its metrics.
async fn connections(http: &reqwest::Client, node: &Proc) -> u64 {
    let text = http
        .get(format!("http://127.0.0.1:{}/metrics", node.http))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|line| line.strip_prefix("understudy_grpc_connections "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

async fn wait_for(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moving_within_the_grace_period_keeps_its_instance_and_a_stranded_one_loses_it() {
    let http = reqwest::Client::new();
    let grace = GRACE_MS.to_string();
    let mut procs = start(
        &["dc1"; 3],
        &["--owner-grace-ms", &grace, "--quorum-loss-reset-ms", "2000"],
    );
    let mut all: Vec<&mut Proc> = procs.iter_mut().collect();
    agreed_leader(&http, &mut all, Duration::from_secs(30)).await;

    // The subscriber sits on node 3; the provider that can move knows 1 and 2.
    let subscriber = client(&[&procs[2]], "subscriber").await;
    let history = Arc::new(History::default());
    subscriber
        .subscribe(SERVICE.into(), None, vec![], history.clone())
        .await
        .expect("subscribe");
    let moving = client(&[&procs[0], &procs[1]], "moving").await;
    moving
        .register_instance(SERVICE.into(), None, instance(MOVING))
        .await
        .expect("register the moving provider");
    // Which of nodes 1 and 2 holds its connection?
    let mut holder = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while holder.is_none() {
        let counts = [
            connections(&http, &procs[0]).await,
            connections(&http, &procs[1]).await,
        ];
        holder = match counts {
            [1, 0] => Some(0),
            [0, 1] => Some(1),
            _ => None,
        };
        assert!(
            Instant::now() < deadline,
            "the moving provider is not connected to exactly one of nodes 1 and 2: {counts:?}"
        );
    }
    let holder = holder.expect("found above");
    let other = 1 - holder;
    // The stranded provider knows only the node about to be killed.
    let stranded = client(&[&procs[holder]], "stranded").await;
    stranded
        .register_instance(SERVICE.into(), None, instance(STRANDED))
        .await
        .expect("register the stranded provider");
    let both = vec![MOVING.to_owned(), STRANDED.to_owned()];
    wait_for(
        "the subscriber to see both providers",
        Duration::from_secs(10),
        || history.latest().as_ref() == Some(&both),
    )
    .await;

    let killed_at = Instant::now();
    let victim = procs[holder].id;
    procs[holder].kill();
    // The moving client reconnects to the other node and re-registers.
    let deadline = Instant::now() + Duration::from_millis(GRACE_MS);
    while connections(&http, &procs[other]).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the moving provider did not reconnect to node {} within the grace period",
            procs[other].id
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reconnected_after = killed_at.elapsed();

    // The stranded instance goes once the grace period is over...
    wait_for(
        "the stranded provider's instance to be removed",
        Duration::from_millis(GRACE_MS + 10_000),
        || history.removed_after(STRANDED, killed_at).is_some(),
    )
    .await;
    let removed_after = history
        .removed_after(STRANDED, killed_at)
        .expect("waited for above");
    assert!(
        removed_after >= Duration::from_millis(GRACE_MS),
        "the stranded instance went after {removed_after:?}, before the {GRACE_MS} ms grace period"
    );
    // ...and the moving one never went: not at the reconnect, not when its
    // old owner node was declared lost.
    assert_eq!(history.latest(), Some(vec![MOVING.to_owned()]));
    assert_eq!(
        history.lost_since(MOVING, killed_at),
        None,
        "the subscriber saw the moving provider's instance disappear"
    );
    println!(
        "node {victim} killed: the moving provider reconnected after {reconnected_after:?}, \
         the stranded provider's instance was removed after {removed_after:?} (grace {GRACE_MS} ms)"
    );
    drop(moving);
    drop(stranded);
    drop(subscriber);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_the_majority_sends_its_grpc_clients_away() {
    let http = reqwest::Client::new();
    let mut procs = start(
        &["dc1"; 3],
        &[
            "--owner-grace-ms",
            "20000",
            "--quorum-loss-reset-ms",
            "2000",
        ],
    );
    let mut all: Vec<&mut Proc> = procs.iter_mut().collect();
    agreed_leader(&http, &mut all, Duration::from_secs(30)).await;
    let client = client(&[&procs[2]], "cut-off").await;
    client
        .register_instance(SERVICE.into(), None, instance(MOVING))
        .await
        .expect("register");
    assert_eq!(connections(&http, &procs[2]).await, 1);

    // Node 3 alone is a minority: after the reset time its client must go.
    let killed_at = Instant::now();
    procs[0].kill();
    procs[1].kill();
    let deadline = killed_at + Duration::from_secs(10);
    while connections(&http, &procs[2]).await != 0 {
        assert!(
            Instant::now() < deadline,
            "node 3 kept its gRPC client 10 s after losing its majority"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent_away = killed_at.elapsed();
    assert!(
        sent_away >= Duration::from_millis(2_000),
        "the client was sent away after {sent_away:?}, before the 2 s reset time"
    );
    println!("node 3 sent its client away {sent_away:?} after losing its majority");
    drop(client);
}
