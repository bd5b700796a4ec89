//! One registry node, as adapters see it: its configuration, clock,
//! applied state, the write seam, the read view, auth and admission, and
//! the raft handle behind them. Cheap to clone. Built and started in
//! `wiring.rs`; its cluster operations (membership, status, faults,
//! hand-over) are in `cluster.rs`.

use std::sync::{Arc, Mutex, MutexGuard, RwLockReadGuard};

use tokio::sync::Notify;
use tokio_util::task::TaskTracker;
use understudy_core::{
    BeatOutcome, Command, ConfigItem, ConfigKey, GrayRule, LiveKey, Millis, Op, Owner, Registry,
};

use crate::clock::Clock;
use crate::config::ValidConfig;
pub use crate::state::State;
pub use crate::write::{Applied, BoxFuture, Propose, ProposeError};

mod cluster;

/// A running node: cheap to clone, shared by every adapter.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    /// What the node was assembled from (see [`Parts`]).
    parts: Parts,
    /// The connection ids (Nacos gRPC connections, native sessions) this
    /// process holds open: owners on this node that are not here are left
    /// over from a failed removal or an earlier run.
    held: Mutex<std::collections::HashSet<String>>,
    /// The last moment this node was part of a working majority.
    quorum_seen: Mutex<tokio::time::Instant>,
    /// The address its HTTP port is bound to, once it serves.
    http_address: std::sync::OnceLock<std::net::SocketAddr>,
    /// The gRPC adapter's connections, once it serves (held weakly: the
    /// adapter holds the node).
    clients: std::sync::OnceLock<std::sync::Weak<dyn crate::clients::Clients>>,
    /// Holds, acknowledgement waits and the trace (see [`crate::races`]).
    races: crate::races::Races,
}

/// A connection id held open by this process; released on drop.
#[derive(Debug)]
pub(crate) struct Held {
    node: Node,
    id: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.node.held().remove(&self.id);
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_id", &self.inner.parts.config.node_id)
            .field("dc", &self.inner.parts.config.dc)
            .finish_non_exhaustive()
    }
}

/// What a node is made of; `wiring.rs` builds the parts and starts the
/// tasks around them.
pub(crate) struct Parts {
    pub(crate) config: ValidConfig,
    pub(crate) clock: Clock,
    pub(crate) state: Arc<State>,
    pub(crate) writer: Arc<dyn Propose>,
    pub(crate) udp: Option<Arc<dyn UdpListeners>>,
    pub(crate) raft: crate::raft::Raft,
    pub(crate) network: crate::raft::network::Network,
    pub(crate) view: crate::view::View,
    pub(crate) auth: crate::auth::Auth,
    pub(crate) admission: crate::admission::Admission,
    pub(crate) tasks: TaskTracker,
}

/// The UDP pushes to v1 listeners (`udp.rs`), as the HTTP list query and
/// the scrape use them.
pub(crate) trait UdpListeners: Send + Sync {
    /// A client listed `key` and wants pushes at `addr`: subscribes it and
    /// renders the answer.
    fn listen(
        self: Arc<Self>,
        node: &Node,
        addr: std::net::SocketAddr,
        key: &understudy_core::ServiceKey,
        view: understudy_proto::nacos::View<'_>,
    ) -> understudy_proto::nacos::ServiceInfo;
    /// How many UDP subscribers there are.
    fn len(&self) -> usize;
}

/// A [`Node`] that does not keep it alive (for callbacks it installs).
pub(crate) struct WeakNode(std::sync::Weak<Inner>);

impl WeakNode {
    /// The node, unless it is gone.
    pub(crate) fn upgrade(&self) -> Option<Node> {
        self.0.upgrade().map(|inner| Node { inner })
    }
}

impl Node {
    /// The node made of `parts`.
    pub(crate) fn assemble(parts: Parts) -> Node {
        Node {
            inner: Arc::new(Inner {
                parts,
                held: Mutex::default(),
                quorum_seen: Mutex::new(tokio::time::Instant::now()),
                http_address: std::sync::OnceLock::new(),
                clients: std::sync::OnceLock::new(),
                races: crate::races::Races::default(),
            }),
        }
    }

    /// Records the address the HTTP port is bound to (the configured
    /// port may be 0).
    pub(crate) fn serving_http_on(&self, address: std::net::SocketAddr) {
        let _ = self.inner.http_address.set(address);
    }

