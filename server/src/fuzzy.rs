//! Fuzzy watch (Nacos 3): a connection watches the set of services, or of
//! configs, whose names match a pattern (`ns>>group>>svc-*`), and is told
//! when a member appears or goes — not when one changes.
//!
//! Gap-free as every other watch here: a pattern is installed in the
//! hub before its first set is read, and every applied creation or
//! removal of a matching service or config marks it dirty. The pusher
//! compares each dirty key's existence now with what the client was last
//! told, so a change that also shows in the first read is told once, and
//! changes that arrive while earlier ones are unsent merge into what is
//! true when it sends. Nothing is told twice, nothing falls between.
//!
//! Limits are Nacos' defaults: 20 patterns per connection and kind, 500
//! matches told per pattern; keys past the limit are not told until
//! removals make room (then the pattern is read again to fill it).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use understudy_core::{ConfigKey, GroupKeyPattern, Registry, ServiceKey};
use understudy_proto::nacos3_rpc::{config_group_key, service_key};

/// The most patterns one connection watches, per kind.
pub(crate) const MAX_PATTERNS: usize = 20;
/// The most matches of one pattern a client is told of.
pub(crate) const MAX_MATCHES: usize = 500;
/// How many keys one sync message carries (Nacos' batch size).
pub(crate) const SYNC_BATCH: usize = 10;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What can be fuzzy-watched: a service or a config, by key.
pub(crate) trait Member: Ord + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Whether it is in the set `pattern` names.
    fn matches(&self, pattern: &GroupKeyPattern) -> bool;
    /// Its key as fuzzy-watch messages carry it.
    fn wire(&self) -> String;
    /// Whether it exists in `registry`.
    fn exists(&self, registry: &Registry) -> bool;
    /// Every existing member `pattern` matches, in key order.
    fn matching(registry: &Registry, pattern: &GroupKeyPattern) -> Vec<Self>;
}

impl Member for ServiceKey {
    fn matches(&self, pattern: &GroupKeyPattern) -> bool {
        pattern.matches_service(self)
    }

    fn wire(&self) -> String {
        service_key(
            self.namespace.as_str(),
            self.group.as_str(),
            self.name.as_str(),
        )
    }

    fn exists(&self, registry: &Registry) -> bool {
        registry.service(self).is_some()
    }

    fn matching(registry: &Registry, pattern: &GroupKeyPattern) -> Vec<Self> {
        registry.services_matching(pattern).cloned().collect()
    }
}

impl Member for ConfigKey {
    fn matches(&self, pattern: &GroupKeyPattern) -> bool {
        pattern.matches_config(self)
    }

    fn wire(&self) -> String {
        config_group_key(&self.data_id, &self.group, self.namespace.as_str())
    }

    fn exists(&self, registry: &Registry) -> bool {
        registry.config(self).is_some()
    }

    fn matching(registry: &Registry, pattern: &GroupKeyPattern) -> Vec<Self> {
        registry.configs_matching(pattern).cloned().collect()
    }
}

/// What the client is to be told of one pattern, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// One batch of a sync: keys added (`true`) or deleted (`false`).
    Sync {
        initial: bool,
        keys: Vec<(String, bool)>,
        batch: usize,
        batches: usize,
    },
    /// The first sync is complete.
    Finished,
    /// A key appeared (`true`) or went (`false`).
    Changed(String, bool),
}

/// One watched pattern of a connection.
#[derive(Debug)]
struct Watch<K> {
    pattern: GroupKeyPattern,
    /// The keys the client holds (as told, or as it said it holds).
    told: BTreeSet<K>,
    /// Keys whose existence may have changed since told.
    dirty: BTreeSet<K>,
    /// Read the pattern's set again: removals made room under the limit.
    refill: bool,
    /// Messages rendered at the watch request, sent before any change.
    outbox: VecDeque<Notice>,
}

/// A watch was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The connection watches [`MAX_PATTERNS`] patterns already.
    TooManyPatterns,
}

/// The fuzzy watches of one connection, of one kind.
#[derive(Debug)]
pub(crate) struct Watches<K> {
    id: u64,
    watches: Mutex<BTreeMap<String, Watch<K>>>,
    wake: Arc<Notify>,
}

impl<K: Member> Watches<K> {
    /// The watches of connection `id`, whose pusher waits on `wake`.
    pub(crate) fn new(id: u64, wake: Arc<Notify>) -> Self {
        Self {
            id,
            watches: Mutex::default(),
            wake,
        }
    }

    fn mark(&self, key: &K) {
        let mut marked = false;
        for watch in lock(&self.watches).values_mut() {
            if key.matches(&watch.pattern) {
                watch.dirty.insert(key.clone());
                marked = true;
            }
        }
        if marked {
            self.wake.notify_one();
        }
    }

    /// Whether anything is waiting to be sent.
    pub(crate) fn is_due(&self) -> bool {
        lock(&self.watches)
            .values()
            .any(|w| !w.outbox.is_empty() || !w.dirty.is_empty() || w.refill)
    }

