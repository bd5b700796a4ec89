//! Config history: every publish and removal of a config, kept per config
//! and bounded by [`HistoryRetention`]. Entries are pruned as commands
//! apply, by the command's own timestamp, so every replica keeps the same.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::{ConfigKey, HistoryEntry, HistoryRetention, Millis};

/// The kept entries: per config, oldest first, and by id.
#[derive(Debug, Clone, Default)]
pub(super) struct History {
    by_key: BTreeMap<ConfigKey, VecDeque<Arc<HistoryEntry>>>,
    /// Which config each entry belongs to, by entry id (oldest first).
    keys: BTreeMap<u64, ConfigKey>,
}

impl History {
    /// Keeps `entry`, then drops what `retention` no longer allows at
    /// `now`.
    pub(super) fn record(&mut self, entry: HistoryEntry, retention: HistoryRetention, now: Millis) {
        let entries = self.by_key.entry(entry.key.clone()).or_default();
        self.keys.insert(entry.nid, entry.key.clone());
        entries.push_back(Arc::new(entry));
        while entries.len() > retention.max_per_config {
            if let Some(dropped) = entries.pop_front() {
                self.keys.remove(&dropped.nid);
            }
        }
        self.prune(retention, now);
    }

    /// Drops every entry older than `retention` allows at `now`. Entry
    /// ids grow with time, so the oldest entries come first.
    pub(super) fn prune(&mut self, retention: HistoryRetention, now: Millis) {
        let cutoff = now.saturating_sub(retention.max_age);
        while let Some((&nid, key)) = self.keys.first_key_value() {
            let Some(entries) = self.by_key.get_mut(key) else {
                self.keys.remove(&nid);
                continue;
            };
            match entries.front() {
                Some(oldest) if oldest.nid == nid && oldest.at < cutoff => {
                    entries.pop_front();
                    if entries.is_empty() {
                        let key = key.clone();
                        self.by_key.remove(&key);
                    }
                    self.keys.remove(&nid);
                }
                _ => break,
            }
        }
    }

    /// A config's entries, oldest first.
    pub(super) fn of(
        &self,
        key: &ConfigKey,
    ) -> impl DoubleEndedIterator<Item = &Arc<HistoryEntry>> {
        self.by_key.get(key).into_iter().flatten()
    }

    /// One entry by id.
    pub(super) fn entry(&self, nid: u64) -> Option<&Arc<HistoryEntry>> {
        let key = self.keys.get(&nid)?;
        self.of(key).find(|e| e.nid == nid)
    }

    /// Every entry, oldest first.
    pub(super) fn entries(&self) -> impl Iterator<Item = &Arc<HistoryEntry>> {
        self.keys.iter().filter_map(|(nid, key)| {
            self.by_key
                .get(key)
                .and_then(|entries| entries.iter().find(|e| e.nid == *nid))
        })
    }

    /// Every entry, newest first.
    pub(super) fn newest_first(&self) -> impl Iterator<Item = &Arc<HistoryEntry>> {
        self.keys.iter().rev().filter_map(|(nid, key)| {
            self.by_key
                .get(key)
                .and_then(|entries| entries.iter().rev().find(|e| e.nid == *nid))
        })
    }
}

impl FromIterator<Arc<HistoryEntry>> for History {
    fn from_iter<I: IntoIterator<Item = Arc<HistoryEntry>>>(entries: I) -> Self {
        let mut history = History::default();
        for entry in entries {
            history.keys.insert(entry.nid, entry.key.clone());
            history
                .by_key
                .entry(entry.key.clone())
                .or_default()
                .push_back(entry);
        }
        history
    }
}
