//! One registry node: the applied state (registry and liveness), the write
//! seam that commands go through, and the background tasks (the writer and
//! the liveness sweeper). Adapters hold a [`Node`] and never touch the
//! registry's lock directly for writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use thiserror::Error;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::{
    BeatOutcome, Change, Command, LiveKey, Liveness, Millis, Op, Owner, Registry,
};

use crate::clock::Clock;
use crate::config::ValidConfig;

/// Why a proposed command was not applied.
#[derive(Debug, Clone, Error)]
pub enum ProposeError {
    /// The registry refused it; nothing changed.
    #[error(transparent)]
    Rejected(#[from] understudy_core::Error),
    /// The write queue stayed full for the whole write timeout.
    #[error("the server is too busy to take this write now; retry")]
    Busy,
    /// The node is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The cluster cannot take the write now: no leader, or the leader is
    /// unreachable from this node; `reason` names the leader if known.
    #[error("the cluster cannot take this write now: {reason}")]
    Unavailable {
        /// What is wrong, naming the leader when one is known.
        reason: String,
    },
}

/// What an applied command did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The changes, with their revisions.
    pub changes: Vec<Change>,
}

/// A boxed, sendable future (the seam must be object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The write seam: takes a command, returns its outcome once it is applied
/// to this node's view. A single node applies locally; the raft layer will
/// replicate first, behind the same trait.
pub trait Propose: Send + Sync + 'static {
    /// Proposes a command.
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, ProposeError>>;
}

/// How a node's history id starts until it learns its cluster's.
const PROVISIONAL: &str = "provisional-";

/// The applied state of a node: the registry, the liveness tracker fed by
/// it, and a wake-up for the sweeper when deadlines move.
#[derive(Debug)]
pub struct State {
    registry: RwLock<Registry>,
    liveness: Mutex<Liveness>,
    deadlines_moved: Notify,
    hub: crate::push::Hub<understudy_core::ServiceKey>,
    config_hub: crate::push::Hub<understudy_core::ConfigKey>,
    /// Rendered hosts, shared by answers and pushes of one state.
    hosts: crate::hosts::HostsCache,
    /// Every config change, for HTTP long polling.
    config_changes: tokio::sync::broadcast::Sender<understudy_core::ConfigKey>,
    /// Every applied batch of changes, in revision order, for watches.
    changes: tokio::sync::broadcast::Sender<Arc<[Change]>>,
    /// Identifies this registry's history: a resume token from another
    /// cluster, or from before an in-memory restart, does not match. It
    /// is provisional (this node's own) until the state machine learns the
    /// cluster's genesis, the first entry of its log, which every node of
    /// one cluster shares, so a watcher can resume on any of them.
    cluster_id: RwLock<Arc<str>>,
}

impl State {
    /// Fresh state under `config`.
    pub fn new(config: &ValidConfig) -> Self {
        Self {
            registry: RwLock::new(Registry::new(config.registry.clone())),
            liveness: Mutex::new(Liveness::new()),
            deadlines_moved: Notify::new(),
            hub: crate::push::Hub::default(),
            config_hub: crate::push::Hub::default(),
            hosts: crate::hosts::HostsCache::default(),
            config_changes: tokio::sync::broadcast::channel(4096).0,
            changes: tokio::sync::broadcast::channel(config.watch_buffer).0,
            cluster_id: RwLock::new(Arc::from(format!(
                "{PROVISIONAL}{:x}-{:x}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
                std::process::id()
            ))),
        }
    }

    /// Reads the registry. Hold the guard briefly, never across `.await`.
    pub fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Subscribes to every applied change. Subscribe before reading a
    /// snapshot, so no change falls between the two. An empty batch means
    /// the registry was replaced by a snapshot (a raft snapshot install).
    pub(crate) fn watch_changes(&self) -> tokio::sync::broadcast::Receiver<Arc<[Change]>> {
        self.changes.subscribe()
    }

