//! The instances of one service: a vector of shared instances sorted by
//! their key (ip, port, cluster), read off each instance rather than
//! stored beside it. A map would keep a second copy of every key and a
//! node with room for eleven entries per few instances; a service holds a
//! handful of instances as a rule, and a registry hundreds of thousands.
//! Serialized as the map it replaces (key → instance), so snapshots and
//! their format do not change.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Instance, InstanceKey};

/// A service's instances, sorted by key.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Instances(Vec<Arc<Instance>>);

/// How an instance sorts against `key`.
fn order(instance: &Instance, key: &InstanceKey) -> Ordering {
    sort_key(instance).cmp(&(key.ip.as_str(), key.port, &key.cluster))
}

fn sort_key(instance: &Instance) -> (&str, u16, &crate::ClusterName) {
    (&*instance.ip, instance.port, &instance.cluster)
}

impl Instances {
    fn find(&self, key: &InstanceKey) -> Result<usize, usize> {
        self.0.binary_search_by(|i| order(i, key))
    }

    /// The instance at `key`.
    pub(crate) fn get(&self, key: &InstanceKey) -> Option<&Arc<Instance>> {
        self.find(key).ok().map(|at| &self.0[at])
    }

    /// The instance at `key`, to replace.
    pub(crate) fn get_mut(&mut self, key: &InstanceKey) -> Option<&mut Arc<Instance>> {
        self.find(key).ok().map(|at| &mut self.0[at])
    }

    /// Whether there is an instance at `key`.
    pub(crate) fn contains_key(&self, key: &InstanceKey) -> bool {
        self.find(key).is_ok()
    }

    /// Puts `instance` at its key, replacing the one there.
    pub(crate) fn insert(&mut self, instance: Arc<Instance>) {
        match self
            .0
            .binary_search_by(|i| sort_key(i).cmp(&sort_key(&instance)))
        {
            Ok(at) => self.0[at] = instance,
            Err(at) => {
                // One more slot, not double: a service's instances arrive
                // one registration at a time, and a vector grown by
                // doubling would hold up to twice the pointers it needs
                // (the allocator keeps a grown block in place while it
                // fits its size class).
                self.0.reserve_exact(1);
                self.0.insert(at, instance);
            }
        }
    }

    /// Takes the instance at `key` out.
    pub(crate) fn remove(&mut self, key: &InstanceKey) -> Option<Arc<Instance>> {
        let at = self.find(key).ok()?;
        let instance = self.0.remove(at);
        if self.0.len() * 2 < self.0.capacity() {
            self.0.shrink_to_fit();
        }
        Some(instance)
    }

    /// How many.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every instance, by key.
    pub(crate) fn values(&self) -> std::slice::Iter<'_, Arc<Instance>> {
        self.0.iter()
    }

    /// Every instance, by key, to replace (keeping its key).
    pub(crate) fn values_mut(&mut self) -> std::slice::IterMut<'_, Arc<Instance>> {
        self.0.iter_mut()
    }

    /// Trims the vector to its length (after a batch of inserts).
    pub(crate) fn fit(&mut self) {
        self.0.shrink_to_fit();
    }
}

impl Serialize for Instances {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for instance in &self.0 {
            map.serialize_entry(&instance.key(), instance)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Instances {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Instances;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of instance keys to instances")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Instances, A::Error> {
                let mut instances = Instances(Vec::with_capacity(
                    access.size_hint().unwrap_or(0).min(4096),
                ));
                while let Some((_, instance)) = access.next_entry::<InstanceKey, Arc<Instance>>()? {
                    instances.insert(instance);
                }
                instances.fit();
                Ok(instances)
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::Rules;
    use crate::{HealthTimeouts, InstanceSpec, Limits, Owner, ServiceKey};

    #[test]
    fn instances_that_arrive_one_at_a_time_leave_no_spare_room() {
        let service = ServiceKey::parse("", "", "orders").unwrap();
        let limits = Limits::default();
        let rules = Rules {
            limits: &limits,
            health: HealthTimeouts::default(),
            zone_key: "zone",
        };
        let mut instances = Instances::default();
        // In reverse, so every one goes in at the front.
        for port in (8080..8090).rev() {
            let owner = Owner::Persistent {
                ip: "10.0.0.1".into(),
                port,
            };
            let spec = InstanceSpec::new("10.0.0.1", port);
            let instance = Instance::build(&service, spec, owner, rules).unwrap();
            instances.insert(Arc::new(instance));
        }
        assert_eq!(instances.len(), 10);
        assert_eq!(instances.0.capacity(), 10);
        let ports: Vec<u16> = instances.values().map(|i| i.port).collect();
        assert_eq!(ports, (8080..8090).collect::<Vec<_>>());
    }
}
