//! The configs aggregate: publishing (with compare-and-set) and removing
//! config items.

use std::sync::Arc;

use crate::{ConfigItem, ConfigKey, ConfigSpec, Error, Event};

use super::{Registry, Tx};

impl Registry {
    pub(super) fn publish_config(
        &mut self,
        tx: &mut Tx,
        key: &ConfigKey,
        spec: &ConfigSpec,
        cas_md5: Option<&str>,
    ) -> Result<(), Error> {
        let item = ConfigItem::build(spec, tx.at, self.options.limits.max_config_bytes)?;
        let current = self.configs.get(key);
        if let (Some(expected), Some(current)) = (cas_md5.filter(|m| !m.trim().is_empty()), current)
        {
            if !current.md5.is_empty() && current.md5 != expected {
                return Err(Error::CasMismatch {
                    data_id: key.data_id.clone(),
                    group: key.group.clone(),
                });
            }
        }
        let changed = current.is_none_or(|c| c.md5 != item.md5);
        let md5 = item.md5.clone();
        self.configs.insert(key.clone(), Arc::new(item));
        tx.events.push(Event::ConfigPublished {
            key: key.clone(),
            md5,
            changed,
        });
        Ok(())
    }

    pub(super) fn remove_config(&mut self, tx: &mut Tx, key: &ConfigKey) {
        if self.configs.remove(key).is_some() {
            tx.events.push(Event::ConfigRemoved { key: key.clone() });
        }
    }
}
