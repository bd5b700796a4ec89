//! The applied state of a node: the registry, liveness, the push hubs,
//! the change stream watchers follow and the cluster's history id. Raft's
//! state machine (`raft/store.rs`) applies committed batches to it; the
//! node and its adapters read it.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use tokio::sync::Notify;
use understudy_core::{Change, Command, Liveness, Millis, Op, Registry};

use crate::config::ValidConfig;

/// How a node's history id starts until it learns its cluster's.
const PROVISIONAL: &str = "provisional-";

/// The applied state of a node: the registry, the liveness tracker fed by
/// it, and a wake-up for the sweeper when deadlines move.
#[derive(Debug)]
pub struct State {
    registry: RwLock<Registry>,
    liveness: Mutex<Liveness>,
    pub(crate) deadlines_moved: Notify,
    hub: crate::push::Hub<understudy_core::ServiceKey>,
    config_hub: crate::push::Hub<understudy_core::ConfigKey>,
    /// Fuzzy watches of services and of configs (Nacos 3).
    fuzzy_services: crate::fuzzy::Hub<understudy_core::ServiceKey>,
    fuzzy_configs: crate::fuzzy::Hub<understudy_core::ConfigKey>,
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
            fuzzy_services: crate::fuzzy::Hub::default(),
            fuzzy_configs: crate::fuzzy::Hub::default(),
            hosts: crate::hosts::HostsCache::default(),
            config_changes: tokio::sync::broadcast::channel(4096).0,
            changes: tokio::sync::broadcast::channel(config.grpc.watch_buffer).0,
            cluster_id: RwLock::new(Arc::from(format!(
                "{PROVISIONAL}{:x}-{:x}",
                crate::clock::restart_nonce(),
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

    /// The fuzzy watches of services.
    pub(crate) fn fuzzy_services(&self) -> &crate::fuzzy::Hub<understudy_core::ServiceKey> {
        &self.fuzzy_services
    }

    /// The fuzzy watches of configs.
    pub(crate) fn fuzzy_configs(&self) -> &crate::fuzzy::Hub<understudy_core::ConfigKey> {
        &self.fuzzy_configs
    }

    /// The hosts of service `key` in `view`, rendered as JSON (shared
    /// with every other reader of the same state).
    pub(crate) fn hosts(
        &self,
        key: &understudy_core::ServiceKey,
        view: understudy_proto::nacos::View<'_>,
    ) -> Arc<understudy_proto::nacos::Hosts> {
        self.hosts_at(key, view).0
    }

    /// The hosts of service `key` in `view`, and the registry revision of
    /// the service's last change they show (0 when there is no service).
    pub(crate) fn hosts_at(
        &self,
        key: &understudy_core::ServiceKey,
        view: understudy_proto::nacos::View<'_>,
    ) -> (Arc<understudy_proto::nacos::Hosts>, u64) {
        let service = self.registry().service(key);
        let revision = service.as_ref().map_or(0, |s| s.revision());
        (self.hosts.get(key, service.as_deref(), view), revision)
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
    /// Liveness starts afresh: the snapshot's beat instances are timed
    /// from `now`, as if each had just beaten. Every subscriber of a
    /// service in the old or the new registry is told, so pushes converge
    /// on the new state.
    pub fn restore(&self, snapshot: understudy_core::RegistrySnapshot, now: Millis) {
        let mut touched: Vec<understudy_core::ServiceKey> =
            snapshot.services.iter().map(|s| s.key().clone()).collect();
        let liveness = Liveness::restored(&snapshot, now);
        {
            let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
            let options = registry.options().clone();
            touched.extend(registry.snapshot().services.iter().map(|s| s.key().clone()));
            *registry = Registry::restore(snapshot, options);
        }
        *self.liveness() = liveness;
        self.deadlines_moved.notify_one();
        self.hub.changed(touched.iter());
        self.fuzzy_services.reread_all();
        self.fuzzy_configs.reread_all();
        // An empty batch tells native watchers the history they follow was
        // replaced: they start over from a fresh snapshot.
        let _ = self.changes.send(Arc::from(Vec::<Change>::new()));
    }

    /// Tells the fuzzy watches of services and configs that appeared or
    /// went (whether one did is decided when pushing).
    fn fuzzy_changed(&self, changes: &[Change]) {
        use understudy_core::Event;
        let services = changes.iter().filter_map(|c| match &c.event {
            Event::ServiceCreated { service, .. } | Event::ServiceRemoved { service } => {
                Some(service)
            }
            _ => None,
        });
        self.fuzzy_services.changed(services);
        let configs = changes.iter().filter_map(|c| match &c.event {
            Event::ConfigPublished { key, .. } | Event::ConfigRemoved { key } => Some(&**key),
            _ => None,
        });
        self.fuzzy_configs.changed(configs);
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
                self.fuzzy_changed(changes);
            }
        }
        results
    }
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
