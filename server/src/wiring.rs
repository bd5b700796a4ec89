//! Where a node is put together, in one place: its applied state, the
//! raft log store and state machine (in memory or on disk), the transport,
//! the replicated writer, the read view, the UDP push socket, auth and
//! admission; then the background tasks around it (commit relay, election
//! gate, ticks, DC tracking, liveness sweeper, probes, ownership), each
//! on the node's task tracker until `cancel` fires.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::LiveKey;

use crate::clock::Clock;
use crate::config::ValidConfig;
use crate::node::{Node, Parts, UdpListeners};
use crate::state::State;

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
        use crate::faults::LinkFaults;
        use crate::raft::network::{Network, NetworkOptions};
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
        let leading = raft
            .wait(None)
            .current_leader(id, "a single node leads itself")
            .await
            .map_err(|e| crate::raft::StartError::Form(e.to_string()))?;
        // A restarted node applies its log again; it serves once all of
        // it is back, never a registry with part of its writes missing.
        raft.wait(None)
            .applied_index_at_least(leading.last_log_index, "the log on disk applied")
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
        let view = crate::view::View::new(&config.dc, faults.clone(), clock);
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
        if config.cluster.workarounds.commit_relay {
            crate::raft::relay::start(raft.clone(), network.clone(), log, tasks, cancel.clone());
        }
        let writer = Arc::new(crate::raft::writer::RaftWriter::start(
            raft.clone(),
            waiters,
            Arc::new(network.clone()),
            &config,
            clock,
            tasks,
            cancel.clone(),
        ));
        // Followers' batches join this node's entries while it leads. The
        // transport holds the writer weakly: the writer holds it too.
        let joining = Arc::downgrade(&writer);
        network.on_forward(Arc::new(move |batch| {
            let writer = joining.upgrade();
            Box::pin(async move {
                match writer {
                    Some(writer) => writer.join(batch).await.map_err(|e| e.to_string()),
                    None => Err("the node is stopping".into()),
                }
            })
        }));
        let udp = match crate::udp::UdpPush::start(config.bind, tasks, cancel.clone()) {
            Ok(udp) => Some(udp),
            Err(e) => {
                tracing::warn!(error = %e, "no UDP socket: v1 clients will not get pushes");
                None
            }
        };
        let auth = crate::auth::Auth::new(config.auth.clone()).with_state(state.clone());
        let admission = crate::admission::Admission::new(
            config.admission.max_concurrent_requests,
            config.admission.request_queue_timeout,
        );
        let node = Node::assemble(Parts {
            config,
            clock,
            state,
            writer,
            udp: udp.map(|u| u as Arc<dyn UdpListeners>),
            raft: raft.clone(),
            network: network.clone(),
            view,
            auth,
            admission,
            tasks: tasks.clone(),
        });
        let weak = node.downgrade();
        network.on_admin(Arc::new(move |request| match weak.upgrade() {
            Some(node) => node.answer_admin(request),
            None => crate::raft::network::AdminReply::Refused("the node is stopping".into()),
        }));
        let config = node.config();
        let tick = config.chaos.tick;
        let quorum_window = config.cluster.election_timeout * 2;
        tasks.spawn(crate::raft::ticks::run_ticks(
            raft.clone(),
            config.node_id,
            node.clock().to_owned(),
            tick,
            quorum_window,
            tasks.clone(),
            cancel.clone(),
        ));
        if config.cluster.workarounds.election_gate {
            tasks.spawn(crate::raft::gate::run(
                raft.clone(),
                network.clone(),
                config.cluster.heartbeat,
                config.cluster.election_timeout,
                tasks.clone(),
                cancel.clone(),
            ));
        }
        tasks.spawn(crate::raft::ticks::track_dcs(
            raft.clone(),
            faults,
            cancel.clone(),
        ));
        tasks.spawn(crate::sweeper::run(node.clone(), cancel.clone()));
        tasks.spawn(crate::probe::run(node.clone(), cancel.clone()));
        tasks.spawn(crate::ownership::run(node.clone(), cancel.clone()));
        tasks.spawn(crate::metrics::upkeep(cancel.clone()));
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
}

/// Starts this node as a member of the configured cluster: its raft
/// service on `listener`, the other members from the config; the member
/// with the lowest id forms the cluster (doing so again after a restart is
/// refused by raft and harmless).
pub(crate) async fn start_member(
    config: crate::ValidConfig,
    listener: tokio::net::TcpListener,
    faults: crate::faults::LinkFaults,
    tasks: &tokio_util::task::TaskTracker,
    cancel: tokio_util::sync::CancellationToken,
) -> std::io::Result<crate::Node> {
    use crate::raft::network::{self, ClusterSecret, Network, NetworkOptions};
    use crate::raft::{raft_config, Member, Members};

    let id = config.node_id;
    let cluster = config.cluster.clone();
    let secret = match &cluster.secret {
        Some(s) => Some(ClusterSecret::new(s).map_err(|e| std::io::Error::other(e.to_string()))?),
        None => None,
    };
    for (peer, member) in &cluster.peers {
        if !member.dc.is_empty() {
            faults.set_dc(*peer, &member.dc);
        }
    }
    let network = Network::new(
        id,
        faults.clone(),
        NetworkOptions {
            secret: secret.clone(),
            tls: config.tls.clone(),
            ..NetworkOptions::default()
        },
    );
    let raft_config = raft_config(&cluster);
    let mut members: Members = cluster.peers.clone();
    members.insert(
        id,
        Member {
            raft_addr: cluster.advertise.clone(),
            dc: config.dc.clone(),
        },
    );
    let node = crate::Node::start_replicated(
        config,
        crate::Clock::system(),
        tasks,
        cancel.clone(),
        raft_config,
        network.clone(),
    )
    .await
    .map_err(std::io::Error::other)?;
    let raft = node.raft().clone();
    let address = listener.local_addr()?;
    let service = network::service(raft.clone(), &network);
    // Raft's appends and votes are small request/response exchanges: with
    // Nagle on, each waited out the peer's delayed ACK (up to 40 ms).
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let stop = cancel.clone();
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = &node.config().tls {
        server = server
            .tls_config(crate::tls::raft_server_config(tls))
            .map_err(std::io::Error::other)?;
    }
    tasks.spawn(async move {
        if let Err(e) = server
            .add_routes(service)
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await
        {
            tracing::error!(error = %e, "raft service failed");
        }
    });
    tracing::info!(raft = %address, node = id, peers = ?cluster.peers.keys().collect::<Vec<_>>(), "serving raft");
    if members.keys().next() == Some(&id) {
        match raft.initialize(members).await {
            Ok(()) => tracing::info!("formed the cluster"),
            // Already formed (a restart, or another member did).
            Err(e) => tracing::debug!(error = %e, "cluster not initialised by this node"),
        }
    }
    Ok(node)
}
