//! understudy-server: one understudy registry node, as a library (the
//! `understudy` binary is the `cli/` package).
//!
//! Component map, in the order a node is put together
//! (`docs/architecture.md` walks a registration and a watch through it):
//! - `cli`, `config`: the command line, and the settings layered from
//!   flags, environment and TOML file, validated into a [`ValidConfig`]
//!   tree of per-concern groups;
//! - `clock`: the node's [`Clock`] (epoch milliseconds on tokio's clock,
//!   and the wall clock for stamps compared across nodes);
//! - `member`, `faults`: node ids and members; the link model (latency,
//!   jitter, loss, cuts between DCs, pauses, apply delays, push faults,
//!   config read lags);
//! - `state`, `write`: the applied state (registry, liveness, subscription
//!   hubs) and the [`Propose`] write seam;
//! - `raft`: the log store and state machine, the replicated writer behind
//!   the seam, the transport and the peer service, the commit relay, the
//!   election gate and ticks;
//! - `view`, `read_lag`: read-view lag and apply delays; the config read
//!   lag (formal config reads answering as before recent writes);
//! - `wiring`, `node`: the one place a node is assembled, and the [`Node`]
//!   facade adapters hold (with its cluster operations);
//! - `sweeper`, `probe`, `ownership`: background tasks: liveness
//!   deadlines, health checks of persistent instances, owners across nodes;
//! - `push`, `udp`: subscriptions and the subscribe-then-snapshot push
//!   state; legacy UDP pushes to v1 HTTP clients;
//! - `http`, `grpc`: the adapters: the Nacos HTTP Open API, console,
//!   operator, chaos and probe endpoints and `/metrics`; the Nacos gRPC
//!   API and the native `understudy.v1` API;
//! - `admission`, `auth`, `tls`, `metrics`: connection caps and request
//!   admission, users and signed tokens, TLS on every port, the
//!   Prometheus recorder;
//! - `ctl`, `sim`: `understudy ctl` (HTTP calls to a running node) and a
//!   whole multi-DC cluster in one process;
//! - `fuzzing`: entry points that feed untrusted bytes through the
//!   decoders, for the fuzz targets in `fuzz/` and their regression tests.
//!
//! [`run`] serves a node on pre-bound listeners until a shutdown future
//! resolves; tests bind port 0 and call it in-process, or build a
//! [`Node`] and drive [`router`] without sockets.

mod admission;
pub mod auth;
pub mod cli;
mod clients;
pub mod clock;
pub mod config;
pub mod ctl;
pub mod faults;
// For `fuzz/` and the regression tests only; not part of the API.
mod ai;
#[doc(hidden)]
pub mod fuzzing;
mod fuzzy;
mod grpc;
mod hosts;
mod http;
pub mod member;
pub mod metrics;
pub mod node;
mod ownership;
mod probe;
mod push;
mod races;
pub mod raft;
mod read_lag;
pub mod sim;
mod state;
mod sweeper;
mod tls;
mod udp;
pub mod view;
mod wiring;
mod write;

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use clock::Clock;
pub use config::{ConfigError, ValidConfig};
pub use http::router;
pub use node::{Applied, Node, Propose, ProposeError};

/// The sockets a node serves on, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    /// The HTTP port.
    pub http: TcpListener,
    /// The gRPC port.
    pub grpc: TcpListener,
    /// The raft port, for a node with peers.
    pub raft: Option<TcpListener>,
}

impl Listeners {
    /// Binds the ports `config` names.
    pub async fn bind(config: &ValidConfig) -> std::io::Result<Self> {
        let http = TcpListener::bind(SocketAddr::new(config.bind, config.http_port)).await?;
        let grpc = TcpListener::bind(SocketAddr::new(config.bind, config.grpc_port)).await?;
        let raft = if config.cluster.peers.is_empty() {
            None
        } else {
            Some(TcpListener::bind(SocketAddr::new(config.bind, config.cluster.raft_port)).await?)
        };
        Ok(Self { http, grpc, raft })
    }
}

