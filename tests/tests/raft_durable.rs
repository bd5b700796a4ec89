//! Durable mode (`data_dir`): a whole cluster stopped and restarted on its
//! data dirs keeps its registrations, config and config history, through
//! persisted snapshots and the log after them, and keeps them across a
//! change of leader; a single node restarts on its dir without forming
//! again, and a dir of another node is refused.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::access::{Action, Permission};
use understudy_core::{ConfigKey, ConfigSource, ConfigSpec, Op};
use understudy_server::config::Settings;
use understudy_server::raft::StartError;
use understudy_server::{Clock, Node, ValidConfig};
use understudy_tests::cluster::{register, service, snapshotting_raft_config, TestCluster};

const WAIT: Duration = Duration::from_secs(15);

fn config_key() -> ConfigKey {
    ConfigKey::parse("", "DEFAULT_GROUP", "orders.properties").expect("a valid key")
}

fn publish(content: &str) -> Op {
    Op::PublishConfigFrom {
        key: config_key(),
        spec: ConfigSpec {
            content: content.into(),
            kind: "properties".into(),
            ..ConfigSpec::default()
        },
        cas_md5: None,
        source: ConfigSource {
            ip: "10.0.0.9".into(),
            user: "ops".into(),
        },
    }
}

/// The config's history on `node`, newest first: (id, op, content, who).
fn history_on(node: &Node) -> Vec<(u64, &'static str, String, String)> {
    node.registry()
        .config_history(&config_key())
        .map(|e| {
            let who = format!("{}@{}", e.source.user, e.source.ip);
            (e.nid, e.op.letter(), e.item.content.clone(), who)
        })
        .collect()
}

fn ports_on(node: &Node) -> Vec<u16> {
    let mut ports: Vec<u16> = node
        .registry()
        .service(&service())
        .map(|s| s.instances().map(|i| i.port).collect())
        .unwrap_or_default();
    ports.sort_unstable();
    ports
}

fn content_on(node: &Node) -> Option<String> {
    node.registry()
        .config(&config_key())
        .map(|c| c.content.clone())
}

