//! `understudy sim`: a whole multi-DC cluster in one process. Every node
//! is a full node on its own HTTP, gRPC and raft ports; their raft
//! transports share one fault model ([`LinkFaults`]), so DC link faults,
//! partitions and pauses act on real raft traffic exactly as they do
//! between processes. A rig points its clients at the printed ports and
//! needs no orchestration.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clap::Args;
use thiserror::Error;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::faults::{LinkFaults, LinkSpec};
use crate::raft::NodeId;
use crate::{Listeners, Node, Serving, ValidConfig};

/// `understudy sim`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// A DC and how many nodes it has, `NAME=COUNT`; repeat for each (node
    /// ids are given in order: the first DC's nodes first).
    #[arg(long = "dc", value_name = "NAME=COUNT", required = true)]
    pub dcs: Vec<String>,
    /// A link fault, as for `serve --link`; repeat for each.
    #[arg(long = "link", value_name = "SPEC")]
    pub links: Vec<String>,
    /// A DC's apply delay, `DC=DELAY`; repeat for each.
    #[arg(long = "apply-delay", value_name = "DC=DELAY")]
    pub apply_delays: Vec<String>,
    /// Seed of the loss and jitter draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Address every node listens on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Node N's HTTP port is BASE + N - 1, its gRPC port that + 1000 and
    /// its raft port that + 2000; 0 lets the OS choose free ports.
    #[arg(long, default_value_t = 8848)]
    pub base_port: u16,
    /// Log filter.
    #[arg(long, default_value = "info,openraft=warn")]
    pub log: String,
    /// Raft heartbeat period, ms [default: the slowest link's round trip
    /// plus 100, at least 100: openraft times each append by it].
    #[arg(long)]
    pub raft_heartbeat_ms: Option<u64>,
}

/// The running nodes did not agree on a leader in time.
#[derive(Debug, Error)]
#[error("no agreed leader within {within:?}: {leaders:?}")]
pub struct NoLeader {
    /// How long they were given.
    pub within: Duration,
    /// Each running node's leader when time ran out.
    pub leaders: Vec<Option<NodeId>>,
}

