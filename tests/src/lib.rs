//! understudy-tests: the test harness shared by the end-to-end tests.
//!
//! Component map:
//! - [`App`]: a node on tokio's paused clock with its router called
//!   in-memory (`oneshot`), for adapter tests that drive time-based rules
//!   without real waits;
//! - [`Server`]: a node served by [`understudy_server::run`] on ephemeral
//!   loopback ports, on real time, for socket-level tests;
//! - [`eventually`]: waiting on a condition with a deadline, never a fixed
//!   sleep;
//! - [`nacos_grpc`]: a raw Nacos gRPC client for wire-level tests and the
//!   load generator.
//!
//! Later: port-0 clusters, the fault-injecting network, real Nacos clients.

pub mod cluster;
pub mod nacos_grpc;
pub mod sockets;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use understudy_server::config::Settings;
use understudy_server::{router, Clock, Listeners, Node, ValidConfig};

/// The epoch time the injected clock of an [`App`] starts at.
pub const T0: u64 = 1_700_000_000_000;

/// A node and its router, called in-memory. Use under
/// `#[tokio::test(start_paused = true)]`: time moves only while the test
/// waits, so 30 s of liveness rules take no real time.
pub struct App {
    /// The node.
    pub node: Node,
    router: Router,
    cancel: CancellationToken,
    _tasks: TaskTracker,
}

impl Drop for App {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The body as JSON; panics with the body if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// Asserts a 200 and returns itself.
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.status, StatusCode::OK, "body: {}", self.body);
        self
    }
}

impl App {
    /// A node with default settings.
    pub async fn new() -> Self {
        Self::with(Settings::default()).await
    }

    /// A node with these settings.
    pub async fn with(settings: Settings) -> Self {
        let config = ValidConfig::from_settings(settings).expect("valid test settings");
        let tasks = TaskTracker::new();
        let cancel = CancellationToken::new();
        let node = Node::start(config, Clock::starting_at(T0), &tasks, cancel.clone())
            .await
            .expect("a single node starts");
        Self {
            router: router(node.clone()),
            node,
            cancel,
            _tasks: tasks,
        }
    }