/// Waits until `check` holds on node `node`.
async fn eventually(node: &Node, what: &str, check: impl Fn(&Node) -> bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check(node) {
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("{what} not seen within {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_restarted_on_its_data_dirs_keeps_its_instances_and_config(
) -> anyhow::Result<()> {
    let dirs: Vec<tempfile::TempDir> = (0..3)
        .map(|_| tempfile::tempdir())
        .collect::<Result<_, _>>()?;
    let paths: BTreeMap<u64, std::path::PathBuf> = (1..=3)
        .zip(&dirs)
        .map(|(id, dir)| (id, dir.path().to_owned()))
        .collect();
    let mut cluster =
        TestCluster::start_durable(3, Settings::default(), snapshotting_raft_config(), paths)
            .await?;
    let leader = cluster.leader(WAIT).await?;
    // Enough writes for several snapshots (every 4 entries), and some
    // after the last one, so a restart reads both.
    let expected: Vec<u16> = (8000..8010).collect();
    for port in &expected {
        cluster.node(leader).propose(register(*port)).await?;
    }
    cluster.node(leader).propose(publish("v=1")).await?;
    cluster.node(leader).propose(publish("v=2")).await?;
    // Users, roles and permissions are replicated state too.
    for op in [
        Op::CreateUser {
            name: "ops".into(),
            password_hash: "$2b$04$hash".into(),
        },
        Op::BindRole {
            role: "ops-role".into(),
            user: "ops".into(),
        },
        Op::Grant {
            permission: Permission {
                role: "ops-role".into(),
                resource: "dev:*:*".into(),
                action: Action::Read,
            },
        },
    ] {
        cluster.node(leader).propose(op).await?;
    }
    let index = cluster.last_applied(leader);
    cluster.applied(&[1, 2, 3], index, WAIT).await?;
    // Each node has built (and so kept) a snapshot; the restart goes
    // through it and the log after it.
    for id in 1..=3 {
        let raft = cluster.node(id).raft().clone();
        raft.wait(Some(WAIT))
            .metrics(|m| m.snapshot.is_some(), "a snapshot")
            .await?;
    }

    let history = history_on(cluster.node(leader));
    let ops: Vec<(&str, &str)> = history
        .iter()
        .map(|(_, op, c, _)| (*op, c.as_str()))
        .collect();
    assert_eq!(ops, [("U", "v=1"), ("I", "v=1")], "{history:?}");
    assert!(history.iter().all(|(.., who)| who == "ops@10.0.0.9"));

    let leader = cluster.restart_all(WAIT).await?;
    for id in 1..=3 {
        let node = cluster.node(id);
        eventually(node, "the instances", |n| ports_on(n) == expected).await?;
        eventually(node, "the config item", |n| {
            content_on(n).as_deref() == Some("v=2")
        })
        .await?;
        eventually(node, "the config history", |n| history_on(n) == history).await?;
        eventually(node, "the users and permissions", |n| {
            let registry = n.registry();
            registry.user_hash("ops") == Some("$2b$04$hash")
                && registry.allows("ops", "dev:g:config/a", Action::Read)
                && !registry.allows("ops", "dev:g:config/a", Action::Write)
        })
        .await?;
    }
    // The restarted cluster takes writes again.
    cluster.node(leader).propose(register(9000)).await?;

    // Its leader stops: the others elect another, whose history is the
    // same, and which adds to it.
    cluster.stop(leader).await;
    let rest: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let next = cluster.leader_among(&rest, WAIT).await?;
    assert_eq!(history_on(cluster.node(next)), history);
    {
        let registry = cluster.node(next).registry();
        assert_eq!(registry.user_hash("ops"), Some("$2b$04$hash"));
        assert!(registry.allows("ops", "dev:g:config/a", Action::Read));
    }
    cluster.node(next).propose(publish("v=3")).await?;
    for id in rest {
        eventually(cluster.node(id), "the newest entry", |n| {
            history_on(n).len() == 3 && history_on(n)[1..] == history[..]
        })
        .await?;
    }
    cluster.shutdown().await;
    Ok(())
}

fn single(dir: &std::path::Path, node_id: u64) -> anyhow::Result<ValidConfig> {
    Ok(ValidConfig::from_settings(Settings {
        node_id: Some(node_id),
        http_port: Some(0),
        grpc_port: Some(0),
        raft_heartbeat_ms: Some(50),
        raft_election_timeout_ms: Some(300),
        data_dir: Some(dir.to_owned()),
        ..Settings::default()
    })?)
}

async fn stop(tasks: TaskTracker, cancel: CancellationToken) {
    cancel.cancel();
    tasks.close();
    let _ = tokio::time::timeout(WAIT, tasks.wait()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_restarts_on_its_data_dir_and_refuses_another_nodes_dir() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    {
        let (tasks, cancel) = (TaskTracker::new(), CancellationToken::new());
        let node = Node::start(
            single(dir.path(), 1)?,
            Clock::system(),
            &tasks,
            cancel.clone(),
        )
        .await?;
        node.propose(register(8080)).await?;
        node.propose(publish("a=1")).await?;
        drop(node);
        stop(tasks, cancel).await;
    }
    let (tasks, cancel) = (TaskTracker::new(), CancellationToken::new());
    // Already formed: it starts without initialising and leads again.
    let node = Node::start(
        single(dir.path(), 1)?,
        Clock::system(),
        &tasks,
        cancel.clone(),
    )
    .await?;
    // Everything it acknowledged is back by the time it starts serving.
    assert_eq!(ports_on(&node), [8080]);
    assert_eq!(content_on(&node).as_deref(), Some("a=1"));
    node.propose(register(8081)).await?;
    assert_eq!(ports_on(&node), [8080, 8081]);
    drop(node);
    stop(tasks, cancel).await;

    let file = dir.path().join(understudy_server::raft::disk::FILE_NAME);
    let before = std::fs::read(&file)?;
    let (tasks, cancel) = (TaskTracker::new(), CancellationToken::new());
    let refused = Node::start(
        single(dir.path(), 2)?,
        Clock::system(),
        &tasks,
        cancel.clone(),
    )
    .await;
    match refused {
        Err(e @ StartError::Store(_)) => {
            let message = e.to_string();
            assert!(
                message.contains("node 1") && message.contains("node 2"),
                "{message}"
            );
        }
        other => panic!("expected the store to be refused, got {other:?}"),
    }
    stop(tasks, cancel).await;
    assert_eq!(
        std::fs::read(&file)?,
        before,
        "the refused file is left as it is"
    );
    Ok(())
}