    /// The address this node's HTTP API is served on: the bound one once
    /// it serves, else the configured one.
    pub fn http_address(&self) -> std::net::SocketAddr {
        self.inner.http_address.get().copied().unwrap_or_else(|| {
            let config = &self.inner.parts.config;
            std::net::SocketAddr::new(config.bind, config.http_port)
        })
    }

    /// Records where this node's connected clients are reported from.
    pub(crate) fn serving_clients(&self, clients: std::sync::Weak<dyn crate::clients::Clients>) {
        let _ = self.inner.clients.set(clients);
    }

    /// Holds, acknowledgement waits and the trace of client races.
    pub(crate) fn races(&self) -> &crate::races::Races {
        &self.inner.races
    }

    /// The clients connected to this node over gRPC, while it serves.
    pub(crate) fn clients(&self) -> Option<Arc<dyn crate::clients::Clients>> {
        self.inner.clients.get().and_then(std::sync::Weak::upgrade)
    }

    /// A handle that does not keep the node alive.
    pub(crate) fn downgrade(&self) -> WeakNode {
        WeakNode(Arc::downgrade(&self.inner))
    }

    /// How fresh this node's read view is.
    pub fn view(&self) -> &crate::view::View {
        &self.inner.parts.view
    }

    /// How far this node's read view is behind the leader: zero for a node
    /// alone in its cluster (it is the leader; it appends no ticks), else
    /// now minus the newest stamp applied here.
    pub fn view_lag(&self) -> Option<std::time::Duration> {
        let alone = self
            .raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .count()
            <= 1;
        if alone {
            Some(std::time::Duration::ZERO)
        } else {
            self.inner.parts.view.lag()
        }
    }

