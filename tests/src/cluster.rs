//! An in-process replicated cluster for tests: every node's raft service
//! on its own port 0, one shared [`LinkFaults`] that can cut, delay and
//! drop any link, and helpers that wait on conditions with deadlines. A
//! durable cluster keeps each node's raft state in a data dir and can be
//! stopped and restarted whole on the same dirs and raft addresses.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::{InstanceSpec, Op, Owner, ServiceKey};
use understudy_server::config::Settings;
use understudy_server::faults::LinkFaults;
use understudy_server::raft::network::{service as raft_service, Network, NetworkOptions};
use understudy_server::raft::{Member, NodeId};
use understudy_server::{Clock, Node, ValidConfig};

/// The service the cluster tests register into.
pub fn service() -> ServiceKey {
    ServiceKey::parse("", "", "com.example.Orders").expect("a valid key")
}

/// A persistent registration of `10.0.0.1:port` in [`service`].
pub fn register(port: u16) -> Op {
    Op::Register {
        service: service(),
        owner: Owner::Persistent {
            ip: "10.0.0.1".into(),
            port,
        },
        instances: vec![InstanceSpec::new("10.0.0.1", port)],
    }
}

/// One node of a [`TestCluster`].
pub struct ClusterNode {
    /// Its id.
    pub id: NodeId,
    /// The node.
    pub node: Node,
    /// Its raft address.
    pub raft_addr: String,
    cancel: CancellationToken,
    tasks: TaskTracker,
    serving: JoinHandle<()>,
}

impl ClusterNode {
    /// Stops the node as a crash would look to its peers: its raft service
    /// goes away at once.
    pub async fn stop(self) {
        self.cancel.cancel();
        self.serving.abort();
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tasks.wait()).await;
    }
}

/// Raft timings short enough for tests, long enough for a loaded CI box.
pub fn test_raft_config() -> openraft::Config {
    openraft::Config {
        cluster_name: "understudy-test".into(),
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        ..openraft::Config::default()
    }
}

/// [`test_raft_config`] that snapshots every few entries and keeps no log
/// behind a snapshot, so a restart goes through a persisted snapshot and a
/// purged log.
pub fn snapshotting_raft_config() -> openraft::Config {
    openraft::Config {
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(4),
        max_in_snapshot_log_to_keep: 0,
        ..test_raft_config()
    }
}

/// A replicated cluster in this process.
pub struct TestCluster {
    /// The nodes, by id.
    pub nodes: BTreeMap<NodeId, ClusterNode>,
    /// The faults of every link.
    pub faults: LinkFaults,
    /// Every member ever started, by id.
    pub members: BTreeMap<NodeId, Member>,
    settings: Settings,
    raft_config: openraft::Config,
    data_dirs: BTreeMap<NodeId, PathBuf>,
}

impl TestCluster {
    /// Starts `n` nodes (ids 1..=n, DC `dc1`) and initialises them as one
    /// cluster from node 1; returns once a leader is known.
    pub async fn start(n: u64, settings: Settings) -> anyhow::Result<Self> {
        Self::start_with(n, settings, test_raft_config(), BTreeMap::new()).await
    }

    /// Starts `n` nodes like [`TestCluster::start`], node `id` keeping its
    /// raft state in `dirs[&id]`, under `raft_config`.
    pub async fn start_durable(
        n: u64,
        settings: Settings,
        raft_config: openraft::Config,
        dirs: BTreeMap<NodeId, PathBuf>,
    ) -> anyhow::Result<Self> {
        Self::start_with(n, settings, raft_config, dirs).await
    }

    async fn start_with(
        n: u64,
        settings: Settings,
        raft_config: openraft::Config,
        data_dirs: BTreeMap<NodeId, PathBuf>,
    ) -> anyhow::Result<Self> {
        let mut cluster = Self {
            nodes: BTreeMap::new(),
            faults: LinkFaults::new(7),
            members: BTreeMap::new(),
            settings,
            raft_config,
            data_dirs,
        };
        for id in 1..=n {
            cluster.add_node(id).await?;
        }
        let voters = cluster.members.clone();
        cluster.node(1).raft().initialize(voters).await?;
        cluster.leader(Duration::from_secs(10)).await?;
        Ok(cluster)
    }

