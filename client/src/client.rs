//! The client handle and its builder: the settings, and the directories,
//! views and provider session it starts (their shared state is in
//! `connection.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::{GroupName, NamespaceId, ServiceKey};

use crate::connection::{wall_ms, Credentials, EmptyProtection, Endpoint, Inner};
use crate::directory::Directory;
use crate::ClientError;

/// Builds a [`Client`].
#[derive(Debug, Clone, Default)]
pub struct ClientBuilder {
    endpoints: Vec<Endpoint>,
    local_dc: Option<String>,
    backoff_min: Option<Duration>,
    backoff_max: Option<Duration>,
    connect_timeout: Option<Duration>,
    keepalive: Option<Duration>,
    empty_protection: EmptyProtection,
    cache_dir: Option<std::path::PathBuf>,
    credentials: Option<Credentials>,
    tls_ca: Option<Arc<[u8]>>,
    probe_min: Option<Duration>,
    probe_max: Option<Duration>,
    seed: Option<u64>,
}

impl ClientBuilder {
    /// Adds a server's gRPC address (`host:port`), optionally labelled
    /// with its datacenter.
    pub fn endpoint(mut self, address: impl Into<String>, dc: Option<&str>) -> Self {
        let address = address.into();
        let uri = if address.starts_with("http://") || address.starts_with("https://") {
            address
        } else {
            format!("http://{address}")
        };
        self.endpoints.push(Endpoint {
            uri,
            dc: dc.map(str::to_owned),
            tls_ca: None,
        });
        self
    }

    /// The client's own datacenter: its endpoints are tried first, and a
    /// watch or session that had to fail over to another DC's endpoint
    /// comes back to one of them once it answers again (see
    /// [`home_probe`](Self::home_probe)).
    pub fn local_dc(mut self, dc: impl Into<String>) -> Self {
        self.local_dc = Some(dc.into());
        self
    }

    /// While following another DC's endpoint, how often the local DC's
    /// endpoints are probed: first after `min`, then doubling up to `max`
    /// while they do not answer (default 1 s to 10 s). Once one answers,
    /// watches resume there from their last revision and the session
    /// registers there before it leaves the other DC's node, so neither
    /// has a gap.
    pub fn home_probe(mut self, min: Duration, max: Duration) -> Self {
        self.probe_min = Some(min);
        self.probe_max = Some(max);
        self
    }

    /// Reconnect backoff: starts at `min`, doubles up to `max`, with jitter.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = Some(min);
        self.backoff_max = Some(max);
        self
    }

    /// Seeds the random draws of the backoff's jitter, so that a test can
    /// replay them; by default they are seeded from the OS.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// How long one connection attempt may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How often the provider session sends keepalives (default 2 s).
    pub fn keepalive(mut self, interval: Duration) -> Self {
        self.keepalive = Some(interval);
        self
    }

    /// Keeps a copy of every directory's last good list in `dir`, so a
    /// consumer can start with it while the registry is unreachable.
    pub fn cache_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Logs in as this user, for a server with auth on: the client
    /// exchanges the name and password for a token before its first call,
    /// sends it with every call, and logs in again when the token is past
    /// half its life or the server refuses it.
    pub fn credentials(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials {
            username: username.into(),
            password: password.into(),
        });
        self
    }

    /// The PEM certificate of the CA that signed the servers'
    /// certificates, for servers serving TLS (give their addresses as
    /// `https://host:port`).
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(Arc::from(pem.into()));
        self
    }

    /// The directories' empty-push policy.
    pub fn empty_protection(mut self, policy: EmptyProtection) -> Self {
        self.empty_protection = policy;
        self
    }

    /// Builds the client. Needs to run inside a tokio runtime when its
    /// directories are used; it creates none of its own.
    pub fn build(self) -> Result<Client, ClientError> {
        if self.endpoints.is_empty() {
            return Err(ClientError::Config {
                message: "at least one endpoint is required".into(),
            });
        }
        let min = self.backoff_min.unwrap_or(Duration::from_millis(100));
        let max = self.backoff_max.unwrap_or(Duration::from_secs(10));
        if min.is_zero() || max < min {
            return Err(ClientError::Config {
                message: "backoff needs 0 < min <= max".into(),
            });
        }
        let probe_min = self.probe_min.unwrap_or(Duration::from_secs(1));
        let probe_max = self.probe_max.unwrap_or(Duration::from_secs(10));
        if probe_min.is_zero() || probe_max < probe_min {
            return Err(ClientError::Config {
                message: "home_probe needs 0 < min <= max".into(),
            });
        }
        let mut endpoints = self.endpoints;
        for endpoint in &mut endpoints {
            endpoint.tls_ca = self.tls_ca.clone();
        }
        // Local DC first; the order is otherwise kept.
        if let Some(local) = &self.local_dc {
            endpoints.sort_by_key(|e| e.dc.as_deref() != Some(local.as_str()));
        }
        // With no local DC, or none of its endpoints given, every endpoint
        // is as good as any other: there is no home to come back to.
        let home = match &self.local_dc {
            Some(local) => endpoints
                .iter()
                .take_while(|e| e.dc.as_deref() == Some(local.as_str()))
                .count(),
            None => 0,
        };
        let inner = Arc::new(Inner {
            endpoints,
            home,
            probe_min,
            probe_max,
            started_ms: wall_ms(),
            backoff_min: min,
            backoff_max: max,
            jitter: std::sync::Mutex::new(match self.seed {
                Some(seed) => rand::SeedableRng::seed_from_u64(seed),
                None => rand::SeedableRng::from_rng(&mut rand::rng()),
            }),
            connect_timeout: self.connect_timeout.unwrap_or(Duration::from_secs(3)),
            empty_protection: self.empty_protection,
            keepalive: self.keepalive.unwrap_or(Duration::from_secs(2)),
            cache_dir: self.cache_dir,
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
            credentials: self.credentials,
            token: tokio::sync::Mutex::new(None),
        });
        Ok(Client {
            _stop: Arc::new(inner.cancel.clone().drop_guard()),
            inner,
            session: Arc::default(),
        })
    }
}

