//! The chaos admin API across real processes: three `understudy` nodes in
//! DCs hz, hz, sh with a link model from their flags. A partition asked of
//! one node reaches every node (out of band), stalls sh's view while the
//! cluster still reports on it, refuses writes through sh naming the cut,
//! and a heal asked of sh itself undoes it everywhere.

mod common;

use std::time::{Duration, Instant};

use common::{agreed_leader, start};
use serde_json::Value;

async fn get(client: &reqwest::Client, http: u16, path: &str) -> Value {
    client
        .get(format!("http://127.0.0.1:{http}{path}"))
        .send()
        .await
        .expect("the node answers")
        .json()
        .await
        .expect("a JSON answer")
}

async fn post(client: &reqwest::Client, http: u16, path: &str) -> (u16, String) {
    let answer = client
        .post(format!("http://127.0.0.1:{http}{path}"))
        .send()
        .await
        .expect("the node answers");
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap_or_default())
}

fn cut(state: &Value, from: &str, to: &str) -> Option<bool> {
    state["faults"]["links"]
        .as_array()?
        .iter()
        .find(|l| l["from"] == from && l["to"] == to)
        .map(|l| l["cut"] == true)
}

/// Node `id`'s view lag as node `asked` reports it out of band.
async fn lag_of(client: &reqwest::Client, asked: u16, id: u64) -> Option<u64> {
    let report = get(client, asked, "/understudy/v1/cluster/nodes").await;
    report["nodes"].as_array()?.iter().find(|n| n["id"] == id)?["status"]["viewLagMs"].as_u64()
}

async fn wait_for<F, Fut>(what: &str, within: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_set_through_one_node_acts_everywhere_and_heals_through_another() {
    let mut nodes = start(
        &["hz", "hz", "sh"],
        &["--link", "hz-sh=10ms", "--chaos-seed", "5"],
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut all: Vec<&mut common::Proc> = nodes.iter_mut().collect();
    let leader = agreed_leader(&client, &mut all, Duration::from_secs(20)).await;
    let (hz, sh) = (nodes[0].http, nodes[2].http);

    // The link model came from the flags, on every node.
    let state = get(&client, sh, "/understudy/v1/chaos").await;
    assert_eq!(cut(&state, "hz", "sh"), Some(false), "{state}");
    assert_eq!(state["faults"]["links"][0]["latencyMs"], 10, "{state}");
    assert_eq!(state["faults"]["seed"], 5);

    // Bad input is refused by name, changing nothing.
    let (status, body) = post(&client, hz, "/understudy/v1/chaos/links?link=hz-sh=40").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("link") && body.contains("unit"), "{body}");
    let (status, body) = post(&client, hz, "/understudy/v1/chaos/partition?a=hz").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("'b'") || body.contains("b"), "{body}");
    // Only `understudy sim` kills a node on request: these are processes.
    let (status, body) = post(&client, hz, "/understudy/v1/chaos/kill?node=3").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("node") && body.contains("understudy sim"),
        "{body}"
    );

    wait_for("sh catches up first", Duration::from_secs(10), || async {
        lag_of(&client, hz, 3).await.is_some_and(|lag| lag < 500)
    })
    .await;

    // Partition through node 1: node 3 hears of it out of band.
    let (status, body) = post(&client, hz, "/understudy/v1/chaos/partition?a=hz&b=sh").await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["unreached"], serde_json::json!([]), "{body}");
    assert_eq!(
        cut(&get(&client, sh, "/understudy/v1/chaos").await, "sh", "hz"),
        Some(true)
    );

    // sh's view stops while node 1 still reports on it; hz keeps a leader.
    wait_for(
        "sh's view lag passes 1.5 s",
        Duration::from_secs(10),
        || async { lag_of(&client, hz, 3).await.is_some_and(|lag| lag > 1_500) },
    )
    .await;
    let hz_lag = lag_of(&client, hz, 1).await.expect("node 1 reports itself");
    assert!(hz_lag < 1_000, "hz still applies ticks: {hz_lag} ms");
    if leader == 3 {
        // sh led: hz elects one of its own.
        let mut hz_nodes: Vec<&mut common::Proc> = nodes.iter_mut().take(2).collect();
        agreed_leader(&client, &mut hz_nodes, Duration::from_secs(20)).await;
    }
    let register =
        "/nacos/v1/ns/instance?serviceName=chaos.admin&ip=10.0.0.1&port=80&ephemeral=false";
    let (status, body) = post(&client, sh, register).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("is cut"), "{body}");
    let (status, body) = post(&client, hz, register).await;
    assert_eq!((status, body.as_str()), (200, "ok"));

    // Heal through node 3, the one cut off: node 1 hears of it.
    let (status, body) = post(&client, sh, "/understudy/v1/chaos/heal").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        cut(&get(&client, hz, "/understudy/v1/chaos").await, "hz", "sh"),
        Some(false)
    );
    let took = wait_for("sh catches up", Duration::from_secs(10), || async {
        let list = get(
            &client,
            sh,
            "/nacos/v1/ns/instance/list?serviceName=chaos.admin",
        )
        .await;
        lag_of(&client, sh, 3).await.is_some_and(|lag| lag < 500)
            && list["hosts"].as_array().is_some_and(|h| h.len() == 1)
    })
    .await;
    println!("sh converged {took:?} after the heal");

    let metrics = client
        .get(format!("http://127.0.0.1:{sh}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for family in [
        "understudy_view_lag_seconds{dc=\"sh\",node=\"3\"}",
        "understudy_raft_last_applied{dc=\"sh\",node=\"3\"}",
        "understudy_register_visible_seconds",
    ] {
        assert!(metrics.contains(family), "{family} missing from /metrics");
    }
}