    /// Sends a request; `form` becomes a form-urlencoded body.
    pub async fn send(&self, method: Method, uri: &str, form: Option<&str>) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        let body = match form {
            Some(form) => {
                request = request.header("content-type", "application/x-www-form-urlencoded");
                Body::from(form.to_owned())
            }
            None => Body::empty(),
        };
        self.raw(request.body(body).expect("a valid request")).await
    }

    /// Sends a prepared request.
    pub async fn raw(&self, request: Request<Body>) -> Reply {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("a readable body")
            .to_bytes();
        Reply {
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// `GET`.
    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None).await
    }

    /// `POST` with everything in the query string.
    pub async fn post(&self, uri: &str) -> Reply {
        self.send(Method::POST, uri, None).await
    }

    /// `PUT` with everything in the query string.
    pub async fn put(&self, uri: &str) -> Reply {
        self.send(Method::PUT, uri, None).await
    }

    /// `DELETE` with everything in the query string.
    pub async fn delete(&self, uri: &str) -> Reply {
        self.send(Method::DELETE, uri, None).await
    }

    /// The hosts `/nacos/v1/ns/instance/list?{query}` answers.
    pub async fn hosts(&self, query: &str) -> Vec<Value> {
        let reply = self
            .get(&format!("/nacos/v1/ns/instance/list?{query}"))
            .await;
        reply.ok();
        reply.json()["hosts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Milliseconds since [`T0`] on the node's clock.
    pub fn elapsed(&self) -> u64 {
        self.node.now() - T0
    }

    /// Lets the paused clock run until `ms` after [`T0`].
    pub async fn advance_to(&self, ms: u64) {
        let now = self.elapsed();
        assert!(ms >= now, "cannot go back from {now} to {ms}");
        tokio::time::sleep(Duration::from_millis(ms - now)).await;
    }
}

/// Polls `check` every 10 ms until it holds or `within` has passed, and
/// says whether it held. Works on real and on paused time.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Percent-encodes everything but unreserved characters, as a client
/// encodes a form value.
pub fn url_encode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A node served on an ephemeral loopback port, on real time.
pub struct Server {
    /// Its HTTP address.
    pub http: SocketAddr,
    /// Its gRPC address.
    pub grpc: SocketAddr,
    /// Its raft address, for a node with peers.
    pub raft: Option<SocketAddr>,
    /// `https` when it serves TLS, else `http`.
    pub scheme: &'static str,
    stop: CancellationToken,
    handle: Option<JoinHandle<std::io::Result<()>>>,
}

impl Server {
    /// Starts a node with these settings; the ports are chosen by the OS.
    pub async fn start(settings: Settings) -> anyhow::Result<Self> {
        let settings = Settings {
            http_port: Some(0),
            grpc_port: Some(0),
            ..settings
        };
        let config = ValidConfig::from_settings(settings)?;
        let listeners = Listeners::bind(&config).await?;
        Self::serve(config, listeners).await
    }

    /// Starts a node on the ports `settings` names (0 for any).
    pub async fn start_on(settings: Settings) -> anyhow::Result<Self> {
        let config = ValidConfig::from_settings(Settings {
            http_port: settings.http_port.or(Some(0)),
            grpc_port: settings.grpc_port.or(Some(0)),
            ..settings
        })?;
        let listeners = Listeners::bind(&config).await?;
        Self::serve(config, listeners).await
    }

    /// Starts a node on a free port pair (P, P + 1000), for Nacos clients
    /// that derive the gRPC port from the HTTP port.
    pub async fn start_nacos(settings: Settings) -> anyhow::Result<Self> {
        for _ in 0..50 {
            let http = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let port = http.local_addr()?.port();
            let Some(grpc_port) = port.checked_add(1000) else {
                continue;
            };
            let Ok(grpc) = tokio::net::TcpListener::bind(("127.0.0.1", grpc_port)).await else {
                continue;
            };
            let config = ValidConfig::from_settings(Settings {
                http_port: Some(port),
                grpc_port: Some(grpc_port),
                ..settings.clone()
            })?;
            return Self::serve(
                config,
                Listeners {
                    http,
                    grpc,
                    raft: None,
                },
            )
            .await;
        }
        anyhow::bail!("no free port pair (P, P + 1000) found")
    }

    /// Starts `n` replicated nodes on ports chosen now (ids 1..=n, node 1
    /// forms the cluster) and waits until they agree on a leader.
    pub async fn start_cluster(n: u64, settings: Settings) -> anyhow::Result<Vec<Self>> {
        // The raft ports are bound now and handed over as they are, so no
        // other test can take one between choosing and serving it.
        let mut raft_listeners = Vec::new();
        let mut raft_ports = Vec::new();
        for _ in 0..n {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            raft_ports.push(listener.local_addr()?.port());
            raft_listeners.push(Some(listener));
        }
        let mut servers = Vec::new();
        for id in 1..=n {
            let peers = (1..=n)
                .filter(|p| *p != id)
                .map(|p| format!("{p}=127.0.0.1:{}", raft_ports[(p - 1) as usize]))
                .collect();
            let config = ValidConfig::from_settings(Settings {
                node_id: Some(id),
                http_port: Some(0),
                grpc_port: Some(0),
                raft_port: Some(raft_ports[(id - 1) as usize]),
                peers: Some(peers),
                ..settings.clone()
            })?;
            let listeners = Listeners {
                http: tokio::net::TcpListener::bind("127.0.0.1:0").await?,
                grpc: tokio::net::TcpListener::bind("127.0.0.1:0").await?,
                raft: raft_listeners[(id - 1) as usize].take(),
            };
            servers.push(Self::serve(config, listeners).await?);
        }
        // With TLS, the nodes' certificates are signed by the configured CA.
        let mut client = reqwest::Client::builder();
        if let Some(ca) = &settings.tls_ca {
            client =
                client.add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?);
        }
        let client = client.build()?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let mut leaders = std::collections::BTreeSet::new();
            for s in &servers {
                let mut ask = client.get(s.url("/understudy/v1/cluster"));
                if let Some(secret) = &settings.cluster_secret {
                    ask = ask.header("x-understudy-secret", secret);
                }
                let leader = match ask.send().await {
                    Ok(reply) => reply
                        .json::<Value>()
                        .await
                        .ok()
                        .and_then(|v| v["leader"].as_u64()),
                    Err(_) => None,
                };
                leaders.insert(leader);
            }
            if leaders.len() == 1 && leaders.iter().all(Option::is_some) {
                return Ok(servers);
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the cluster agreed on no leader: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn serve(config: ValidConfig, listeners: Listeners) -> anyhow::Result<Self> {
        let http = listeners.http.local_addr()?;
        let grpc = listeners.grpc.local_addr()?;
        let raft = match &listeners.raft {
            Some(raft) => Some(raft.local_addr()?),
            None => None,
        };
        let stop = CancellationToken::new();
        let shutdown = stop.clone().cancelled_owned();
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let handle = tokio::spawn(understudy_server::run(config, listeners, shutdown));
        Ok(Self {
            http,
            grpc,
            raft,
            scheme,
            stop,
            handle: Some(handle),
        })
    }

    /// `http://ADDR{path}` (`https` with TLS).
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.http)
    }

    /// `GET /nacos/v1/ns/instance/list?{query}` over plain HTTP, as JSON.
    pub async fn instance_list(&self, query: &str) -> Value {
        reqwest::get(self.url(&format!("/nacos/v1/ns/instance/list?{query}")))
            .await
            .expect("the server answers")
            .json()
            .await
            .expect("a ServiceInfo")
    }

    /// Shuts down gracefully and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        if let Some(handle) = self.handle.take() {
            handle.await??;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
