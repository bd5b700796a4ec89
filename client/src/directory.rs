//! A directory: the live instance list of one service. One background
//! task writes it from a native watch (resuming from its last revision
//! after any reconnect); readers get cheap `Arc` snapshots. An update that
//! would empty the list is held back unless its cause is an explicit
//! deregistration (configurable), and holding back is counted and logged.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use tokio::sync::watch;
use understudy_core::ServiceKey;
use understudy_proto::native::{self, change, watch_event, WatchRequest};

use crate::connection::EmptyProtection;
use crate::connection::Inner;
use crate::watch::{Follow, Job, ServedBy};
use crate::ClientError;

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
    /// Whether the server says the service exists: [`UNKNOWN`], [`EXISTS`]
    /// or [`MISSING`].
    existence: AtomicU8,
    served: watch::Sender<Option<ServedBy>>,
}

const UNKNOWN: u8 = 0;
const EXISTS: u8 = 1;
const MISSING: u8 = 2;

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
            existence: AtomicU8::new(UNKNOWN),
            served: watch::channel(None).0,
        });
        let follower = Follower {
            shared: shared.clone(),
            protection: inner.empty_protection,
            state: BTreeMap::new(),
            reset: None,
        };
        let task = crate::watch::run(Arc::downgrade(&inner), inner.cancel.clone(), follower);
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

    /// Which node the directory follows now, its DC and how far it lags,
    /// as the node last said (every second); `None` while reconnecting.
    pub fn served_by(&self) -> Option<ServedBy> {
        self.shared.served.borrow().clone()
    }

    /// Follows [`served_by`](Self::served_by).
    pub fn served_by_changes(&self) -> watch::Receiver<Option<ServedBy>> {
        self.shared.served.subscribe()
    }

    /// Whether the service exists, as the server last said: `None` before
    /// its first answer. A service that does not exist is not one whose
    /// list is empty: a consumer asking for the wrong namespace or group
    /// sees `Some(false)`.
    pub fn exists(&self) -> Option<bool> {
        match self.shared.existence.load(Ordering::Relaxed) {
            EXISTS => Some(true),
            MISSING => Some(false),
            _ => None,
        }
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
    state: BTreeMap<Key, Instance>,
    reset: Option<BTreeMap<Key, Instance>>,
}

impl Follow for Follower {
    fn request(&self) -> WatchRequest {
        let service = &self.shared.service;
        WatchRequest {
            namespace: service.namespace.to_string(),
            group: service.group.to_string(),
            service: service.name.to_string(),
            ..WatchRequest::default()
        }
    }

    fn restart(&mut self) {
        self.reset = None;
    }

    fn apply(&mut self, event: watch_event::Event) -> Option<Job> {
        let list = self.apply_event(event)?;
        let path = self.shared.cache.clone()?;
        Some(Box::pin(save(path, list)))
    }

    fn complete(&self) -> bool {
        self.reset.is_none()
    }

    fn reached(&mut self, revision: u64) {
        self.shared.revision.store(revision, Ordering::Relaxed);
    }

    fn served(&self) -> &watch::Sender<Option<ServedBy>> {
        &self.shared.served
    }
}

impl Follower {
    /// Applies an event; returns the list if one was published.
    fn apply_event(&mut self, event: watch_event::Event) -> Option<Arc<[Instance]>> {
        let cause = match event {
            watch_event::Event::Reset(reset) => {
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
                self.exists(reset.exists);
                None
            }
            watch_event::Event::Change(c) => match c.kind {
                Some(change::Kind::Upsert(instance)) => {
                    let instance = Instance::from(instance);
                    self.state.insert(key_of(&instance), instance);
                    self.exists(true);
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
                    self.exists(false);
                    Some(native::RemovalCause::Deregistered)
                }
                Some(change::Kind::Created(_)) => {
                    self.exists(true);
                    return None;
                }
                None => return None,
            },
            watch_event::Event::Progress(_) => return None,
        };
        self.publish(cause)
    }

    fn exists(&self, exists: bool) {
        let value = if exists { EXISTS } else { MISSING };
        self.shared.existence.store(value, Ordering::Relaxed);
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