    /// Starts node `id` (not yet a member of anything).
    pub async fn add_node(&mut self, id: NodeId) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        self.serve_node(id, listener).await
    }

    /// Stops every node, then starts each again on its data dir and its
    /// old raft address (the members' addresses are in the durable log);
    /// returns once they agree on a leader.
    pub async fn restart_all(&mut self, within: Duration) -> anyhow::Result<NodeId> {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in &ids {
            self.stop(*id).await;
        }
        for id in &ids {
            let addr = self.members[id].raft_addr.clone();
            let listener = bind_again(&addr, within).await?;
            self.serve_node(*id, listener).await?;
        }
        self.leader(within).await
    }

    async fn serve_node(
        &mut self,
        id: NodeId,
        listener: tokio::net::TcpListener,
    ) -> anyhow::Result<()> {
        let raft_addr = listener.local_addr()?.to_string();
        let config = ValidConfig::from_settings(Settings {
            node_id: Some(id),
            http_port: Some(0),
            grpc_port: Some(0),
            write_timeout_ms: Some(3000),
            data_dir: self.data_dirs.get(&id).cloned(),
            ..self.settings.clone()
        })?;
        let network = Network::new(id, self.faults.clone(), NetworkOptions::default());
        let tasks = TaskTracker::new();
        let cancel = CancellationToken::new();
        let node = Node::start_replicated(
            config,
            Clock::system(),
            &tasks,
            cancel.clone(),
            self.raft_config.clone(),
            network.clone(),
        )
        .await?;
        let raft = node.raft().clone();
        let svc = raft_service(raft, &network);
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let stop = cancel.clone();
        let serving = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_routes(svc)
                .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                .await;
        });
        self.members.insert(
            id,
            Member {
                raft_addr: raft_addr.clone(),
                dc: "dc1".into(),
            },
        );
        self.nodes.insert(
            id,
            ClusterNode {
                id,
                node,
                raft_addr,
                cancel,
                tasks,
                serving,
            },
        );
        Ok(())
    }

    /// Node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id].node
    }

    /// Waits until every running node that is not cut off agrees on one
    /// leader, and returns it.
    pub async fn leader(&self, within: Duration) -> anyhow::Result<NodeId> {
        self.leader_among(&self.nodes.keys().copied().collect::<Vec<_>>(), within)
            .await
    }

    /// Waits until the nodes `ids` agree on one leader among them.
    pub async fn leader_among(&self, ids: &[NodeId], within: Duration) -> anyhow::Result<NodeId> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let leaders: Vec<Option<NodeId>> = ids
                .iter()
                .map(|id| self.node(*id).raft().metrics().borrow().current_leader)
                .collect();
            if let Some(Some(leader)) = leaders.first() {
                if ids.contains(leader) && leaders.iter().all(|l| *l == Some(*leader)) {
                    let raft = self.node(*leader).raft();
                    if raft.metrics().borrow().current_leader == Some(*leader) {
                        return Ok(*leader);
                    }
                }
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("no agreed leader among {ids:?} within {within:?}: {leaders:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the nodes `ids` have applied the same log index, at
    /// least `index`.
    pub async fn applied(
        &self,
        ids: &[NodeId],
        index: u64,
        within: Duration,
    ) -> anyhow::Result<()> {
        for id in ids {
            let raft = self.node(*id).raft();
            raft.wait(Some(within))
                .applied_index_at_least(Some(index), "caught up")
                .await
                .map_err(|e| anyhow::anyhow!("node {id} did not apply index {index}: {e}"))?;
        }
        Ok(())
    }

    /// The leader's last applied index.
    pub fn last_applied(&self, id: NodeId) -> u64 {
        self.node(id)
            .raft()
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index)
    }

    /// Stops node `id`.
    pub async fn stop(&mut self, id: NodeId) {
        if let Some(node) = self.nodes.remove(&id) {
            node.stop().await;
        }
    }

    /// Stops every node.
    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

/// Binds `addr` again once the stopped node's listener is gone.
async fn bind_again(addr: &str, within: Duration) -> anyhow::Result<tokio::net::TcpListener> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) if tokio::time::Instant::now() > deadline => {
                anyhow::bail!("cannot bind {addr} again within {within:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
