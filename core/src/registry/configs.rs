//! The configs aggregate: publishing (with compare-and-set) and removing
//! config items, each change kept in the config's history.

use std::sync::Arc;

use crate::{
    ConfigItem, ConfigKey, ConfigSource, ConfigSpec, Error, Event, HistoryEntry, HistoryOp,
};

use super::{Registry, Tx};

impl Registry {
    pub(super) fn publish_config(
        &mut self,
        tx: &mut Tx,
        key: &ConfigKey,
        spec: &ConfigSpec,
        cas_md5: Option<&str>,
        source: &ConfigSource,
    ) -> Result<(), Error> {
        let mut item = ConfigItem::build(spec, tx.at, self.options.limits.max_config_bytes)?;
        let current = self.configs.get(key).cloned();
        if let (Some(expected), Some(current)) =
            (cas_md5.filter(|m| !m.trim().is_empty()), &current)
        {
            if !current.md5.is_empty() && current.md5 != expected {
                return Err(Error::CasMismatch {
                    data_id: key.data_id.clone(),
                    group: key.group.clone(),
                });
            }
        }
        let changed = current.as_ref().is_none_or(|c| c.md5 != item.md5);
        let item = match &current {
            Some(current) => {
                item.id = current.id;
                item.created = current.created;
                item.created_by = current.created_by.clone();
                let same = ConfigItem {
                    last_modified: current.last_modified,
                    ..item.clone()
                } == **current;
                let item = Arc::new(item);
                // A publish that changes nothing but the time is no event
                // in the config's history.
                if !same {
                    self.keep_history(tx, key, HistoryOp::Update, current.clone(), source);
                }
                item
            }
            None => {
                item.id = self.next_serial();
                item.created_by = source.clone();
                let item = Arc::new(item);
                self.keep_history(tx, key, HistoryOp::Insert, item.clone(), source);
                item
            }
        };
        let md5 = item.md5.clone();
        self.configs.insert(key.clone(), item);
        tx.events.push(Event::ConfigPublished {
            key: key.clone(),
            md5,
            changed,
        });
        Ok(())
    }

    pub(super) fn remove_config(&mut self, tx: &mut Tx, key: &ConfigKey, source: &ConfigSource) {
        if let Some(removed) = self.configs.remove(key) {
            self.keep_history(tx, key, HistoryOp::Delete, removed, source);
            tx.events.push(Event::ConfigRemoved { key: key.clone() });
        }
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn keep_history(
        &mut self,
        tx: &Tx,
        key: &ConfigKey,
        op: HistoryOp,
        item: Arc<ConfigItem>,
        source: &ConfigSource,
    ) {
        let entry = HistoryEntry {
            nid: self.next_serial(),
            key: key.clone(),
            op,
            item,
            at: tx.at,
            source: source.clone(),
            gray_name: String::new(),
        };
        self.history.record(entry, self.options.history, tx.at);
    }

    /// A config's history, newest first.
    pub fn config_history(&self, key: &ConfigKey) -> impl Iterator<Item = &Arc<HistoryEntry>> {
        self.history.of(key).rev()
    }

    /// One history entry by id.
    pub fn history_entry(&self, nid: u64) -> Option<&Arc<HistoryEntry>> {
        self.history.entry(nid)
    }

    /// The newest history entry of the config whose id is `config_id`
    /// (Nacos' "previous version" of a config).
    pub fn latest_history_of(&self, config_id: u64) -> Option<&Arc<HistoryEntry>> {
        self.history.newest_first().find(|e| e.item.id == config_id)
    }

    /// The config item whose id is `id`.
    pub fn config_by_id(&self, id: u64) -> Option<(&ConfigKey, &Arc<ConfigItem>)> {
        self.configs.iter().find(|(_, item)| item.id == id)
    }
}