/// A sim that cannot start.
#[derive(Debug, Error)]
pub enum SimError {
    /// An argument is wrong.
    #[error("invalid {key}: {reason}")]
    Invalid {
        /// The argument.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A node's settings are refused.
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    /// The nodes agree on no leader.
    #[error("the cluster elected no leader: {0}")]
    NoLeader(#[from] NoLeader),
    /// A port could not be bound or a node did not start.
    #[error("node {node}: {source}")]
    Io {
        /// The node.
        node: NodeId,
        /// What failed.
        source: std::io::Error,
    },
}

/// What a sim cluster is made of.
#[derive(Debug, Clone)]
pub struct SimSpec {
    /// Each DC and its node count, in id order.
    pub dcs: Vec<(String, u64)>,
    /// Link faults from the start.
    pub links: Vec<LinkSpec>,
    /// Apply delays from the start.
    pub apply_delays: BTreeMap<String, Duration>,
    /// Seed of the draws.
    pub seed: u64,
    /// Address to listen on.
    pub bind: IpAddr,
    /// Port layout (see [`SimArgs::base_port`]); 0: free ports.
    pub base_port: u16,
    /// Settings every node gets (raft timings, log filter, ...). A
    /// `data_dir` is the root of the nodes' own: node N keeps its state in
    /// `data_dir/node-N`, and can be [restarted](Sim::restart).
    pub settings: Settings,
}

impl SimSpec {
    /// The spec from the command line.
    pub fn from_args(args: &SimArgs) -> Result<Self, SimError> {
        let invalid = |key, reason: String| SimError::Invalid { key, reason };
        let mut dcs = Vec::new();
        for text in &args.dcs {
            let (name, count) = text
                .split_once('=')
                .ok_or_else(|| invalid("dc", format!("'{text}' is not NAME=COUNT")))?;
            let count: u64 = count
                .parse()
                .ok()
                .filter(|c| (1..=9).contains(c))
                .ok_or_else(|| invalid("dc", format!("'{text}' needs a count from 1 to 9")))?;
            dcs.push((name.trim().to_owned(), count));
        }
        let mut links = Vec::new();
        for text in &args.links {
            links.push(
                text.parse()
                    .map_err(|e: crate::faults::InvalidLink| invalid("link", e.to_string()))?,
            );
        }
        let mut apply_delays = BTreeMap::new();
        for text in &args.apply_delays {
            let (dc, delay) = crate::faults::parse_apply_delay(text)
                .map_err(|e| invalid("apply-delay", e.to_string()))?;
            apply_delays.insert(dc, delay);
        }
        let heartbeat = args
            .raft_heartbeat_ms
            .unwrap_or_else(|| heartbeat_for(links.iter().map(|l: &LinkSpec| l.link)));
        Ok(SimSpec {
            dcs,
            links,
            apply_delays,
            seed: args.seed,
            bind: args.bind,
            base_port: args.base_port,
            settings: Settings {
                log: Some(args.log.clone()),
                ..raft_timings(heartbeat)
            },
        })
    }

    /// How many nodes.
    pub fn size(&self) -> u64 {
        self.dcs.iter().map(|(_, n)| n).sum()
    }
}

/// One node of a [`Sim`].
#[derive(Debug)]
pub struct SimNode {
    /// Its id.
    pub id: NodeId,
    /// Its DC.
    pub dc: String,
    /// Its HTTP address (Nacos Open API, admin).
    pub http: SocketAddr,
    /// Its gRPC address (Nacos 2.x and native API): HTTP port + 1000.
    pub grpc: SocketAddr,
    /// Its raft address.
    pub raft: SocketAddr,
    /// Its settings, kept for a restart.
    config: ValidConfig,
    serving: Option<Serving>,
}

impl SimNode {
    /// The running node, unless it was killed.
    pub fn node(&self) -> Option<&Node> {
        self.serving.as_ref().map(Serving::node)
    }
}

/// A multi-DC cluster in this process.
#[derive(Debug)]
pub struct Sim {
    nodes: BTreeMap<NodeId, SimNode>,
    faults: LinkFaults,
    /// Killed nodes winding down.
    dying: tokio_util::task::TaskTracker,
}

impl Sim {
    /// Binds every node's ports, starts them, and returns once they agree
    /// on a leader (within `within`).
    pub async fn start(spec: &SimSpec, within: Duration) -> Result<Self, SimError> {
        let faults = LinkFaults::new(spec.seed);
        let mut bound = Vec::new();
        let mut id = 0;
        for (dc, count) in &spec.dcs {
            for _ in 0..*count {
                id += 1;
                let listeners = bind_node(spec, id)
                    .await
                    .map_err(|source| SimError::Io { node: id, source })?;
                faults.set_dc(id, dc);
                bound.push((id, dc.clone(), listeners));
            }
        }
        let peer = |(id, dc, l): &(NodeId, String, Listeners)| {
            let raft = l.raft.as_ref().and_then(|r| r.local_addr().ok());
            format!(
                "{id}={}@{dc}",
                raft.map(|a| a.to_string()).unwrap_or_default()
            )
        };
        let all: Vec<(NodeId, String)> = bound.iter().map(|b| (b.0, peer(b))).collect();
        let mut nodes = BTreeMap::new();
        for (id, dc, listeners) in bound {
            let (http, grpc) = (addr(&listeners.http)?, addr(&listeners.grpc)?);
            let raft = match &listeners.raft {
                Some(r) => r
                    .local_addr()
                    .map_err(|source| SimError::Io { node: id, source })?,
                None => unreachable!("bind_node binds a raft port"),
            };
            // One member list for every node, this one included.
            let peers = all.iter().map(|(_, text)| text.clone()).collect();
            let settings = Settings {
                node_id: Some(id),
                dc: Some(dc.clone()),
                bind: Some(spec.bind),
                http_port: Some(http.port()),
                grpc_port: Some(grpc.port()),
                raft_port: Some(raft.port()),
                raft_advertise: Some(raft.to_string()),
                peers: Some(peers),
                data_dir: spec
                    .settings
                    .data_dir
                    .as_ref()
                    .map(|root| root.join(format!("node-{id}"))),
                link: Some(spec.links.iter().map(ToString::to_string).collect()),
                chaos_seed: Some(spec.seed),
                apply_delay: Some(
                    spec.apply_delays
                        .iter()
                        .map(|(dc, d)| format!("{dc}={}us", d.as_micros()))
                        .collect(),
                ),
                ..spec.settings.clone()
            };
            let config = ValidConfig::from_settings(settings)?;
            let serving = crate::serve(config.clone(), listeners, faults.clone())
                .await
                .map_err(|source| SimError::Io { node: id, source })?;
            nodes.insert(
                id,
                SimNode {
                    id,
                    dc,
                    http,
                    grpc,
                    raft,
                    config,
                    serving: Some(serving),
                },
            );
        }
        let sim = Sim {
            nodes,
            faults,
            dying: tokio_util::task::TaskTracker::new(),
        };
        sim.leader(within).await?;
        Ok(sim)
    }

    /// The nodes, by id.
    pub fn nodes(&self) -> &BTreeMap<NodeId, SimNode> {
        &self.nodes
    }

    /// The running node `id`.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(&id).and_then(SimNode::node)
    }

    /// The shared fault model.
    pub fn faults(&self) -> &LinkFaults {
        &self.faults
    }

    /// Waits until the running nodes that are not paused agree on a
    /// leader, and returns it.
    pub async fn leader(&self, within: Duration) -> Result<NodeId, NoLeader> {
        let deadline = tokio::time::Instant::now() + within;
        let paused = self.faults.paused();
        loop {
            let leaders: Vec<Option<NodeId>> = self
                .nodes
                .values()
                .filter(|n| !paused.contains(&n.id))
                .filter_map(SimNode::node)
                .map(|n| n.raft().metrics().borrow().current_leader)
                .collect();
            if let Some(Some(leader)) = leaders.first() {
                if leaders.iter().all(|l| l == &Some(*leader)) && self.node(*leader).is_some() {
                    return Ok(*leader);
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(NoLeader { within, leaders });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills node `id` as a crash would: its ports close at once (what is
    /// left of its tasks winds down in the background).
    pub fn kill(&mut self, id: NodeId) -> bool {
        match self.nodes.get_mut(&id).and_then(|n| n.serving.take()) {
            Some(serving) => {
                self.dying.spawn(serving.kill());
                true
            }
            None => false,
        }
    }

    /// Starts killed node `id` again on its old ports from its data dir,
    /// as a restarted process comes back. Only a sim with a data dir can
    /// restart nodes: a raft node must not forget its log and its vote.
    /// `false` when it is running already.
    pub async fn restart(&mut self, id: NodeId) -> Result<bool, SimError> {
        let Some(node) = self.nodes.get_mut(&id) else {
            return Ok(false);
        };
        if node.serving.is_some() {
            return Ok(false);
        }
        if node.config.data_dir.is_none() {
            return Err(SimError::Invalid {
                key: "restart",
                reason: format!(
                    "node {id} keeps its state in memory; only a sim with a data dir restarts nodes"
                ),
            });
        }
        let io = |source| SimError::Io { node: id, source };
        // The killed node's sockets may still be closing: retry briefly.
        let mut tries = 0;
        let listeners = loop {
            let bound = async {
                Ok::<_, std::io::Error>(Listeners {
                    http: TcpListener::bind(node.http).await?,
                    grpc: TcpListener::bind(node.grpc).await?,
                    raft: Some(TcpListener::bind(node.raft).await?),
                })
            };
            match bound.await {
                Ok(listeners) => break listeners,
                Err(e) if tries >= 50 => return Err(io(e)),
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let serving = crate::serve(node.config.clone(), listeners, self.faults.clone())
            .await
            .map_err(io)?;
        node.serving = Some(serving);
        Ok(true)
    }

    /// Stops every node gracefully, and waits for killed ones to wind down.
    pub async fn stop(mut self) {
        for node in self.nodes.values_mut() {
            if let Some(serving) = node.serving.take() {
                let _ = serving.stop().await;
            }
        }
        self.dying.close();
        self.dying.wait().await;
    }

    /// A table of the nodes and their ports, for people.
    pub fn describe(&self) -> String {
        let mut out =
            String::from("node  dc        http                   grpc                   raft\n");
        for n in self.nodes.values() {
            out.push_str(&format!(
                "{:<5} {:<9} {:<22} {:<22} {}\n",
                n.id, n.dc, n.http, n.grpc, n.raft
            ));
        }
        out
    }
}

/// A raft heartbeat period that outlasts the round trip of the slowest of
/// `links` (openraft gives up on an append after one heartbeat period).
pub fn heartbeat_for(links: impl IntoIterator<Item = crate::faults::Link>) -> u64 {
    let slowest = links
        .into_iter()
        .map(|l| (l.delay + l.jitter).as_millis() as u64)
        .max()
        .unwrap_or(0);
    (2 * slowest + 100).max(100)
}

/// Settings with heartbeat `heartbeat` ms and election timeout (and the
/// ownership timers above it) scaled to it.
pub fn raft_timings(heartbeat: u64) -> Settings {
    let election = (heartbeat * 4).max(1_000);
    Settings {
        raft_heartbeat_ms: Some(heartbeat),
        raft_election_timeout_ms: Some(election),
        quorum_loss_reset_ms: Some((election * 10).max(10_000)),
        owner_grace_ms: Some((election * 20).max(20_000)),
        ..Settings::default()
    }
}

fn addr(listener: &TcpListener) -> Result<SocketAddr, SimError> {
    listener
        .local_addr()
        .map_err(|source| SimError::Io { node: 0, source })
}

/// Binds node `id`'s three ports: by the base port layout, or free ports
/// with gRPC = HTTP + 1000 as Nacos clients assume.
async fn bind_node(spec: &SimSpec, id: NodeId) -> std::io::Result<Listeners> {
    let at = |port: u16| SocketAddr::new(spec.bind, port);
    if spec.base_port != 0 {
        let http_port = spec.base_port as u64 + id - 1;
        let port = |offset: u64| {
            u16::try_from(http_port + offset).map_err(|_| {
                std::io::Error::other(format!("port {} is beyond 65535", http_port + offset))
            })
        };
        return Ok(Listeners {
            http: TcpListener::bind(at(port(0)?)).await?,
            grpc: TcpListener::bind(at(port(1000)?)).await?,
            raft: Some(TcpListener::bind(at(port(2000)?)).await?),
        });
    }
    for _ in 0..100 {
        let http = TcpListener::bind(at(0)).await?;
        let port = http.local_addr()?.port();
        let Some(grpc_port) = port.checked_add(1000) else {
            continue;
        };
        if let Ok(grpc) = TcpListener::bind(at(grpc_port)).await {
            let raft = TcpListener::bind(at(0)).await?;
            return Ok(Listeners {
                http,
                grpc,
                raft: Some(raft),
            });
        }
    }
    Err(std::io::Error::other(
        "no free port pair P, P + 1000 found in 100 tries",
    ))
}

/// Runs `understudy sim` until SIGINT or SIGTERM.
pub async fn main(
    args: SimArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), SimError> {
    let spec = SimSpec::from_args(&args)?;
    let mut sim = Sim::start(&spec, Duration::from_secs(30)).await?;
    println!("understudy sim: {} nodes, seed {}", spec.size(), spec.seed);
    print!("{}", sim.describe());
    for link in sim.faults().dc_links() {
        println!("link {link}");
    }
    println!("leader: node {}", sim.leader(Duration::from_secs(5)).await?);
    // `POST /understudy/v1/chaos/kill?node=N` on any node lands here.
    let mut kills = sim.faults().take_kills();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(request) = kills.recv() => {
                let killed = sim.kill(request.node);
                if killed {
                    println!("killed: node {}", request.node);
                }
                let _ = request.done.send(killed);
            }
        }
    }
    sim.stop().await;
    Ok(())
}