    /// Renders what is due, per pattern: first the syncs queued at watch
    /// requests, then a change for every dirty key whose existence in
    /// `registry` differs from what the client holds.
    pub(crate) fn due(&self, registry: &Registry) -> Vec<(String, Notice)> {
        let mut due = Vec::new();
        for (raw, watch) in lock(&self.watches).iter_mut() {
            due.extend(watch.outbox.drain(..).map(|n| (raw.clone(), n)));
            let mut changed = Vec::new();
            for key in std::mem::take(&mut watch.dirty) {
                let exists = key.exists(registry);
                if exists == watch.told.contains(&key) {
                    continue;
                }
                if exists {
                    if watch.told.len() >= MAX_MATCHES {
                        continue;
                    }
                    watch.told.insert(key.clone());
                } else {
                    if watch.told.len() >= MAX_MATCHES {
                        watch.refill = true;
                    }
                    watch.told.remove(&key);
                }
                changed.push(Notice::Changed(key.wire(), exists));
            }
            if std::mem::take(&mut watch.refill) {
                for key in K::matching(registry, &watch.pattern) {
                    if watch.told.len() >= MAX_MATCHES {
                        break;
                    }
                    if watch.told.insert(key.clone()) {
                        changed.push(Notice::Changed(key.wire(), true));
                    }
                }
            }
            due.extend(changed.into_iter().map(|n| (raw.clone(), n)));
        }
        due
    }
}

/// Every connection's fuzzy watches of one kind.
#[derive(Debug)]
pub(crate) struct Hub<K> {
    connections: Mutex<HashMap<u64, Arc<Watches<K>>>>,
}

impl<K> Default for Hub<K> {
    fn default() -> Self {
        Self {
            connections: Mutex::default(),
        }
    }
}

/// The outcome of a watch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Watched {
    /// The pattern matched more than [`MAX_MATCHES`]: only that many were
    /// told.
    pub(crate) over_limit: bool,
}