    /// This registry's history id.
    pub(crate) fn cluster_id(&self) -> Arc<str> {
        self.cluster_id
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the history id is the cluster's, not this node's
    /// provisional one.
    pub(crate) fn cluster_known(&self) -> bool {
        !self.cluster_id().starts_with(PROVISIONAL)
    }

    /// Sets the history id from the cluster's genesis.
    pub(crate) fn set_cluster_id(&self, id: &str) {
        let mut current = self.cluster_id.write().unwrap_or_else(|p| p.into_inner());
        if &**current != id {
            *current = Arc::from(id);
        }
    }

    /// The push fan-out of services.
    pub(crate) fn hub(&self) -> &crate::push::Hub<understudy_core::ServiceKey> {
        &self.hub
    }

    /// The hosts of service `key` in `view`, rendered as JSON (shared
    /// with every other reader of the same state).
    pub(crate) fn hosts(
        &self,
        key: &understudy_core::ServiceKey,
        view: understudy_proto::nacos::View<'_>,
    ) -> Arc<understudy_proto::nacos::Hosts> {
        let service = self.registry().service(key);
        self.hosts.get(key, service.as_deref(), view)
    }

    /// The push fan-out of config items.
    pub(crate) fn config_hub(&self) -> &crate::push::Hub<understudy_core::ConfigKey> {
        &self.config_hub
    }

    /// Every config change, for long polling. Subscribe before comparing
    /// md5s, so no change falls between.
    pub(crate) fn config_changes(
        &self,
    ) -> tokio::sync::broadcast::Receiver<understudy_core::ConfigKey> {
        self.config_changes.subscribe()
    }

    /// Replaces the registry with a snapshot (a raft snapshot install).
    /// Liveness starts afresh; every subscriber of a service in the old or
    /// the new registry is told, so pushes converge on the new state.
    pub fn restore(&self, snapshot: understudy_core::RegistrySnapshot) {
        let mut touched: Vec<understudy_core::ServiceKey> =
            snapshot.services.iter().map(|s| s.key().clone()).collect();
        {
            let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
            let options = registry.options().clone();
            touched.extend(registry.snapshot().services.iter().map(|s| s.key().clone()));
            *registry = Registry::restore(snapshot, options);
        }
        *self.liveness() = Liveness::new();
        self.deadlines_moved.notify_one();
        self.hub.changed(touched.iter());
        // An empty batch tells native watchers the history they follow was
        // replaced: they start over from a fresh snapshot.
        let _ = self.changes.send(Arc::from(Vec::<Change>::new()));
    }

    pub(crate) fn liveness(&self) -> MutexGuard<'_, Liveness> {
        self.liveness
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies commands in order under one write lock and feeds the
    /// changes to liveness. Each command succeeds or fails on its own.
    pub fn apply(
        &self,
        commands: &[Command],
        now: Millis,
    ) -> Vec<Result<Vec<Change>, understudy_core::Error>> {
        let results: Vec<_> = {
            let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
            commands.iter().map(|c| registry.apply(c)).collect()
        };
        let mut liveness = self.liveness();
        let mut any = false;
        for changes in results.iter().flatten() {
            for change in changes {
                liveness.observe(change, now);
                any = true;
            }
        }
        drop(liveness);
        count_lifecycle(commands, &results);
        if any {
            let batch: Arc<[Change]> = results.iter().flatten().flatten().cloned().collect();
            // No watcher is fine.
            let _ = self.changes.send(batch);
            self.deadlines_moved.notify_one();
            for changes in results.iter().flatten() {
                let services: std::collections::BTreeSet<_> =
                    changes.iter().filter_map(|c| c.event.service()).collect();
                self.hub.changed(services);
                // Config listeners hear of content changes and removals only.
                let configs: std::collections::BTreeSet<_> = changes
                    .iter()
                    .filter(|c| {
                        !matches!(
                            c.event,
                            understudy_core::Event::ConfigPublished { changed: false, .. }
                        )
                    })
                    .filter_map(|c| c.event.config())
                    .collect();
                for key in &configs {
                    // No receiver (no long poll waiting) is fine.
                    let _ = self.config_changes.send((*key).clone());
                }
                self.config_hub.changed(configs);
            }
        }
        results
    }
}

/// A running node: cheap to clone, shared by every adapter.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    config: ValidConfig,
    clock: Clock,
    state: Arc<State>,
    writer: Arc<dyn Propose>,
    udp: Option<Arc<crate::udp::UdpPush>>,
    /// The raft handle of a replicated node.
    raft: crate::raft::Raft,
    /// Its transport.
    network: crate::raft::network::Network,
    /// The connection ids (Nacos gRPC connections, native sessions) this
    /// process holds open: owners on this node that are not here are left
    /// over from a failed removal or an earlier run.
    held: Mutex<std::collections::HashSet<String>>,
    /// The last moment this node was part of a working majority.
    quorum_seen: Mutex<tokio::time::Instant>,
    /// How fresh the read view is.
    view: crate::view::View,
    /// Who may call.
    auth: crate::auth::Auth,
    /// The slots for ordinary requests.
    admission: crate::admission::Admission,
    /// The node's tasks, for work started by a request (a take-over).
    tasks: TaskTracker,
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
            .field("node_id", &self.inner.config.node_id)
            .field("dc", &self.inner.config.dc)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Starts a single node: a one-member raft cluster on the same code
    /// path as a replicated one, formed at once (or, on a data dir that
    /// holds one already, restarted as it was). Its writer,
    /// sweeper and raft run on `tasks` until `cancel` fires.
    pub async fn start(
        config: ValidConfig,
        clock: Clock,
        tasks: &TaskTracker,
        cancel: CancellationToken,
    ) -> Result<Node, crate::raft::StartError> {
        use crate::raft::network::{LinkFaults, Network, NetworkOptions};
        let id = config.node_id;
        let me = crate::raft::Member {
            raft_addr: config.cluster.advertise.clone(),
            dc: config.dc.clone(),
        };
        let cluster = config.cluster.clone();
        // A single member never calls out; the network is there because
        // raft needs one.
        let network = Network::new(
            id,
            LinkFaults::new(config.chaos.seed),
            NetworkOptions::default(),
        );
        let node = Self::start_replicated(
            config,
            clock,
            tasks,
            cancel,
            crate::raft::raft_config(&cluster),
            network,
        )
        .await?;
        let raft = node.raft().clone();
        // A durable node restarting on its data dir is already formed.
        if !raft.is_initialized().await? {
            raft.initialize(std::collections::BTreeMap::from([(id, me)]))
                .await
                .map_err(|e| crate::raft::StartError::Form(e.to_string()))?;
        }
        raft.wait(None)
            .current_leader(id, "a single node leads itself")
            .await
            .map_err(|e| crate::raft::StartError::Form(e.to_string()))?;
        Ok(node)
    }

