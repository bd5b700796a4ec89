//! Import planning: a pure function from a document's items and a copy of
//! the registry to the commands that merge the items in. The plan is
//! applied to that copy as it is made, so an item any replica would refuse
//! is refused here, naming the item, before the first write; a write that
//! would change nothing is left out, so importing the same document twice
//! writes nothing the second time. The adapter reads the document and
//! turns its text into these typed items; writing the plan is the
//! server's.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use crate::{
    Command, ConfigItem, ConfigKey, ConfigSpec, Error, Instance, InstanceKey, InstanceSpec, Millis,
    NamespaceId, Op, Owner, Registry, ServiceKey, ServiceKind, ServiceMeta, ServiceMetaPatch,
};

/// What a document holds, typed, each item with its path in the document
/// (`services[2]`), in document order.
#[derive(Debug, Clone, Default)]
pub struct ImportItems {
    /// Explicitly created namespaces.
    pub namespaces: Vec<NamespaceImport>,
    /// Services and their persistent instances.
    pub services: Vec<ServiceImport>,
    /// Config items.
    pub configs: Vec<ConfigImport>,
}

/// A namespace of the document.
#[derive(Debug, Clone)]
pub struct NamespaceImport {
    /// Where it is in the document.
    pub path: String,
    /// Its id.
    pub id: NamespaceId,
    /// Its display name.
    pub name: String,
    /// Its description.
    pub description: String,
}

/// A service of the document.
#[derive(Debug, Clone)]
pub struct ServiceImport {
    /// Where it is in the document.
    pub path: String,
    /// Its key.
    pub key: ServiceKey,
    /// Its kind.
    pub kind: ServiceKind,
    /// What the service API set on it, if it was created through it.
    pub meta: Option<ServiceMeta>,
    /// Its persistent instances.
    pub instances: Vec<InstanceImport>,
}

/// A persistent instance of the document.
#[derive(Debug, Clone)]
pub struct InstanceImport {
    /// Where it is in the document.
    pub path: String,
    /// The instance.
    pub spec: InstanceSpec,
}

/// A config item of the document.
#[derive(Debug, Clone)]
pub struct ConfigImport {
    /// Where it is in the document.
    pub path: String,
    /// Its key.
    pub key: ConfigKey,
    /// What it stores.
    pub spec: ConfigSpec,
}

/// One write of the plan, and the document item it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The item's path in the document (`services[2].meta`).
    pub path: String,
    /// The write.
    pub op: Op,
}

/// Why a document cannot be imported, naming the item.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ImportError {
    /// The registry's rules refuse the item.
    #[error("{path}: {error}")]
    Refused {
        /// The item.
        path: String,
        /// The rule it breaks.
        error: Error,
    },
    /// The item is given twice.
    #[error("the same item as {first}")]
    Duplicate {
        /// The second item.
        path: String,
        /// The first.
        first: String,
    },
    /// A service of one kind here is of the other in the document.
    #[error("{path}: service {key} is {here} here; the document has it {document}")]
    KindConflict {
        /// The service's item.
        path: String,
        /// The service.
        key: ServiceKey,
        /// Its kind here.
        here: ServiceKind,
        /// Its kind in the document.
        document: ServiceKind,
    },
    /// An ephemeral service lists instances.
    #[error("an ephemeral service's instances are not imported: their owners register them again")]
    EphemeralInstances {
        /// The service's `instances`.
        path: String,
    },
}

impl ImportError {
    /// The path of the item at fault.
    pub fn path(&self) -> &str {
        match self {
            ImportError::Refused { path, .. }
            | ImportError::Duplicate { path, .. }
            | ImportError::KindConflict { path, .. }
            | ImportError::EphemeralInstances { path } => path,
        }
    }
}

/// The writes that merge `items` into `scratch`, a copy of the registry
/// (consumed: the plan is applied to it), at time `now`: namespaces, then
/// services (metadata, then instances, as a provider would), then configs.
pub fn plan_import(
    scratch: Registry,
    now: Millis,
    items: &ImportItems,
) -> Result<Vec<Step>, ImportError> {
    let mut planner = Planner {
        scratch,
        now,
        steps: Vec::new(),
    };
    planner.namespaces(&items.namespaces)?;
    planner.services(&items.services)?;
    planner.configs(&items.configs)?;
    Ok(planner.steps)
}

struct Planner {
    scratch: Registry,
    now: Millis,
    steps: Vec<Step>,
}

fn refused(path: &str, error: Error) -> ImportError {
    ImportError::Refused {
        path: path.to_owned(),
        error,
    }
}

/// Remembers `key` at `path`; an error if it was seen before.
fn first_time<K: Ord>(
    seen: &mut BTreeMap<K, String>,
    key: K,
    path: &str,
) -> Result<(), ImportError> {
    match seen.get(&key) {
        Some(first) => Err(ImportError::Duplicate {
            path: path.to_owned(),
            first: first.clone(),
        }),
        None => {
            seen.insert(key, path.to_owned());
            Ok(())
        }
    }
}

