//! A replicated cluster in one process, over real raft RPCs on port 0
//! with injected link faults: writes through any node, a leader cut off
//! from its majority, and a node joining by snapshot.

use std::time::Duration;

use serde_json::Value;
use understudy_core::{InstanceSpec, Op, Owner, ServiceKey};
use understudy_server::config::Settings;
use understudy_server::ProposeError;
use understudy_tests::cluster::{register, service, TestCluster};
use understudy_tests::Server;

const WAIT: Duration = Duration::from_secs(10);

fn instances_on(cluster: &TestCluster, id: u64) -> usize {
    cluster
        .node(id)
        .registry()
        .service(&service())
        .map_or(0, |s| s.instances().len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_sent_to_a_follower_is_visible_on_every_node() -> anyhow::Result<()> {
    let cluster = TestCluster::start(3, Settings::default()).await?;
    let leader = cluster.leader(WAIT).await?;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let applied = cluster.node(follower).propose(register(8080)).await?;
    assert_eq!(applied.changes.len(), 2, "{applied:?}");
    // Read-your-writes on the node that answered.
    assert_eq!(instances_on(&cluster, follower), 1);
    let index = cluster.last_applied(follower);
    cluster.applied(&[1, 2, 3], index, WAIT).await?;
    for id in 1..=3 {
        assert_eq!(instances_on(&cluster, id), 1, "node {id}");
    }
    // A refused command is refused on the node that forwarded it.
    let refused = cluster
        .node(follower)
        .propose(Op::DeleteService {
            service: ServiceKey::parse("", "", "missing")?,
        })
        .await;
    assert!(
        matches!(refused, Err(ProposeError::Rejected(_))),
        "{refused:?}"
    );
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_loses_to_the_majority_and_everyone_converges_after_healing(
) -> anyhow::Result<()> {
    let cluster = TestCluster::start(3, Settings::default()).await?;
    let old = cluster.leader(WAIT).await?;
    cluster.node(old).propose(register(1)).await?;
    let rest: Vec<u64> = (1..=3).filter(|id| *id != old).collect();
    for id in &rest {
        cluster.faults.cut(old, *id);
    }
    let new = cluster.leader_among(&rest, WAIT).await?;
    assert_ne!(new, old);
    // The majority keeps taking writes, through either of its nodes.
    for (k, id) in rest.iter().enumerate() {
        cluster.node(*id).propose(register(10 + k as u16)).await?;
    }
    // The minority cannot commit: a clear unavailable error, not a hang.
    let refused = cluster.node(old).propose(register(99)).await;
    match refused {
        Err(ProposeError::Unavailable { reason }) => {
            assert!(!reason.is_empty());
        }
        other => panic!("the cut-off node answered {other:?}"),
    }
    cluster.faults.heal_all();
    cluster.leader(WAIT).await?;
    let index = rest
        .iter()
        .map(|id| cluster.last_applied(*id))
        .max()
        .unwrap_or(0);
    cluster.applied(&[1, 2, 3], index, WAIT).await?;
    let snapshots: Vec<_> = (1..=3)
        .map(|id| cluster.node(id).registry().snapshot())
        .collect();
    assert_eq!(snapshots[0], snapshots[1]);
    assert_eq!(snapshots[1], snapshots[2]);
    // Ports 1, 10 and 11 were acknowledged; 99 was refused and, its entry
    // overwritten by the new leader's term, never applied.
    let ports: Vec<u16> = cluster
        .node(1)
        .registry()
        .service(&service())
        .map(|s| s.instances().map(|i| i.port).collect())
        .unwrap_or_default();
    assert_eq!(ports, vec![1, 10, 11]);
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_joins_and_catches_up_by_snapshot() -> anyhow::Result<()> {
    let mut cluster = TestCluster::start(3, Settings::default()).await?;
    let leader = cluster.leader(WAIT).await?;
    for port in 0..20 {
        cluster.node(leader).propose(register(port)).await?;
    }
    // Snapshot and purge the log, so the newcomer cannot replay it.
    let raft = cluster.node(leader).raft().clone();
    raft.trigger().snapshot().await?;
    let index = cluster.last_applied(leader);
    raft.wait(Some(WAIT))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= index),
            "snapshot built",
        )
        .await?;
    raft.trigger().purge_log(index).await?;
    cluster.add_node(4).await?;
    let member = cluster.members[&4].clone();
    raft.add_learner(4, member, true).await?;
    cluster.applied(&[4], index, WAIT).await?;
    assert_eq!(
        cluster.node(4).registry().snapshot(),
        cluster.node(leader).registry().snapshot()
    );
    let metrics = cluster.node(4).raft().metrics().borrow().clone();
    assert!(
        metrics.snapshot.is_some_and(|s| s.index > 0),
        "caught up without a snapshot: {metrics:?}"
    );
    cluster.shutdown().await;
    Ok(())
}

async fn admin(
    cluster: &TestCluster,
    id: u64,
    method: &str,
    query: &str,
) -> (axum::http::StatusCode, serde_json::Value) {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method(method)
        .uri(format!("/understudy/v1/cluster/members?{query}"))
        .body(axum::body::Body::empty())
        .expect("a request");
    let reply = understudy_server::router(cluster.node(id).clone())
        .oneshot(request)
        .await
        .expect("an answer");
    let status = reply.status();
    let body = http_body_util::BodyExt::collect(reply.into_body())
        .await
        .expect("a body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_and_leave_through_the_admin_endpoint_on_the_leader_only() -> anyhow::Result<()>
{
    let mut cluster = TestCluster::start(3, Settings::default()).await?;
    let leader = cluster.leader(WAIT).await?;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    cluster.node(leader).propose(register(5)).await?;
    cluster.add_node(4).await?;
    let addr = cluster.members[&4].raft_addr.clone();
    let query = format!("id=4&raftAddr={addr}&dc=dc2");

    let (status, body) = admin(&cluster, follower, "POST", &query).await;
    assert_eq!(status, 503, "{body}");
    let message = body["data"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("the leader is node {leader}")),
        "{message}"
    );

    let (status, body) = admin(&cluster, leader, "POST", "id=4&raftAddr=nowhere").await;
    assert_eq!(status, 400, "{body}");

    let (status, body) = admin(&cluster, leader, "POST", &query).await;
    assert_eq!(status, 200, "{body}");
    let four = body["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == 4))
        .cloned()
        .expect("node 4 listed");
    assert_eq!(four["voter"], true, "{body}");
    assert_eq!(four["dc"], "dc2", "{body}");
    cluster
        .applied(&[4], cluster.last_applied(leader), WAIT)
        .await?;
    assert_eq!(
        cluster.node(4).registry().snapshot(),
        cluster.node(leader).registry().snapshot()
    );

    let (status, body) = admin(&cluster, leader, "DELETE", "id=4").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["members"]
            .as_array()
            .is_some_and(|m| m.iter().all(|m| m["id"] != 4)),
        "{body}"
    );
    cluster.stop(4).await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_beats_sent_to_another_node_reach_the_responsible_one_and_silence_still_expires(
) -> anyhow::Result<()> {
    use understudy_core::responsible;
    use understudy_core::{InstanceKey, LiveKey};

    let settings = Settings {
        beat_interval_ms: Some(100),
        unhealthy_timeout_ms: Some(600),
        delete_timeout_ms: Some(1_000),
        ..Settings::default()
    };
    let cluster = TestCluster::start(3, settings).await?;
    let leader = cluster.leader(WAIT).await?;
    let beats = ServiceKey::parse("", "", "com.example.Beating")?;
    let ips: Vec<String> = (1..=6).map(|i| format!("10.3.0.{i}")).collect();
    for ip in &ips {
        cluster
            .node(leader)
            .propose(Op::Register {
                service: beats.clone(),
                owner: Owner::Beat {
                    ip: ip.as_str().into(),
                    port: 80,
                },
                instances: vec![InstanceSpec::new(ip.as_str(), 80)],
            })
            .await?;
    }
    cluster
        .applied(&[1, 2, 3], cluster.last_applied(leader), WAIT)
        .await?;
    let ring = cluster.node(leader).beat_ring();
    assert_eq!(ring, vec![1, 2, 3]);
    // Each instance beats only at a node that is not responsible for it
    // (and not the leader, where one is left): the beat must travel.
    let plan: Vec<(LiveKey, u64, u64)> = ips
        .iter()
        .map(|ip| {
            let owner = Owner::Beat {
                ip: ip.as_str().into(),
                port: 80,
            };
            let owner_node = responsible(&ring, &owner).expect("a ring member");
            let at = (1..=3)
                .filter(|id| *id != owner_node)
                .min_by_key(|id| *id == leader)
                .expect("another node");
            let key = LiveKey {
                service: beats.clone(),
                instance: InstanceKey {
                    ip: ip.clone(),
                    port: 80,
                    cluster: understudy_core::ClusterName::default_cluster(),
                },
            };
            (key, owner_node, at)
        })
        .collect();
    assert!(
        plan.iter().any(|(_, owner_node, _)| *owner_node != leader),
        "every instance hashed to the leader: {plan:?}"
    );
    let healthy_everywhere = |cluster: &TestCluster| {
        (1..=3).all(|id| {
            cluster
                .node(id)
                .registry()
                .service(&beats)
                .is_some_and(|s| {
                    s.instances().len() == ips.len() && s.instances().all(|i| i.healthy)
                })
        })
    };
    // Four delete timeouts of beats: nothing may turn unhealthy or expire.
    let until = tokio::time::Instant::now() + Duration::from_millis(4_000);
    while tokio::time::Instant::now() < until {
        for (key, _, at) in &plan {
            let outcome = cluster.node(*at).beat(key).await;
            assert_eq!(
                outcome,
                understudy_core::BeatOutcome::Alive,
                "{key:?} at node {at}"
            );
        }
        assert!(
            healthy_everywhere(&cluster),
            "an instance beating elsewhere lost its health"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Silence: every responsible node expires its own.
    let gone = understudy_tests::eventually(Duration::from_secs(5), || async {
        (1..=3).all(|id| {
            cluster
                .node(id)
                .registry()
                .service(&beats)
                .is_none_or(|s| s.instances().len() == 0)
        })
    })
    .await;
    assert!(gone, "silent beat-driven instances were not expired");
    cluster.shutdown().await;
    Ok(())
}

async fn leader_seen_by(http: &reqwest::Client, server: &Server) -> Option<u64> {
    let status: Value = http
        .get(server.url("/understudy/v1/cluster"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    status["leader"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_leader_hands_over_before_its_stop_returns() -> anyhow::Result<()> {
    let mut servers = Server::start_cluster(3, Settings::default()).await?;
    let http = reqwest::Client::new();
    let leader = leader_seen_by(&http, &servers[0])
        .await
        .expect("an agreed leader");
    let reply = http
        .post(servers[0].url("/nacos/v1/ns/instance"))
        .form(&[
            ("serviceName", "handed"),
            ("ip", "10.4.0.1"),
            ("port", "1"),
            ("ephemeral", "false"),
        ])
        .send()
        .await?;
    assert_eq!(reply.text().await?, "ok");
    let stopping = servers.remove((leader - 1) as usize);
    stopping.stop().await?;
    // The handover waited for the new leader: the survivors name it at
    // once, not an election timeout later.
    let first = leader_seen_by(&http, &servers[0]).await;
    let second = leader_seen_by(&http, &servers[1]).await;
    assert!(first.is_some() && first != Some(leader), "{first:?}");
    assert_eq!(first, second);
    for server in &servers {
        let hosts = http
            .get(server.url("/nacos/v1/ns/instance/list?serviceName=handed"))
            .send()
            .await?
            .text()
            .await?;
        assert!(hosts.contains("10.4.0.1"), "{hosts}");
    }
    for server in servers {
        server.stop().await?;
    }
    Ok(())
}