    /// Starts a node of a replicated cluster: its writes become raft
    /// entries sent through `network`, and followers forward them to the
    /// leader through it. The raft service itself is served by the caller
    /// (see [`crate::raft::network::service`]); the cluster is formed by
    /// initialising one member with all voters.
    pub async fn start_replicated(
        config: ValidConfig,
        clock: Clock,
        tasks: &TaskTracker,
        cancel: CancellationToken,
        raft_config: openraft::Config,
        network: crate::raft::network::Network,
    ) -> Result<Node, crate::raft::StartError> {
        use crate::raft::store::{LogStore, StateMachine, Waiters};
        let state = Arc::new(State::new(&config));
        network.on_beat({
            let state = state.clone();
            Arc::new(move |key: &LiveKey| state.liveness().beat(key, clock.now()))
        });
        let faults = network.faults().clone();
        faults.set_dc(config.node_id, &config.dc);
        for spec in &config.chaos.links {
            // Validated with the config.
            let _ = faults.apply(spec);
        }
        for (dc, delay) in &config.chaos.apply_delays {
            faults.set_apply_delay(dc, *delay);
        }
        let view = crate::view::View::new(&config.dc, faults.clone());
        let waiters = Waiters::default();
        let machine = StateMachine::new(config.node_id, state.clone(), clock, waiters.clone())
            .with_view(view.clone());
        let raft_config = Arc::new(raft_config.validate()?);
        let mut closed = None;
        let (log, machine) = match &config.data_dir {
            None => (LogStore::default(), machine),
            Some(dir) => {
                let (disk, mut loaded) = crate::raft::disk::Disk::open(dir, config.node_id)?;
                let path = disk.path().to_owned();
                closed = Some(disk.watch_close());
                let snapshot = loaded.snapshot.take();
                let log = LogStore::durable(disk.clone(), loaded);
                let machine = machine
                    .durable(disk, snapshot)
                    .map_err(|source| crate::raft::StartError::Snapshot { path, source })?;
                (log, machine)
            }
        };
        let raft = crate::raft::Raft::new(
            config.node_id,
            raft_config,
            network.clone(),
            log.clone(),
            machine,
        )
        .await?;
        crate::raft::relay::start(raft.clone(), network.clone(), log, tasks, cancel.clone());
        let writer = crate::raft::writer::RaftWriter::start(
            raft.clone(),
            config.node_id,
            waiters,
            Arc::new(network.clone()),
            &config,
            tasks,
            cancel.clone(),
        );
        let udp = match crate::udp::UdpPush::start(config.bind, tasks, cancel.clone()) {
            Ok(udp) => Some(udp),
            Err(e) => {
                tracing::warn!(error = %e, "no UDP socket: v1 clients will not get pushes");
                None
            }
        };
        let auth = crate::auth::Auth::new(config.auth.clone());
        let admission = crate::admission::Admission::new(
            config.max_concurrent_requests,
            config.request_queue_timeout,
        );
        let node = Node {
            inner: Arc::new(Inner {
                config,
                clock,
                state,
                writer: Arc::new(writer),
                udp,
                raft: raft.clone(),
                network,
                held: Mutex::default(),
                quorum_seen: Mutex::new(tokio::time::Instant::now()),
                view,
                auth,
                admission,
                tasks: tasks.clone(),
            }),
        };
        let weak = Arc::downgrade(&node.inner);
        node.inner
            .network
            .on_admin(Arc::new(move |request| match weak.upgrade() {
                Some(inner) => Node { inner }.answer_admin(request),
                None => crate::raft::network::AdminReply::Refused("the node is stopping".into()),
            }));
        let tick = node.inner.config.chaos.tick;
        let quorum_window =
            std::time::Duration::from_millis(node.inner.config.cluster.election_timeout_ms * 2);
        tasks.spawn(crate::view::run_ticks(
            raft.clone(),
            node.inner.config.node_id,
            tick,
            quorum_window,
            tasks.clone(),
            cancel.clone(),
        ));
        tasks.spawn(crate::raft::gate::run(
            raft.clone(),
            node.inner.network.clone(),
            std::time::Duration::from_millis(node.inner.config.cluster.heartbeat_ms),
            std::time::Duration::from_millis(node.inner.config.cluster.election_timeout_ms),
            tasks.clone(),
            cancel.clone(),
        ));
        tasks.spawn(crate::view::track_dcs(raft.clone(), faults, cancel.clone()));
        tasks.spawn(crate::sweeper::run(node.clone(), cancel.clone()));
        tasks.spawn(crate::probe::run(node.clone(), cancel.clone()));
        tasks.spawn(crate::ownership::run(node.clone(), cancel.clone()));
        tasks.spawn(async move {
            cancel.cancelled().await;
            // A leader that handed over has stopped its raft already.
            let running = raft.metrics().borrow().running_state.is_ok();
            if running {
                if let Err(e) = raft.shutdown().await {
                    tracing::warn!(error = %e, "raft did not stop cleanly");
                }
            }
            // Raft's state machine and replication tasks let go of the
            // store shortly after its core stops. Waiting for that here
            // means a joined node has closed its file cleanly (no repair
            // at the next open) and the same dir can be opened again.
            if let Some(closed) = closed {
                let grace = std::time::Duration::from_secs(5);
                if tokio::time::timeout(grace, closed.wait()).await.is_err() {
                    tracing::warn!(?grace, "the raft store is still open after shutdown");
                }
            }
        });
        Ok(node)
    }