impl<K: Member> Hub<K> {
    /// Marks the watches whose patterns match a changed key.
    pub(crate) fn changed<'a>(&self, keys: impl IntoIterator<Item = &'a K>) {
        let connections = lock(&self.connections);
        if connections.is_empty() {
            return;
        }
        for key in keys {
            for watches in connections.values() {
                watches.mark(key);
            }
        }
    }

    /// Every watch must look again (the registry was replaced by a
    /// snapshot): each re-reads its pattern's set.
    pub(crate) fn reread_all(&self) {
        for watches in lock(&self.connections).values() {
            for watch in lock(&watches.watches).values_mut() {
                watch.refill = true;
                watch.dirty.extend(watch.told.iter().cloned());
            }
            watches.wake.notify_one();
        }
    }

    /// Starts watching `pattern` for `watches` (or syncs it again), the
    /// client holding `received`: the watch is installed, then the set is
    /// read from `registry`, and its difference from `received` queued
    /// as a sync (the first one ending with [`Notice::Finished`]).
    pub(crate) fn watch(
        &self,
        watches: &Arc<Watches<K>>,
        pattern: GroupKeyPattern,
        received: &BTreeSet<String>,
        initial: bool,
        registry: impl FnOnce() -> Vec<K>,
    ) -> Result<Watched, Refused> {
        let raw = pattern.as_str().to_owned();
        {
            let mut held = lock(&watches.watches);
            if !held.contains_key(&raw) && held.len() >= MAX_PATTERNS {
                return Err(Refused::TooManyPatterns);
            }
            held.entry(raw.clone()).or_insert_with(|| Watch {
                pattern,
                told: BTreeSet::new(),
                dirty: BTreeSet::new(),
                refill: false,
                outbox: VecDeque::new(),
            });
        }
        lock(&self.connections).insert(watches.id, watches.clone());
        // Installed: from here every change of a matching key marks it.
        let all = registry();
        let over_limit = all.len() > MAX_MATCHES;
        let now: Vec<K> = all.into_iter().take(MAX_MATCHES).collect();
        let now_wire: BTreeSet<String> = now.iter().map(Member::wire).collect();
        let mut keys: Vec<(String, bool)> = now_wire
            .iter()
            .filter(|k| !received.contains(*k))
            .map(|k| (k.clone(), true))
            .collect();
        if !over_limit {
            // Over the limit the set read is not whole: nothing is said
            // gone that may only be past it.
            keys.extend(
                received
                    .iter()
                    .filter(|k| !now_wire.contains(*k))
                    .map(|k| (k.clone(), false)),
            );
        }
        let batches = keys.len().div_ceil(SYNC_BATCH);
        let mut held = lock(&watches.watches);
        let Some(watch) = held.get_mut(&raw) else {
            // Cancelled meanwhile.
            return Ok(Watched { over_limit });
        };
        watch.told = now.into_iter().collect();
        // Keys marked between the install and the read are checked again
        // against what is told now.
        for (i, chunk) in keys.chunks(SYNC_BATCH).enumerate() {
            watch.outbox.push_back(Notice::Sync {
                initial,
                keys: chunk.to_vec(),
                batch: i + 1,
                batches,
            });
        }
        if initial {
            watch.outbox.push_back(Notice::Finished);
        }
        drop(held);
        watches.wake.notify_one();
        Ok(Watched { over_limit })
    }

    /// Stops watching `pattern`.
    pub(crate) fn cancel(&self, watches: &Watches<K>, pattern: &str) {
        lock(&watches.watches).remove(pattern);
    }

    /// Removes every watch of a connection (it closed).
    pub(crate) fn remove(&self, id: u64) {
        lock(&self.connections).remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_core::{Command, InstanceSpec, Op, Owner, RegistryOptions};

    fn key(name: &str) -> ServiceKey {
        ServiceKey::parse("ns", "grp", name).unwrap()
    }

    fn register(registry: &mut Registry, name: &str, at: u64) {
        let spec = InstanceSpec::new("10.0.0.1", 80);
        registry
            .apply(&Command::new(
                at,
                Op::Register {
                    service: key(name),
                    owner: Owner::Persistent {
                        ip: "10.0.0.1".into(),
                        port: 80,
                    },
                    instances: vec![spec],
                },
            ))
            .unwrap();
    }

    fn watch(hub: &Hub<ServiceKey>, watches: &Arc<Watches<ServiceKey>>, registry: &Registry) {
        let pattern = GroupKeyPattern::parse("ns>>grp>>svc-*").unwrap();
        hub.watch(watches, pattern.clone(), &BTreeSet::new(), true, || {
            ServiceKey::matching(registry, &pattern)
        })
        .unwrap();
    }

    #[test]
    fn the_first_sync_lists_the_matches_in_batches_then_finishes() {
        let mut registry = Registry::new(RegistryOptions::default());
        for i in 0..12 {
            register(&mut registry, &format!("svc-{i:02}"), 1);
        }
        register(&mut registry, "other", 1);
        let hub = Hub::default();
        let watches = Arc::new(Watches::new(1, Arc::default()));
        watch(&hub, &watches, &registry);
        let due = watches.due(&registry);
        let batches: Vec<_> = due
            .iter()
            .filter_map(|(_, n)| match n {
                Notice::Sync {
                    keys,
                    batch,
                    batches,
                    ..
                } => Some((keys.len(), *batch, *batches)),
                _ => None,
            })
            .collect();
        assert_eq!(batches, vec![(10, 1, 2), (2, 2, 2)]);
        assert_eq!(due.last().map(|(_, n)| n), Some(&Notice::Finished));
        assert!(watches.due(&registry).is_empty(), "nothing more is due");
    }

    #[test]
    fn a_change_between_install_and_read_is_told_once() {
        let mut registry = Registry::new(RegistryOptions::default());
        let hub = Hub::default();
        let watches = Arc::new(Watches::new(1, Arc::default()));
        let pattern = GroupKeyPattern::parse("ns>>grp>>svc-*").unwrap();
        let mut raced = Some(());
        hub.watch(&watches, pattern.clone(), &BTreeSet::new(), true, || {
            // The service appears after the install, before the read: the
            // read sees it and the hub marks it.
            if raced.take().is_some() {
                register(&mut registry, "svc-a", 1);
                hub.changed([&key("svc-a")]);
            }
            ServiceKey::matching(&registry, &pattern)
        })
        .unwrap();
        let due = watches.due(&registry);
        let told: Vec<_> = due
            .iter()
            .flat_map(|(_, n)| match n {
                Notice::Sync { keys, .. } => keys.clone(),
                Notice::Changed(k, added) => vec![(k.clone(), *added)],
                Notice::Finished => vec![],
            })
            .collect();
        assert_eq!(told, vec![("ns@@grp@@svc-a".to_owned(), true)]);
    }

    #[test]
    fn patterns_over_the_limit_are_refused() {
        let registry = Registry::new(RegistryOptions::default());
        let hub = Hub::<ServiceKey>::default();
        let watches = Arc::new(Watches::new(1, Arc::default()));
        for i in 0..MAX_PATTERNS {
            let pattern = GroupKeyPattern::parse(&format!("ns>>grp>>p{i}*")).unwrap();
            hub.watch(&watches, pattern, &BTreeSet::new(), true, Vec::new)
                .unwrap();
        }
        let one_more = GroupKeyPattern::parse("ns>>grp>>q*").unwrap();
        assert_eq!(
            hub.watch(&watches, one_more, &BTreeSet::new(), true, Vec::new),
            Err(Refused::TooManyPatterns)
        );
        // Watching a held pattern again is a re-sync, not a new one.
        let again = GroupKeyPattern::parse("ns>>grp>>p0*").unwrap();
        assert!(hub
            .watch(&watches, again, &BTreeSet::new(), false, || {
                ServiceKey::matching(&registry, &GroupKeyPattern::parse("ns>>grp>>p0*").unwrap())
            })
            .is_ok());
    }
}