/// A handle on understudy. Cheap to clone; shutting it down (or dropping
/// the last handle) stops every background task.
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
    /// Cancels every task when the last handle goes, even while a task
    /// holds `inner` (an open watch does).
    _stop: Arc<tokio_util::sync::DropGuard>,
    /// The provider session, started on first use.
    session: Arc<std::sync::Mutex<Option<tokio::sync::mpsc::Sender<crate::session::Request>>>>,
}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The live instance list of `service`, kept current in the
    /// background. Must be called inside a tokio runtime.
    pub fn directory(&self, service: ServiceKey) -> Directory {
        let (directory, task) = Directory::start(self.inner.clone(), service);
        self.inner.tasks.spawn(task);
        directory
    }

    /// Every service of `namespace`, or of one `group` of it, with its
    /// instances, kept current in the background: services appear and go
    /// as they are created and deleted. Must be called inside a tokio
    /// runtime.
    pub fn view(&self, namespace: NamespaceId, group: Option<GroupName>) -> crate::View {
        let (view, task) = crate::View::start(self.inner.clone(), namespace, group);
        self.inner.tasks.spawn(task);
        view
    }

    fn session(&self) -> tokio::sync::mpsc::Sender<crate::session::Request> {
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        session
            .get_or_insert_with(|| {
                let (tx, rx) = tokio::sync::mpsc::channel(64);
                self.inner.tasks.spawn(crate::session::run(
                    Arc::downgrade(&self.inner),
                    self.inner.cancel.clone(),
                    rx,
                    self.inner.keepalive,
                ));
                tx
            })
            .clone()
    }

    /// Registers (or replaces) this client's instances of `service`. They
    /// live while the client does, and are registered again after any
    /// reconnect. Must be called inside a tokio runtime.
    pub async fn register(
        &self,
        service: ServiceKey,
        instances: Vec<crate::InstanceSpec>,
    ) -> Result<(), ClientError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.session()
            .send(crate::session::Request::Register(service, instances, reply))
            .await
            .map_err(|_| ClientError::Closed)?;
        answer.await.map_err(|_| ClientError::Unavailable {
            message: "the session was lost before the server answered; it is registered again on reconnect".into(),
        })?
    }

    /// Registers `instances` of `service` after `delay` (Dubbo's `delay`:
    /// a provider that serves at once but is announced only once it is
    /// ready); the wait ends early with [`ClientError::Closed`] when the
    /// client is shut down.
    pub async fn register_after(
        &self,
        delay: Duration,
        service: ServiceKey,
        instances: Vec<crate::InstanceSpec>,
    ) -> Result<(), ClientError> {
        tokio::select! {
            () = self.inner.cancel.cancelled() => return Err(ClientError::Closed),
            () = tokio::time::sleep(delay) => {}
        }
        self.register(service, instances).await
    }

    /// Removes this client's instances of `service`.
    pub async fn deregister(&self, service: ServiceKey) -> Result<(), ClientError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.session()
            .send(crate::session::Request::Deregister(service, reply))
            .await
            .map_err(|_| ClientError::Closed)?;
        answer.await.map_err(|_| ClientError::Unavailable {
            message: "the session was lost before the server answered".into(),
        })?
    }

    /// Stops every background task and waits for them.
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}