impl Planner {
    /// Applies `op` to the scratch copy; keeps it if it changed anything.
    fn step(&mut self, path: &str, op: Op) -> Result<(), ImportError> {
        let changes = self
            .scratch
            .apply(&Command::new(self.now, op.clone()))
            .map_err(|e| refused(path, e))?;
        if !changes.is_empty() {
            self.steps.push(Step {
                path: path.to_owned(),
                op,
            });
        }
        Ok(())
    }

    fn namespaces(&mut self, entries: &[NamespaceImport]) -> Result<(), ImportError> {
        let mut seen = BTreeMap::new();
        for ns in entries {
            first_time(&mut seen, ns.id.clone(), &ns.path)?;
            let explicit = self
                .scratch
                .namespaces()
                .iter()
                .any(|n| n.id == ns.id && n.explicit);
            let (namespace, name, description) =
                (ns.id.clone(), ns.name.clone(), ns.description.clone());
            let op = if explicit {
                Op::UpdateNamespace {
                    namespace,
                    name,
                    description,
                }
            } else {
                Op::CreateNamespace {
                    namespace,
                    name,
                    description,
                }
            };
            self.step(&ns.path, op)?;
        }
        Ok(())
    }

    /// Each service's metadata in turn, then (once every service is
    /// checked) their instances.
    fn services(&mut self, entries: &[ServiceImport]) -> Result<(), ImportError> {
        let mut seen = BTreeMap::new();
        for service in entries {
            let path = &service.path;
            first_time(&mut seen, service.key.clone(), path)?;
            if let Some(existing) = self.scratch.service(&service.key) {
                if existing.kind() != service.kind {
                    return Err(ImportError::KindConflict {
                        path: path.clone(),
                        key: service.key.clone(),
                        here: existing.kind(),
                        document: service.kind,
                    });
                }
            }
            if service.kind.is_ephemeral() && !service.instances.is_empty() {
                return Err(ImportError::EphemeralInstances {
                    path: format!("{path}.instances"),
                });
            }
            if let Some(meta) = &service.meta {
                let op = if self.scratch.service(&service.key).is_some() {
                    Op::UpdateService {
                        service: service.key.clone(),
                        patch: ServiceMetaPatch {
                            protect_threshold: Some(meta.protect_threshold),
                            metadata: Some(meta.metadata.clone()),
                            selector: Some(meta.selector.clone()),
                        },
                    }
                } else {
                    Op::CreateService {
                        service: service.key.clone(),
                        kind: service.kind,
                        meta: meta.clone(),
                    }
                };
                self.step(&format!("{path}.meta"), op)?;
            }
            let mut keys = BTreeMap::new();
            for instance in &service.instances {
                first_time(&mut keys, instance.spec.key(), &instance.path)?;
                self.check_alone(&service.key, instance)?;
            }
        }
        for service in entries {
            self.registrations(service)?;
        }
        Ok(())
    }

    /// Checks one instance with the registry's rules, by registering it
    /// alone into an empty registry under the same options, so that an
    /// error names the instance rather than its owner's batch.
    fn check_alone(
        &self,
        service: &ServiceKey,
        instance: &InstanceImport,
    ) -> Result<(), ImportError> {
        let spec = &instance.spec;
        let mut probe = Registry::new(self.scratch.options().clone());
        probe
            .apply(&Command::new(
                0,
                Op::Register {
                    service: service.clone(),
                    owner: Owner::Persistent {
                        ip: spec.ip.as_str().into(),
                        port: spec.port,
                    },
                    instances: vec![spec.clone()],
                },
            ))
            .map(drop)
            .map_err(|e| refused(&instance.path, e))
    }

    /// Registers a service's instances, one registration per owner (a
    /// persistent instance's owner is its `ip:port`). An owner's instances
    /// already here and not in the document are registered with it, since
    /// a registration replaces the owner's whole entry and an import only
    /// adds.
    fn registrations(&mut self, service: &ServiceImport) -> Result<(), ImportError> {
        let mut by_owner: BTreeMap<(String, u16), Vec<InstanceSpec>> = BTreeMap::new();
        for instance in &service.instances {
            let spec = &instance.spec;
            by_owner
                .entry((spec.ip.clone(), spec.port))
                .or_default()
                .push(spec.clone());
        }
        for ((ip, port), mut instances) in by_owner {
            let owner = Owner::Persistent {
                ip: ip.into(),
                port,
            };
            let listed: BTreeSet<InstanceKey> = instances.iter().map(InstanceSpec::key).collect();
            if let Some(here) = self.scratch.service(&service.key) {
                instances.extend(
                    here.instances()
                        .filter(|i| i.owner == owner && !listed.contains(&i.key()))
                        .map(spec_of),
                );
            }
            let op = Op::Register {
                service: service.key.clone(),
                owner,
                instances,
            };
            // Each instance was checked on its own already: an error here
            // concerns the batch (its size, the service's kind).
            self.step(&service.path, op)?;
        }
        Ok(())
    }

