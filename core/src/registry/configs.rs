//! The configs aggregate: publishing (with compare-and-set) and removing
//! config items, each change kept in the config's history.

use std::sync::Arc;

use crate::{
    ConfigItem, ConfigKey, ConfigSource, ConfigSpec, Error, Event, GrayRelease, GrayRule,
    HistoryEntry, HistoryOp,
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
                    self.keep_history(tx, key, HistoryOp::Update, current.clone(), source, "");
                }
                item
            }
            None => {
                item.id = self.next_serial();
                item.created_by = source.clone();
                let item = Arc::new(item);
                self.keep_history(tx, key, HistoryOp::Insert, item.clone(), source, "");
                item
            }
        };
        self.configs.insert(key.clone(), item);
        tx.events.push(Event::ConfigPublished {
            key: Box::new(key.clone()),
            changed,
        });
        Ok(())
    }

    /// Checks every expectation and every item first, then writes them
    /// all: a refusal writes nothing.
    pub(super) fn write_configs(
        &mut self,
        tx: &mut Tx,
        expect: &[(ConfigKey, Option<String>)],
        publish: &[(ConfigKey, ConfigSpec)],
        remove: &[ConfigKey],
    ) -> Result<(), Error> {
        for (key, md5) in expect {
            let current = self.configs.get(key).map(|item| item.md5.as_str());
            if current != md5.as_deref() {
                return Err(Error::CasMismatch {
                    data_id: key.data_id.clone(),
                    group: key.group.clone(),
                });
            }
        }
        for (_, spec) in publish {
            ConfigItem::build(spec, tx.at, self.options.limits.max_config_bytes)?;
        }
        let source = ConfigSource::default();
        for (key, spec) in publish {
            self.publish_config(tx, key, spec, None, &source)?;
        }
        for key in remove {
            self.remove_config(tx, key, &source);
        }
        Ok(())
    }

    pub(super) fn remove_config(&mut self, tx: &mut Tx, key: &ConfigKey, source: &ConfigSource) {
        if let Some(removed) = self.configs.remove(key) {
            self.keep_history(tx, key, HistoryOp::Delete, removed, source, "");
            tx.events.push(Event::ConfigRemoved {
                key: Box::new(key.clone()),
            });
        }
    }

    /// The most gray releases one config may have, as Nacos.
    const MAX_GRAYS: usize = 10;

    pub(super) fn publish_gray(
        &mut self,
        tx: &mut Tx,
        key: &ConfigKey,
        rule: &GrayRule,
        spec: &ConfigSpec,
        source: &ConfigSource,
    ) -> Result<(), Error> {
        if let GrayRule::Beta { ips } = rule {
            if ips.iter().all(|ip| ip.trim().is_empty()) {
                return Err(Error::invalid("betaIps", "names no address"));
            }
        }
        let mut item = ConfigItem::build(spec, tx.at, self.options.limits.max_config_bytes)?;
        let name = rule.name();
        let grays = self.grays.get(key).map(Vec::as_slice).unwrap_or_default();
        let current = grays.iter().find(|g| g.rule.name() == name).cloned();
        if current.is_none() && grays.len() >= Self::MAX_GRAYS {
            return Err(Error::invalid(
                "tag",
                format!(
                    "{key} already has {} gray releases, the most allowed",
                    Self::MAX_GRAYS
                ),
            ));
        }
        match &current {
            Some(current) => {
                item.id = current.item.id;
                item.created = current.item.created;
                item.created_by = current.item.created_by.clone();
                self.keep_history(
                    tx,
                    key,
                    HistoryOp::Update,
                    current.item.clone(),
                    source,
                    &name,
                );
            }
            None => {
                item.id = self.next_serial();
                item.created_by = source.clone();
            }
        }
        let release = Arc::new(GrayRelease {
            rule: rule.clone(),
            item: Arc::new(item),
        });
        if current.is_none() {
            self.keep_history(
                tx,
                key,
                HistoryOp::Insert,
                release.item.clone(),
                source,
                &name,
            );
        }
        let grays = self.grays.entry(key.clone()).or_default();
        grays.retain(|g| g.rule.name() != name);
        grays.push(release);
        self.gray_changed(tx, key);
        Ok(())
    }

    pub(super) fn remove_gray(
        &mut self,
        tx: &mut Tx,
        key: &ConfigKey,
        name: &str,
        source: &ConfigSource,
    ) {
        let Some(grays) = self.grays.get_mut(key) else {
            return;
        };
        let Some(at) = grays.iter().position(|g| g.rule.name() == name) else {
            return;
        };
        let removed = grays.remove(at);
        if grays.is_empty() {
            self.grays.remove(key);
        }
        self.keep_history(
            tx,
            key,
            HistoryOp::Delete,
            removed.item.clone(),
            source,
            name,
        );
        self.gray_changed(tx, key);
    }

    /// Tells the config's listeners something changed for some of them:
    /// each asks again and gets what is now meant for it.
    fn gray_changed(&self, tx: &mut Tx, key: &ConfigKey) {
        tx.events.push(Event::ConfigPublished {
            key: Box::new(key.clone()),
            changed: true,
        });
    }

    /// The name of the gray release a removal with `tag` means: the
    /// release named `tag` (Nacos' reading: `beta` is the beta release),
    /// else the one for that tag (`tag_<tag>`).
    pub fn gray_named(&self, key: &ConfigKey, tag: &str) -> Option<String> {
        let names: Vec<String> = self.grays(key).iter().map(|g| g.rule.name()).collect();
        let tagged = format!("tag_{tag}");
        names
            .iter()
            .find(|n| *n == tag)
            .or_else(|| names.iter().find(|n| **n == tagged))
            .cloned()
    }

    /// A config's gray releases.
    pub fn grays(&self, key: &ConfigKey) -> &[Arc<GrayRelease>] {
        self.grays.get(key).map(Vec::as_slice).unwrap_or_default()
    }

    /// What a client at `ip` carrying `tag` gets of a config: a gray
    /// release meant for it, else the formal content.
    pub fn config_for(
        &self,
        key: &ConfigKey,
        ip: &str,
        tag: Option<&str>,
    ) -> Option<(Arc<ConfigItem>, Option<&Arc<GrayRelease>>)> {
        match crate::gray_for(self.grays(key), ip, tag) {
            Some(gray) => Some((gray.item.clone(), Some(gray))),
            None => self.config(key).map(|item| (item, None)),
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
        gray_name: &str,
    ) {
        let entry = HistoryEntry {
            nid: self.next_serial(),
            key: key.clone(),
            op,
            item,
            at: tx.at,
            source: source.clone(),
            gray_name: gray_name.to_owned(),
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