    /// How fresh this node's read view is.
    pub fn view(&self) -> &crate::view::View {
        &self.inner.view
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
            self.inner.view.lag()
        }
    }

    /// Applies this node's DC push faults to one push: waits its delay,
    /// and answers whether to send it. A dropped push goes unanswered and
    /// is retried after the push timeout, as any unanswered push.
    pub(crate) async fn push_passes_faults(&self) -> bool {
        match self.faults().push_fate(&self.inner.config.dc) {
            crate::raft::links::PushFate::Drop => {
                metrics::counter!("understudy_pushes_dropped_by_fault_total").increment(1);
                false
            }
            crate::raft::links::PushFate::Send(delay) => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                true
            }
        }
    }

    /// The fault model this node's transport obeys.
    pub fn faults(&self) -> &crate::raft::links::LinkFaults {
        self.inner.network.faults()
    }

    /// Compacts this node's raft log now: a snapshot of everything
    /// applied, then the log purged up to it (raft also does this by
    /// itself every 5000 entries). Answers the index compacted to.
    pub async fn compact(&self) -> Result<Option<u64>, String> {
        const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
        let raft = self.raft();
        let Some(applied) = raft.metrics().borrow().last_applied else {
            return Ok(None);
        };
        // A trigger while a snapshot is being built is dropped: trigger
        // again until one covers everything applied.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            raft.trigger().snapshot().await.map_err(|e| e.to_string())?;
            let built = raft
                .wait(Some(std::time::Duration::from_secs(1)))
                .metrics(
                    |m| m.snapshot.is_some_and(|s| s.index >= applied.index),
                    "the snapshot is built",
                )
                .await;
            match built {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e.to_string()),
                Err(_) => {}
            }
        }
        raft.trigger()
            .purge_log(applied.index)
            .await
            .map_err(|e| e.to_string())?;
        raft.wait(Some(WAIT))
            .metrics(
                |m| m.purged.is_some_and(|p| p.index >= applied.index),
                "the log is purged",
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(Some(applied.index))
    }

    /// The raft handle (a single node is a one-member cluster).
    pub fn raft(&self) -> &crate::raft::Raft {
        &self.inner.raft
    }

    /// Adds a member: as a learner first (it catches up, by snapshot if the
    /// log was compacted), then, for a voter, promoted. Must run on the
    /// leader; elsewhere the error names the leader.
    pub async fn add_member(
        &self,
        id: crate::raft::NodeId,
        member: crate::raft::Member,
        voter: crate::raft::Role,
    ) -> Result<(), crate::raft::MembershipError> {
        use crate::raft::MembershipError;
        let raft = &self.inner.raft;
        MembershipError::unless_leading(raft)?;
        raft.add_learner(id, member, true)
            .await
            .map_err(MembershipError::from_raft)?;
        if voter == crate::raft::Role::Voter {
            raft.change_membership(
                openraft::ChangeMembers::AddVoterIds(std::collections::BTreeSet::from([id])),
                false,
            )
            .await
            .map_err(MembershipError::from_raft)?;
        }
        Ok(())
    }

    /// Removes a member (voter or learner).
    pub async fn remove_member(
        &self,
        id: crate::raft::NodeId,
    ) -> Result<(), crate::raft::MembershipError> {
        use crate::raft::MembershipError;
        let raft = &self.inner.raft;
        MembershipError::unless_leading(raft)?;
        let ids = std::collections::BTreeSet::from([id]);
        let is_voter = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id);
        if is_voter {
            raft.change_membership(openraft::ChangeMembers::RemoveVoters(ids.clone()), false)
                .await
                .map_err(MembershipError::from_raft)?;
        }
        raft.change_membership(openraft::ChangeMembers::RemoveNodes(ids), false)
            .await
            .map_err(MembershipError::from_raft)?;
        Ok(())
    }

    /// This node's view of the cluster.
    pub fn cluster_status(&self) -> crate::raft::ClusterStatus {
        let revision = self.registry().revision();
        crate::raft::ClusterStatus::of(&self.inner.raft, &self.inner.config.dc, revision)
    }

    /// This node's own state.
    pub fn node_status(&self) -> crate::raft::NodeStatus {
        crate::raft::NodeStatus {
            cluster: self.cluster_status(),
            view_lag_ms: self.view_lag().map(|l| l.as_millis() as u64),
            register_to_visible: self.inner.view.register_to_visible(),
        }
    }

    /// Every member (voters and learners) as this node knows them.
    pub fn members(&self) -> Vec<(crate::raft::NodeId, crate::raft::Member)> {
        self.raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, m)| (*id, m.clone()))
            .collect()
    }

    /// Every member's status: this node's own, the others' asked out of
    /// band (so a partitioned member still answers), each within
    /// `timeout`.
    pub async fn cluster_report(
        &self,
        timeout: std::time::Duration,
    ) -> Vec<crate::raft::NodeReport> {
        use crate::raft::network::{AdminReply, AdminRequest};
        let members = self.members();
        let asks = members.into_iter().map(|(id, member)| async move {
            let (status, error) = if id == self.inner.config.node_id {
                (Some(self.node_status()), None)
            } else {
                match self
                    .inner
                    .network
                    .admin(id, &member, &AdminRequest::Status, timeout)
                    .await
                {
                    Ok(AdminReply::Status(status)) => (Some(*status), None),
                    Ok(other) => (None, Some(format!("unexpected answer {other:?}"))),
                    Err(e) => (None, Some(e)),
                }
            };
            crate::raft::NodeReport {
                id,
                dc: member.dc,
                status,
                error,
            }
        });
        futures_util::future::join_all(asks).await
    }

    /// Changes the fault model here and hands it to every other member out
    /// of band; answers the members that could not be told.
    pub async fn set_faults(
        &self,
        state: &crate::raft::links::FaultState,
    ) -> Result<Vec<(crate::raft::NodeId, String)>, crate::raft::links::InvalidLink> {
        use crate::raft::network::{AdminReply, AdminRequest};
        self.faults().set_state(state)?;
        let me = self.inner.config.node_id;
        let mut members = self.members();
        members.retain(|(id, _)| *id != me);
        let request = AdminRequest::SetFaults(state.clone());
        let tells = members.into_iter().map(|(id, member)| {
            let request = &request;
            async move {
                let answer = self
                    .inner
                    .network
                    .admin(id, &member, request, std::time::Duration::from_secs(2))
                    .await;
                match answer {
                    Ok(AdminReply::Faults(_)) => None,
                    Ok(AdminReply::Refused(why)) => Some((id, why)),
                    Ok(other) => Some((id, format!("unexpected answer {other:?}"))),
                    Err(e) => Some((id, e)),
                }
            }
        });
        Ok(futures_util::future::join_all(tells)
            .await
            .into_iter()
            .flatten()
            .collect())
    }

    fn answer_admin(
        &self,
        request: crate::raft::network::AdminRequest,
    ) -> crate::raft::network::AdminReply {
        use crate::raft::network::{AdminReply, AdminRequest};
        match request {
            AdminRequest::Status => AdminReply::Status(Box::new(self.node_status())),
            // Answered by the transport itself.
            AdminRequest::Ping => AdminReply::Pong,
            AdminRequest::SetFaults(state) => match self.faults().set_state(&state) {
                Ok(()) => AdminReply::Faults(self.faults().state()),
                Err(e) => AdminReply::Refused(e.to_string()),
            },
            AdminRequest::TakeOver => {
                self.inner.tasks.spawn(take_over(
                    self.inner.raft.clone(),
                    self.inner.config.node_id,
                    self.inner.config.cluster.election_timeout_ms,
                ));
                AdminReply::TakingOver
            }
        }
    }

    /// Before this node stops: if it leads a cluster with other voters,
    /// asks the most up-to-date of them to take over (after waiting up to
    /// an election timeout for one to hold the whole log), stops its own
    /// raft so its heartbeats end, and waits within `within` until that
    /// voter leads. openraft 0.9 has no leadership transfer; the voters'
    /// leader leases let the election succeed once the old leader's last
    /// heartbeat is an election timeout (at most twice it) old. Returns
    /// the new leader, if it was seen leading.
    pub async fn hand_over(&self, within: std::time::Duration) -> Option<crate::raft::NodeId> {
        use crate::raft::network::{AdminReply, AdminRequest};
        use std::time::Duration;
        let me = self.inner.config.node_id;
        if !self.leads() {
            return None;
        }
        let started = tokio::time::Instant::now();
        let cluster = &self.inner.config.cluster;
        let heartbeat = Duration::from_millis(cluster.heartbeat_ms);
        let catch_up = started + Duration::from_millis(cluster.election_timeout_ms);
        let target = loop {
            let status = self.cluster_status();
            let best = status
                .members
                .iter()
                .filter(|m| m.voter && m.id != me)
                .max_by_key(|m| m.matched.unwrap_or(0));
            let best = best?;
            if best.matched >= Some(status.last_log) || tokio::time::Instant::now() >= catch_up {
                break best.id;
            }
            tokio::time::sleep(heartbeat).await;
        };
        let member = self.members().into_iter().find(|(id, _)| *id == target)?.1;
        let asked = self
            .inner
            .network
            .admin(target, &member, &AdminRequest::TakeOver, heartbeat * 10)
            .await;
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(error = %e, "raft did not stop cleanly");
        }
        match asked {
            Ok(AdminReply::TakingOver) => {
                tracing::info!(node = target, "stepped down; node {target} is taking over")
            }
            other => {
                tracing::warn!(node = target, answer = ?other, "stepped down; node {target} did not take over, the others will elect a leader");
                return None;
            }
        }
        let deadline = started + within;
        while tokio::time::Instant::now() < deadline {
            let asked = self
                .inner
                .network
                .admin(target, &member, &AdminRequest::Status, heartbeat * 5)
                .await;
            if let Ok(AdminReply::Status(status)) = asked {
                if status.cluster.role == "leader" {
                    tracing::info!(
                        node = target,
                        after_ms = started.elapsed().as_millis() as u64,
                        "node {target} leads now"
                    );
                    return Some(target);
                }
            }
            tokio::time::sleep(heartbeat).await;
        }
        tracing::warn!(
            node = target,
            ?within,
            "node {target} did not lead within the grace period"
        );
        None
    }

    /// Whether this node leads its cluster (a single node, once formed).
    pub fn leads(&self) -> bool {
        self.inner.raft.metrics().borrow().current_leader == Some(self.inner.config.node_id)
    }

    /// How long this node has been cut off from a working majority: a
    /// leader that no quorum acknowledged within an election timeout, a
    /// follower or learner that heard nothing from a leader for as long.
    /// `None` while it is part of one (always, for a single member).
    pub fn quorum_lost_for(&self) -> Option<std::time::Duration> {
        let (raft, network) = (&self.inner.raft, &self.inner.network);
        let me = self.inner.config.node_id;
        let timeout =
            std::time::Duration::from_millis(self.inner.config.cluster.election_timeout_ms);
        let now = tokio::time::Instant::now();
        let healthy = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            let mut voters = metrics.membership_config.membership().voter_ids();
            if voters.next() == Some(me) && voters.next().is_none() {
                true
            } else if metrics.current_leader == Some(me) {
                metrics
                    .millis_since_quorum_ack
                    .is_some_and(|ms| std::time::Duration::from_millis(ms) < timeout)
            } else {
                metrics
                    .current_leader
                    .and_then(|leader| network.contacts().last(leader))
                    .is_some_and(|heard| now.saturating_duration_since(heard) < timeout)
            }
        };
        let mut seen = self
            .inner
            .quorum_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if healthy {
            *seen = now;
            return None;
        }
        let lost = now.saturating_duration_since(*seen);
        (lost >= timeout).then_some(lost)
    }

    /// When each raft peer was last heard from.
    pub(crate) fn contacts(&self) -> &crate::raft::network::Contacts {
        self.inner.network.contacts()
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
        &self.inner.config
    }

    /// Who may call this node.
    pub fn auth(&self) -> &crate::auth::Auth {
        &self.inner.auth
    }

    /// The slots for ordinary requests (see [`crate::admission`]).
    pub(crate) fn admission(&self) -> &crate::admission::Admission {
        &self.inner.admission
    }

    /// Now, in epoch ms.
    pub fn now(&self) -> Millis {
        self.inner.clock.now()
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Reads the registry. Hold the guard briefly, never across `.await`.
    pub fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.inner.state.registry()
    }

    pub(crate) fn state(&self) -> &State {
        &self.inner.state
    }

    /// Proposes an operation stamped with the current time.
    pub async fn propose(&self, op: Op) -> Result<Applied, ProposeError> {
        let command = Command::new(self.now(), op);
        let started = std::time::Instant::now();
        let result = self.inner.writer.propose(command).await;
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
        let local = self.inner.state.liveness().beat(key, self.now());
        if self.is_sole_voter() {
            return local;
        }
        let owner = Owner::Beat {
            ip: key.instance.ip.clone(),
            port: key.instance.port,
        };
        let me = self.inner.config.node_id;
        let target = understudy_core::responsible(&self.beat_ring(), &owner).unwrap_or(me);
        if target == me {
            return local;
        }
        let member = self
            .inner
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
        match self.inner.network.beat(target, &member, key, timeout).await {
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
        let me = self.inner.config.node_id;
        let metrics = self.inner.raft.metrics();
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
        self.inner.state.liveness().beat_interval(key)
    }

    /// UDP push for v1 clients, if its socket could be bound.
    pub(crate) fn udp(&self) -> Option<&Arc<crate::udp::UdpPush>> {
        self.inner.udp.as_ref()
    }

    pub(crate) fn deadlines_moved(&self) -> &Notify {
        &self.inner.state.deadlines_moved
    }
}

