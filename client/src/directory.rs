//! A directory: the live instance list of one service. One background
//! task writes it from a native watch (resuming from its last revision
//! after any reconnect); readers get cheap `Arc` snapshots. An update that
//! would empty the list is held back unless its cause is an explicit
//! deregistration (configurable), and holding back is counted and logged.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use understudy_core::ServiceKey;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{self, change, watch_event, ResumeToken, WatchEvent, WatchRequest};

use crate::client::{connect, Endpoint, Inner, Reconnect};
use crate::{ClientError, EmptyProtection};

/// An instance as a directory shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Instance {
    /// Instance id.
    pub instance_id: String,
    /// Ip or host name.
    pub ip: String,
    /// Port.
    pub port: u16,
    /// Weight.
    pub weight: f64,
    /// Health.
    pub healthy: bool,
    /// Whether it takes traffic.
    pub enabled: bool,
    /// Cluster.
    pub cluster: String,
    /// Zone.
    pub zone: String,
    /// Metadata.
    pub metadata: BTreeMap<String, String>,
}

impl From<native::Instance> for Instance {
    fn from(i: native::Instance) -> Self {
        Self {
            instance_id: i.instance_id,
            ip: i.ip,
            port: u16::try_from(i.port).unwrap_or(0),
            weight: i.weight,
            healthy: i.healthy,
            enabled: i.enabled,
            cluster: i.cluster,
            zone: i.zone,
            metadata: i.metadata.into_iter().collect(),
        }
    }
}

type Key = (String, u16, String);

fn key_of(i: &Instance) -> Key {
    (i.ip.clone(), i.port, i.cluster.clone())
}

#[derive(Debug)]
struct Shared {
    service: ServiceKey,
    /// Where the last good list is kept on disk, if anywhere.
    cache: Option<std::path::PathBuf>,
    list: watch::Sender<Arc<[Instance]>>,
    ready: watch::Sender<bool>,
    held_back: AtomicU64,
    revision: AtomicU64,
}

/// The live instance list of one service.
#[derive(Debug, Clone)]
pub struct Directory {
    shared: Arc<Shared>,
}

impl Directory {
    pub(crate) fn start(
        inner: Arc<Inner>,
        service: ServiceKey,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let cache = inner
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(cache_file_name(&service)));
        // A cached list lets the consumer start while the registry is down.
        let cached: Option<Vec<Instance>> = cache
            .as_ref()
            .and_then(|path| std::fs::read(path).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let ready = cached.is_some();
        let shared = Arc::new(Shared {
            service,
            cache,
            list: watch::channel(Arc::from(cached.unwrap_or_default())).0,
            ready: watch::channel(ready).0,
            held_back: AtomicU64::new(0),
            revision: AtomicU64::new(0),
        });
        let task = run(Arc::downgrade(&inner), inner.cancel.clone(), shared.clone());
        (Self { shared }, task)
    }

    /// The service.
    pub fn service(&self) -> &ServiceKey {
        &self.shared.service
    }

    /// The current instances, sorted by ip, port and cluster.
    pub fn instances(&self) -> Arc<[Instance]> {
        self.shared.list.borrow().clone()
    }

    /// Follows the list: each change is a new snapshot.
    pub fn changes(&self) -> watch::Receiver<Arc<[Instance]>> {
        self.shared.list.subscribe()
    }

    /// Waits until the directory has received its first view.
    pub async fn wait_until_ready(&self) -> Result<(), ClientError> {
        let mut ready = self.shared.ready.subscribe();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| ClientError::Closed)
    }

    /// How many updates were held back by empty-push protection.
    pub fn held_back(&self) -> u64 {
        self.shared.held_back.load(Ordering::Relaxed)
    }

    /// The revision of the last event applied.
    pub fn revision(&self) -> u64 {
        self.shared.revision.load(Ordering::Relaxed)
    }
}

/// The cache file of a service: its key, with anything but letters,
/// digits, '.', '-' and '_' percent-encoded.
fn cache_file_name(service: &ServiceKey) -> String {
    let raw = format!("{}@{}@{}", service.namespace, service.group, service.name);
    let mut name: String = raw
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    name.push_str(".json");
    name
}

/// Writes the list next to its cache file, then moves it in place, so a
/// reader never sees half a file.
async fn save(path: std::path::PathBuf, list: Arc<[Instance]>) {
    let Ok(json) = serde_json::to_vec(&*list) else {
        return;
    };
    let temporary = path.with_extension("json.tmp");
    let written = async {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        tokio::fs::write(&temporary, json).await?;
        tokio::fs::rename(&temporary, &path).await
    };
    if let Err(e) = written.await {
        tracing::warn!(path = %path.display(), error = %e, "directory cache not written");
    }
}