    fn configs(&mut self, entries: &[ConfigImport]) -> Result<(), ImportError> {
        let mut seen = BTreeMap::new();
        for config in entries {
            first_time(&mut seen, config.key.clone(), &config.path)?;
            let before = self.scratch.config(&config.key);
            let op = Op::PublishConfig {
                key: config.key.clone(),
                spec: config.spec.clone(),
                cas_md5: None,
            };
            self.step(&config.path, op)?;
            // A publish always stamps a new time, so compare what it stores.
            let after = self.scratch.config(&config.key);
            if let (Some(before), Some(after)) = (before, after) {
                let unchanged = ConfigItem {
                    last_modified: before.last_modified,
                    ..ConfigItem::clone(&after)
                } == *before;
                if unchanged {
                    self.steps.pop();
                }
            }
        }
        Ok(())
    }
}

/// The spec that registers `instance` again as it is.
fn spec_of(instance: &Instance) -> InstanceSpec {
    InstanceSpec {
        instance_id: instance.given_instance_id().map(str::to_owned),
        ip: instance.ip.to_string(),
        port: instance.port,
        weight: instance.weight,
        healthy: instance.healthy,
        enabled: instance.enabled,
        cluster: instance.cluster.clone(),
        metadata: instance.metadata.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterName, Metadata, RegistryOptions};

    fn instance(path: &str, ip: &str) -> InstanceImport {
        InstanceImport {
            path: path.to_owned(),
            spec: InstanceSpec {
                instance_id: None,
                ip: ip.to_owned(),
                port: 8080,
                weight: 1.0,
                healthy: true,
                enabled: true,
                cluster: ClusterName::parse("").unwrap(),
                metadata: Metadata::new(),
            },
        }
    }

    fn items() -> ImportItems {
        ImportItems {
            namespaces: vec![NamespaceImport {
                path: "namespaces[0]".into(),
                id: NamespaceId::parse("team-a").unwrap(),
                name: "Team A".into(),
                description: String::new(),
            }],
            services: vec![ServiceImport {
                path: "services[0]".into(),
                key: ServiceKey::parse("team-a", "", "orders").unwrap(),
                kind: ServiceKind::Persistent,
                meta: None,
                instances: vec![
                    instance("services[0].instances[0]", "10.0.0.1"),
                    instance("services[0].instances[1]", "10.0.0.2"),
                ],
            }],
            configs: vec![ConfigImport {
                path: "configs[0]".into(),
                key: ConfigKey::parse("team-a", "DEFAULT_GROUP", "app.yaml").unwrap(),
                spec: ConfigSpec {
                    content: "a: 1".into(),
                    kind: String::new(),
                    app_name: String::new(),
                    desc: String::new(),
                    tags: String::new(),
                    encrypted_data_key: String::new(),
                },
            }],
        }
    }

    /// The plan, applied, holds every item; planned again on the result
    /// it is empty (an import of the same document writes nothing).
    #[test]
    fn a_plan_applied_leaves_nothing_to_plan() {
        let mut registry = Registry::new(RegistryOptions::default());
        let steps = plan_import(registry.clone(), 1, &items()).unwrap();
        let paths: Vec<&str> = steps.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            paths,
            ["namespaces[0]", "services[0]", "services[0]", "configs[0]"],
            "one namespace, one registration per owner, one config"
        );
        for step in &steps {
            registry.apply(&Command::new(2, step.op.clone())).unwrap();
        }
        let key = ServiceKey::parse("team-a", "", "orders").unwrap();
        assert_eq!(registry.service(&key).unwrap().instances().count(), 2);
        assert_eq!(plan_import(registry, 3, &items()).unwrap(), Vec::new());
    }

    /// Errors name the item: a second copy of one, a service of the other
    /// kind here, an ephemeral service's instances, an instance the rules
    /// refuse.
    #[test]
    fn errors_name_the_item() {
        let registry = Registry::new(RegistryOptions::default());
        let mut twice = items();
        twice.services[0].instances[1].spec.ip = "10.0.0.1".into();
        assert_eq!(
            plan_import(registry.clone(), 1, &twice).unwrap_err(),
            ImportError::Duplicate {
                path: "services[0].instances[1]".into(),
                first: "services[0].instances[0]".into(),
            }
        );
        let mut ephemeral = items();
        ephemeral.services[0].kind = ServiceKind::Ephemeral;
        assert_eq!(
            plan_import(registry.clone(), 1, &ephemeral)
                .unwrap_err()
                .path(),
            "services[0].instances"
        );
        let mut bad = items();
        bad.services[0].instances[1].spec.weight = -1.0;
        assert_eq!(
            plan_import(registry.clone(), 1, &bad).unwrap_err().path(),
            "services[0].instances[1]"
        );
        let mut here = registry;
        for step in plan_import(here.clone(), 1, &items()).unwrap() {
            here.apply(&Command::new(2, step.op)).unwrap();
        }
        assert!(matches!(
            plan_import(here, 3, &ephemeral).unwrap_err(),
            ImportError::KindConflict {
                here: ServiceKind::Persistent,
                ..
            }
        ));
    }
}