/// Runs for leader until this node leads, a little longer than the
/// voters' leader leases (twice the election timeout) allow it to take.
async fn take_over(raft: crate::raft::Raft, me: crate::raft::NodeId, election_timeout_ms: u64) {
    let round = std::time::Duration::from_millis(election_timeout_ms / 2);
    let deadline = tokio::time::Instant::now() + round * 10;
    while tokio::time::Instant::now() < deadline {
        if raft.metrics().borrow().current_leader == Some(me) {
            return;
        }
        if let Err(e) = raft.trigger().elect().await {
            tracing::warn!(error = %e, "cannot run for leader");
            return;
        }
        tokio::time::sleep(round).await;
    }
    tracing::warn!("did not become leader after the old leader stepped down");
}

/// Counts instance removals by cause and health transitions by direction
/// and source, as this node applies them.
fn count_lifecycle(commands: &[Command], results: &[Result<Vec<Change>, understudy_core::Error>]) {
    use understudy_core::{Event, RemovalCause};
    for (command, changes) in commands.iter().zip(results) {
        let Ok(changes) = changes else { continue };
        for change in changes {
            let Event::InstanceRemoved { cause, .. } = &change.event else {
                continue;
            };
            let cause = match cause {
                RemovalCause::Deregistered => "deregistered",
                RemovalCause::Expired => "expired",
                RemovalCause::OwnerLost => "owner_lost",
                RemovalCause::ConnectionClosed => "connection_closed",
                RemovalCause::Replaced => "replaced",
            };
            metrics::counter!("understudy_instances_removed_total", "cause" => cause).increment(1);
        }
        if let Op::SetHealth { healthy, .. } = &command.op {
            if !changes.is_empty() {
                let to = if *healthy { "healthy" } else { "unhealthy" };
                metrics::counter!("understudy_health_changes_total", "to" => to).increment(1);
            }
        }
    }
}