/// The watch state of one directory, across reconnects.
struct Follower {
    shared: Arc<Shared>,
    protection: EmptyProtection,
    token: Option<ResumeToken>,
    state: BTreeMap<Key, Instance>,
    reset: Option<BTreeMap<Key, Instance>>,
}

impl Follower {
    /// Applies an event; returns the list if one was published.
    fn apply(&mut self, event: WatchEvent) -> Option<Arc<[Instance]>> {
        if event.token.is_some() {
            self.token = event.token;
        }
        let cause = match event.event {
            Some(watch_event::Event::Reset(reset)) => {
                let pending = self.reset.get_or_insert_with(BTreeMap::new);
                for state in reset.services {
                    for instance in state.instances {
                        let instance = Instance::from(instance);
                        pending.insert(key_of(&instance), instance);
                    }
                }
                if !reset.last {
                    return None;
                }
                self.state = self.reset.take().unwrap_or_default();
                None
            }
            Some(watch_event::Event::Change(c)) => match c.kind {
                Some(change::Kind::Upsert(instance)) => {
                    let instance = Instance::from(instance);
                    self.state.insert(key_of(&instance), instance);
                    None
                }
                Some(change::Kind::Removed(removed)) => {
                    let cause = removed.cause();
                    if let Some(instance) = removed.instance {
                        self.state.remove(&key_of(&Instance::from(instance)));
                    }
                    Some(cause)
                }
                Some(change::Kind::DoesNotExist(_)) => {
                    self.state.clear();
                    Some(native::RemovalCause::Deregistered)
                }
                Some(change::Kind::Created(_)) | None => return None,
            },
            None => return None,
        };
        if let Some(token) = &self.token {
            self.shared
                .revision
                .store(token.revision, Ordering::Relaxed);
        }
        self.publish(cause)
    }

    fn publish(&self, cause: Option<native::RemovalCause>) -> Option<Arc<[Instance]>> {
        let list: Arc<[Instance]> = self.state.values().cloned().collect();
        let current_empty = self.shared.list.borrow().is_empty();
        let protect = self.protection == EmptyProtection::UnlessDeregistered
            && list.is_empty()
            && !current_empty
            && cause != Some(native::RemovalCause::Deregistered);
        let published = if protect {
            self.shared.held_back.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(service = %self.shared.service, ?cause, "update that would empty the directory held back");
            None
        } else {
            self.shared.list.send_replace(list.clone());
            Some(list)
        };
        self.shared.ready.send_replace(true);
        published
    }
}

async fn watch_once(
    inner: &Inner,
    endpoint: &Endpoint,
    follower: &mut Follower,
    reconnect: &mut Reconnect,
) -> Result<(), String> {
    let channel = connect(endpoint, inner.connect_timeout).await?;
    let service = &follower.shared.service;
    let request = WatchRequest {
        namespace: service.namespace.to_string(),
        group: service.group.to_string(),
        service: service.name.to_string(),
        resume: follower.token.clone(),
    };
    let request = inner.request(&channel, request).await?;
    let mut stream = match RegistryClient::new(channel).watch(request).await {
        Ok(stream) => stream.into_inner(),
        Err(status) => return Err(inner.refused(status).await),
    };
    follower.reset = None;
    while let Some(event) = stream.message().await.map_err(|s| s.message().to_owned())? {
        reconnect.succeeded();
        if let (Some(list), Some(path)) = (follower.apply(event), follower.shared.cache.clone()) {
            save(path, list).await;
        }
    }
    Err("the watch ended".to_owned())
}

async fn run(inner: Weak<Inner>, cancel: CancellationToken, shared: Arc<Shared>) {
    let protection = match inner.upgrade() {
        Some(inner) => inner.empty_protection,
        None => return,
    };
    let mut follower = Follower {
        shared,
        protection,
        token: None,
        state: BTreeMap::new(),
        reset: None,
    };
    let mut reconnect = Reconnect::default();
    loop {
        let Some(client) = inner.upgrade() else {
            return;
        };
        let endpoint = reconnect.endpoint(&client);
        let outcome = tokio::select! {
            () = cancel.cancelled() => return,
            outcome = watch_once(&client, &endpoint, &mut follower, &mut reconnect) => outcome,
        };
        if let Err(reason) = outcome {
            tracing::debug!(endpoint = %endpoint.uri, %reason, "watch interrupted; reconnecting");
        }
        let delay = reconnect.failed(&client);
        drop(client);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}