/// Serves one node until `shutdown` resolves, then stops accepting, lets
/// in-flight requests and queued writes finish within the configured grace
/// period, and stops the background tasks.
pub async fn run(
    config: ValidConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let faults = faults::LinkFaults::new(config.chaos.seed);
    let serving = serve(config, listeners, faults).await?;
    shutdown.await;
    serving.stop().await
}

/// A node being served: its HTTP, gRPC and (with peers) raft ports.
pub struct Serving {
    node: Node,
    grace: std::time::Duration,
    tasks: TaskTracker,
    cancel: CancellationToken,
    stop_grpc: CancellationToken,
    stop_http: CancellationToken,
    kill: CancellationToken,
    grpc: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    http_address: std::net::SocketAddr,
    grpc_address: std::net::SocketAddr,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// Starts serving one node on `listeners`, its raft transport obeying
/// `faults` (one shared model when several nodes run in one process).
pub async fn serve(
    config: ValidConfig,
    listeners: Listeners,
    faults: faults::LinkFaults,
) -> std::io::Result<Serving> {
    let grace = config.shutdown_grace;
    let tasks = TaskTracker::new();
    let cancel = CancellationToken::new();
    let node = match listeners.raft {
        None if config.cluster.peers.is_empty() => {
            Node::start(config, Clock::system(), &tasks, cancel.clone())
                .await
                .map_err(std::io::Error::other)?
        }
        None => {
            return Err(std::io::Error::other(
                "a node with peers needs its raft port bound",
            ))
        }
        Some(raft) => wiring::start_member(config, raft, faults, &tasks, cancel.clone()).await?,
    };
    let address = listeners.http.local_addr()?;
    node.serving_http_on(address);
    let grpc_address = listeners.grpc.local_addr()?;
    tracing::info!(http = %address, grpc = %grpc_address, node = node.config().node_id, dc = %node.config().dc, "serving the Nacos HTTP and gRPC APIs");

    let stop_grpc = cancel.child_token();
    let kill = CancellationToken::new();
    let grpc = tokio::spawn(grpc::serve(
        node.clone(),
        listeners.grpc,
        stop_grpc.clone(),
        kill.clone(),
        tasks.clone(),
    ));
    let stop_http = cancel.child_token();
    let stopped = stop_http.clone().cancelled_owned();
    let limits = admission::Connections::of("HTTP", node.config());
    let app = router(node.clone())
        .layer(axum::middleware::map_request(
            admission::peer_as_socket_addr,
        ))
        .into_make_service_with_connect_info::<admission::Peer>();
    let http = match &node.config().tls {
        None => {
            use axum::serve::ListenerExt as _;
            // Answers go out as soon as they are written, never held back
            // for a delayed ACK (Nagle).
            let listener = listeners.http.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let listener = admission::Limited::new(listener, limits);
            let server = axum::serve(listener, app).with_graceful_shutdown(stopped);
            tokio::spawn(async move { server.await })
        }
        Some(tls) => {
            let listener = tls::TlsListener::new(listeners.http, tls::http_config(tls)?)?;
            let listener = admission::Limited::new(listener, limits);
            let server = axum::serve(listener, app).with_graceful_shutdown(stopped);
            tokio::spawn(async move { server.await })
        }
    };
    Ok(Serving {
        node,
        grace,
        tasks,
        cancel,
        stop_grpc,
        stop_http,
        kill,
        grpc,
        http,
        http_address: address,
        grpc_address,
    })
}

impl Serving {
    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// What the binary prints once it serves: what listens where, how to
    /// point a Nacos client at it, and the settings that differ from the
    /// defaults (secrets as `(set)`).
    pub fn banner(&self) -> String {
        use std::fmt::Write as _;
        let config = self.node.config();
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let (http, grpc) = (self.http_address, self.grpc_address);
        // What a client on this host dials; a node bound to every address
        // is reached at any of them.
        let host = if http.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            match http.ip() {
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                ip => ip.to_string(),
            }
        };
        let storage = match &config.data_dir {
            Some(dir) => format!("durable in {}", dir.display()),
            None => "in memory".to_owned(),
        };
        let members = match config.cluster.peers.len() {
            0 => "a single node".to_owned(),
            n => format!("one of {} members", n + 1),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "understudy {} — node {} in dc {}, {members}, {storage}",
            env!("CARGO_PKG_VERSION"),
            config.node_id,
            config.dc
        );
        let _ = writeln!(
            out,
            "  Nacos HTTP  {scheme}://{http}/nacos  (v1, v2, v3 APIs; console at {scheme}://{host}:{}/)",
            http.port()
        );
        let _ = writeln!(
            out,
            "  Nacos gRPC  {grpc}  (Nacos 2.x and 3.x clients; understudy's native watch API)"
        );
        if !config.cluster.peers.is_empty() {
            let _ = writeln!(
                out,
                "  raft        {} (advertised as {}), members {}",
                std::net::SocketAddr::new(config.bind, config.cluster.raft_port),
                config.cluster.advertise,
                config
                    .cluster
                    .peers
                    .iter()
                    .map(|(id, m)| format!("{id}={}", m.raft_addr))
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
        let _ = writeln!(
            out,
            "  Nacos clients: serverAddr={host}:{} (Java `serverAddr`, nacos-sdk-python `SERVER_ADDRESSES`, Go `ServerConfig{{IpAddr, Port}}`)",
            http.port()
        );
        if grpc.port().checked_sub(http.port()) != Some(1000) {
            let _ = writeln!(
                out,
                "  the gRPC port is not the HTTP port + 1000, which Nacos 2.x clients assume: set the client's gRPC port offset to {} (Java `nacos.server.grpc.port.offset`)",
                i32::from(grpc.port()) - i32::from(http.port())
            );
        }
        let changed = config.changed_settings();
        if changed.is_empty() {
            let _ = writeln!(out, "  settings: all at their defaults");
        } else {
            let listed: Vec<String> = changed.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(
                out,
                "  settings not at their defaults: {}",
                listed.join(" ")
            );
        }
        out
    }

    /// Stops as a crash would look from outside: every port closes and
    /// every task stops at once, nothing is drained.
    pub async fn kill(self) {
        self.kill.cancel();
        self.cancel.cancel();
        self.grpc.abort();
        self.http.abort();
        self.tasks.close();
        let _ = tokio::time::timeout(self.grace, self.tasks.wait()).await;
    }

    /// Stops accepting, lets in-flight requests and queued writes finish
    /// within the grace period, and stops the background tasks.
    pub async fn stop(self) -> std::io::Result<()> {
        let Serving {
            node,
            grace,
            tasks,
            cancel,
            stop_grpc,
            stop_http,
            grpc,
            http,
            ..
        } = self;
        tracing::info!("shutting down");
        stop_grpc.cancel();
        stop_http.cancel();
        match tokio::time::timeout(grace, grpc).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::error!(error = %e, "gRPC server failed"),
            Ok(Err(join)) => tracing::error!(error = %join, "gRPC server task failed"),
            Err(_) => tracing::warn!(
                ?grace,
                "gRPC connections still open after the grace period; closing"
            ),
        }
        match tokio::time::timeout(grace, http).await {
            Ok(Ok(result)) => result?,
            Ok(Err(join)) => tracing::error!(error = %join, "HTTP server task failed"),
            Err(_) => tracing::warn!(
                ?grace,
                "requests still running after the grace period; closing"
            ),
        }
        // A leader hands over before its raft stops with everything else.
        node.hand_over(grace).await;
        // The writer drains its queues before it exits.
        cancel.cancel();
        tasks.close();
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            tracing::warn!(
                ?grace,
                "background tasks still running after the grace period"
            );
        }
        tracing::info!("stopped");
        Ok(())
    }
}