    /// Applies this node's DC push faults to one push: waits its delay,
    /// and answers whether to send it. A dropped push goes unanswered and
    /// is retried after the push timeout, as any unanswered push.
    pub(crate) async fn push_passes_faults(&self) -> bool {
        match self.faults().push_fate(&self.inner.parts.config.dc) {
            crate::faults::PushFate::Drop => {
                metrics::counter!("understudy_pushes_dropped_by_fault_total").increment(1);
                false
            }
            crate::faults::PushFate::Send(delay) => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                true
            }
        }
    }

    /// The fault model this node's transport obeys.
    pub fn faults(&self) -> &crate::faults::LinkFaults {
        self.inner.parts.network.faults()
    }

    fn held(&self) -> MutexGuard<'_, std::collections::HashSet<String>> {
        self.inner.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks connection `id` as held open by this process until the
    /// returned guard is dropped.
    pub(crate) fn hold(&self, id: &str) -> Held {
        self.held().insert(id.to_owned());
        Held {
            node: self.clone(),
            id: id.to_owned(),
        }
    }

    /// Whether connection `id` is held open by this process.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.held().contains(id)
    }

    /// The configuration.
    pub fn config(&self) -> &ValidConfig {
        &self.inner.parts.config
    }

    /// Who may call this node.
    pub fn auth(&self) -> &crate::auth::Auth {
        &self.inner.parts.auth
    }

    /// The slots for ordinary requests (see [`crate::admission`]).
    pub(crate) fn admission(&self) -> &crate::admission::Admission {
        &self.inner.parts.admission
    }

    /// Now, in epoch ms.
    pub fn now(&self) -> Millis {
        self.inner.parts.clock.now()
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.inner.parts.clock
    }

    /// Reads the registry. Hold the guard briefly, never across `.await`.
    pub fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.inner.parts.state.registry()
    }

    pub(crate) fn state(&self) -> &State {
        &self.inner.parts.state
    }

    /// What a client at `ip` carrying `tag` reads of a config: a gray
    /// release whose rule takes it, else the formal content as this
    /// node's DC's config read lag lets it be seen (see
    /// [`crate::view::View`]). Every config read of the Nacos HTTP and
    /// gRPC APIs comes here; listeners and pushes compare with the
    /// registry itself.
    pub(crate) fn config_for(
        &self,
        key: &ConfigKey,
        ip: &str,
        tag: Option<&str>,
    ) -> Option<(Arc<ConfigItem>, Option<GrayRule>)> {
        let current = match self.registry().config_for(key, ip, tag) {
            Some((item, Some(gray))) => return Some((item, Some(gray.rule.clone()))),
            Some((item, None)) => Some(item),
            None => None,
        };
        let item = self.view().formal_config(key, current)?;
        Some((item, None))
    }

    /// A config's formal content as a read on this node sees it (under
    /// its DC's config read lag, as [`Node::config_for`]).
    pub(crate) fn formal_config(&self, key: &ConfigKey) -> Option<Arc<ConfigItem>> {
        let current = self.registry().config(key);
        self.view().formal_config(key, current)
    }

    /// Proposes an operation stamped with the current time.
    pub async fn propose(&self, op: Op) -> Result<Applied, ProposeError> {
        let command = Command::new(self.now(), op);
        let started = std::time::Instant::now();
        let result = self.inner.parts.writer.propose(command).await;
        metrics::histogram!("understudy_write_seconds").record(started.elapsed().as_secs_f64());
        result
    }

    /// Proposes `ops` one after another, each once the one before it was
    /// applied; the first the registry refuses stops the rest and is the
    /// answer. Where an op's failure must leave the later ones unwritten.
    pub async fn propose_in_turn(&self, ops: Vec<Op>) -> Result<(), ProposeError> {
        for op in ops {
            self.propose(op).await?;
        }
        Ok(())
    }

    /// Proposes `ops` as one log entry, applied in order, each on its own
    /// (see [`crate::write::Propose::propose_all`]).
    pub async fn propose_all(
        &self,
        ops: Vec<Op>,
    ) -> Result<Vec<Result<Applied, understudy_core::Error>>, ProposeError> {
        let now = self.now();
        let commands = ops.into_iter().map(|op| Command::new(now, op)).collect();
        let started = std::time::Instant::now();
        let result = self.inner.parts.writer.propose_all(commands).await;
        metrics::histogram!("understudy_write_seconds").record(started.elapsed().as_secs_f64());
        result
    }

    /// Takes a beat for a beat-driven instance. The node responsible for
    /// the instance (see [`Node::beat_ring`]) times it; a beat that arrives
    /// elsewhere is handed to that node, and kept here as well, so that a
    /// node taking over has it. When the responsible node cannot be
    /// reached the local answer stands. A beat never becomes a command
    /// unless it revives an unhealthy instance.
    pub async fn beat(&self, key: &LiveKey) -> BeatOutcome {
        let local = self.inner.parts.state.liveness().beat(key, self.now());
        if self.is_sole_voter() {
            return local;
        }
        let owner = Owner::Beat {
            ip: key.instance.ip.as_str().into(),
            port: key.instance.port,
        };
        let me = self.inner.parts.config.node_id;
        let target = understudy_core::responsible(&self.beat_ring(), &owner).unwrap_or(me);
        if target == me {
            return local;
        }
        let member = self
            .inner
            .parts
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&target)
            .cloned();
        let Some(member) = member else {
            return local;
        };
        let timeout = std::time::Duration::from_secs(1);
        match self
            .inner
            .parts
            .network
            .beat(target, &member, key, timeout)
            .await
        {
            // The responsible node may not have applied the registration
            // yet; this node's answer is as good.
            Ok(BeatOutcome::Unknown) => local,
            Ok(remote) => remote,
            Err(e) => {
                tracing::debug!(target, error = %e, "beat not handed to its responsible node");
                local
            }
        }
    }

    /// Whether this node is the cluster's only voter (the default single
    /// node), which times every beat itself.
    fn is_sole_voter(&self) -> bool {
        let me = self.inner.parts.config.node_id;
        let metrics = self.inner.parts.raft.metrics();
        let metrics = metrics.borrow();
        let mut voters = metrics.membership_config.membership().voter_ids();
        voters.next() == Some(me) && voters.next().is_none()
    }

    /// The nodes that time v1 beat-driven instances: the voters, less
    /// those the leader declared lost (all voters if that leaves none).
    /// Every node computes the same ring from its replicated state.
    pub fn beat_ring(&self) -> Vec<crate::raft::NodeId> {
        let voters: Vec<u64> = self
            .inner
            .parts
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect();
        understudy_core::beat_ring(&voters, self.registry().lost_nodes())
    }

    /// The beat period of a tracked instance.
    pub fn beat_interval(&self, key: &LiveKey) -> Option<Millis> {
        self.inner.parts.state.liveness().beat_interval(key)
    }

    /// UDP push for v1 clients, if its socket could be bound.
    pub(crate) fn udp(&self) -> Option<&Arc<dyn UdpListeners>> {
        self.inner.parts.udp.as_ref()
    }

    pub(crate) fn deadlines_moved(&self) -> &Notify {
        &self.inner.parts.state.deadlines_moved
    }
}
