//! The naming aggregate: services, their instances and the owners that
//! hold them (sessions, connections, beats, lost nodes).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::instance::Rules;
use crate::{
    Error, Event, HealthSource, Instance, InstanceKey, InstancePatch, InstanceSpec, Owner,
    RemovalCause, Service, ServiceKey, ServiceKind, ServiceMeta, ServiceMetaPatch, UpdateMode,
};

use super::{Registry, Tx};

impl Registry {
    pub(super) fn register(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        owner: &Owner,
        specs: &[InstanceSpec],
    ) -> Result<(), Error> {
        let limit = self.options.limits.max_instances_per_registration;
        if specs.len() > limit {
            return Err(Error::invalid(
                "instances",
                format!(
                    "{} instances in one registration, more than {limit}",
                    specs.len()
                ),
            ));
        }
        // The stored key when the service exists: the clones below (the
        // owner index, events, the change log) then share its names.
        let stored_key = self.service_ref(key).map(|s| s.key.clone());
        let key = stored_key.as_ref().unwrap_or(key);
        // Likewise the owner as the index holds it: its instances share
        // one copy of its id.
        let stored_owner = self.owners.get_key_value(owner).map(|(o, _)| o.clone());
        let owner = stored_owner.as_ref().unwrap_or(owner);
        let requested = owner.kind();
        let existing = self.service_ref(key).map(|s| s.kind);
        if let Some(kind) = existing {
            if kind != requested {
                return Err(Error::KindMismatch {
                    service: key.grouped_name(),
                    existing: kind,
                    requested,
                });
            }
        }
        // Validate everything before the first mutation.
        let mut built: BTreeMap<InstanceKey, Instance> = BTreeMap::new();
        for spec in specs {
            let instance = Instance::build(
                key,
                spec.clone(),
                owner.clone(),
                Rules {
                    limits: &self.options.limits,
                    health: self.options.health,
                    zone_key: &self.options.zone_key,
                },
            )?;
            built.insert(instance.key(), instance);
        }

        let gone: Vec<InstanceKey> = self
            .held(owner, key)
            .filter(|k| !built.contains_key(k))
            .collect();

        if existing.is_none() {
            if built.is_empty() {
                // An empty batch for a service that does not exist: nothing to do.
                return Ok(());
            }
            self.check_room_for_service(key)?;
        }
        self.check_room_for_instances(key, &built, &gone)?;
        if existing.is_none() {
            self.insert_service(Service::new(key.clone(), requested, None, tx.at));
            tx.events.push(Event::ServiceCreated {
                service: key.clone(),
                kind: requested,
                meta: None,
            });
        }

        let service = self
            .service_mut(key)
            .expect("service exists or was just created");
        let mut moved_from: Vec<Owner> = Vec::new();
        let mut stored: Vec<InstanceKey> = Vec::with_capacity(built.len());
        for (ikey, mut instance) in built {
            if let Some(overlay) = service.overlays.get(&ikey) {
                overlay.apply_to(&mut instance);
            }
            let instance = match service.instances.get(&ikey) {
                Some(current) if **current == instance => continue,
                Some(current) => {
                    if current.owner != *owner {
                        moved_from.push(current.owner.clone());
                    }
                    let instance = Arc::new(instance);
                    tx.events.push(Event::InstanceChanged {
                        service: key.clone(),
                        instance: instance.clone(),
                    });
                    instance
                }
                None => {
                    let instance = Arc::new(instance);
                    tx.events.push(Event::InstanceAdded {
                        service: key.clone(),
                        instance: instance.clone(),
                    });
                    instance
                }
            };
            service.instances.insert(instance);
            service.empty_since = None;
            stored.push(ikey);
        }
        if !stored.is_empty() {
            self.owners
                .entry(owner.clone())
                .or_default()
                .insert(key.clone());
        }
        // An instance registered again by a new owner moves in place:
        // subscribers see a change, never a removal and re-add.
        for old_owner in moved_from {
            self.unindex(&old_owner, key);
        }
        // Removals come after the additions, so a replacement never shows
        // the service as empty in between.
        for ikey in gone {
            self.remove_instance(tx, key, &ikey, RemovalCause::Replaced);
        }
        Ok(())
    }

    /// Refuses a new service in a namespace that holds the most allowed.
    pub(super) fn check_room_for_service(&self, key: &ServiceKey) -> Result<(), Error> {
        let max = self.options.limits.max_services_per_namespace;
        let count = self
            .namespaces
            .get(&key.namespace)
            .map_or(0, |ns| ns.services.len());
        if count >= max {
            return Err(Error::OverLimit {
                setting: "max_services_per_namespace",
                max,
                what: format!(
                    "namespace '{}' has {count} services, so {} cannot be created",
                    key.namespace,
                    key.grouped_name()
                ),
            });
        }
        Ok(())
    }

    /// Refuses a registration that would leave a service with more
    /// instances than allowed (counting the owner's instances it replaces).
    pub(super) fn check_room_for_instances(
        &self,
        key: &ServiceKey,
        built: &BTreeMap<InstanceKey, Instance>,
        gone: &[InstanceKey],
    ) -> Result<(), Error> {
        let max = self.options.limits.max_instances_per_service;
        let (current, added) = match self.service_ref(key) {
            Some(service) => (
                service.instances.len(),
                built
                    .keys()
                    .filter(|k| !service.instances.contains_key(k))
                    .count(),
            ),
            None => (0, built.len()),
        };
        let after = (current + added).saturating_sub(gone.len());
        if added > 0 && after > max {
            return Err(Error::OverLimit {
                setting: "max_instances_per_service",
                max,
                what: format!(
                    "service {} would have {after} instances",
                    key.grouped_name()
                ),
            });
        }
        Ok(())
    }

    /// The instances of service `key` that `owner` published, read off
    /// the service (the owner index only says which services to look in).
    fn owned<'a>(
        &'a self,
        owner: &'a Owner,
        key: &ServiceKey,
    ) -> impl Iterator<Item = &'a Instance> {
        self.service_ref(key)
            .into_iter()
            .flat_map(|service| service.instances.values())
            .filter(move |instance| instance.owner == *owner)
            .map(|instance| &**instance)
    }

    /// The keys of the instances `owner` holds in service `key`.
    pub(super) fn held<'a>(
        &'a self,
        owner: &'a Owner,
        key: &ServiceKey,
    ) -> impl Iterator<Item = InstanceKey> + 'a {
        let indexed = self
            .owners
            .get(owner)
            .is_some_and(|services| services.contains(key));
        indexed
            .then(|| self.owned(owner, key))
            .into_iter()
            .flatten()
            .map(Instance::key)
    }

    /// Drops service `service` from `owner`'s index entry once the owner
    /// holds no instance there.
    pub(super) fn unindex(&mut self, owner: &Owner, service: &ServiceKey) {
        if self.held(owner, service).next().is_some() {
            return;
        }
        if let Some(services) = self.owners.get_mut(owner) {
            services.remove(service);
            if services.is_empty() {
                self.owners.remove(owner);
            }
        }
    }

    /// Removes one instance, keeping the owner index and the service's
    /// empty-since time right.
    pub(super) fn remove_instance(
        &mut self,
        tx: &mut Tx,
        service_key: &ServiceKey,
        key: &InstanceKey,
        cause: RemovalCause,
    ) {
        let at = tx.at;
        let Some(service) = self.service_mut(service_key) else {
            return;
        };
        let Some(instance) = service.instances.remove(key) else {
            return;
        };
        if service.instances.is_empty() {
            service.empty_since = Some(at);
        }
        self.unindex(&instance.owner, service_key);
        tx.events.push(Event::InstanceRemoved {
            service: service_key.clone(),
            instance,
            cause,
        });
    }

    pub(super) fn remove_owned(
        &mut self,
        tx: &mut Tx,
        owner: &Owner,
        only: Option<&ServiceKey>,
        cause: RemovalCause,
    ) {
        let Some(services) = self.owners.get(owner) else {
            return;
        };
        let doomed: Vec<(ServiceKey, InstanceKey)> = services
            .iter()
            .filter(|service| only.is_none_or(|only| only == *service))
            .flat_map(|service| self.held(owner, service).map(move |k| (service.clone(), k)))
            .collect();
        for (service, key) in doomed {
            self.remove_instance(tx, &service, &key, cause);
        }
    }

    pub(super) fn node_lost(&mut self, tx: &mut Tx, node: u64) {
        self.lost_nodes.insert(node);
        let owners: Vec<Owner> = self.owners_on(node).cloned().collect();
        for owner in owners {
            self.remove_owned(tx, &owner, None, RemovalCause::OwnerLost);
        }
    }

    pub(super) fn update_instance(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        ikey: &InstanceKey,
        patch: &InstancePatch,
        mode: UpdateMode,
    ) -> Result<(), Error> {
        patch.validate(&self.options.limits)?;
        let has_instance = self.existing_service(key)?.instance(ikey).is_some();
        if mode == UpdateMode::Existing && !has_instance {
            return Err(instance_not_found(key, ikey));
        }
        let zone_key = self.options.zone_key.clone();
        let service = self.service_mut(key).expect("checked above");
        service
            .overlays
            .entry(ikey.clone())
            .or_default()
            .merge(patch);
        if let Some(instance) = service.instances.get_mut(ikey) {
            let mut patched = Instance::clone(instance);
            if patch.apply_to(&mut patched) {
                patched.place_zone(&zone_key);
                *instance = Arc::new(patched);
                tx.events.push(Event::InstanceChanged {
                    service: key.clone(),
                    instance: instance.clone(),
                });
            }
        }
        Ok(())
    }

    pub(super) fn remove_instance_metadata(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        ikey: &InstanceKey,
        keys: &[String],
    ) -> Result<(), Error> {
        if self.existing_service(key)?.instance(ikey).is_none() {
            return Err(instance_not_found(key, ikey));
        }
        let zone_key = self.options.zone_key.clone();
        let service = self.service_mut(key).expect("checked above");
        if let Some(metadata) = service
            .overlays
            .get_mut(ikey)
            .and_then(|o| o.metadata.as_mut())
        {
            for k in keys {
                metadata.remove(k);
            }
        }
        let instance = service.instances.get_mut(ikey).expect("checked above");
        if keys.iter().any(|k| instance.metadata.contains_key(k)) {
            let mut patched = Instance::clone(instance);
            for k in keys {
                patched.metadata.remove(k);
            }
            patched.place_zone(&zone_key);
            *instance = Arc::new(patched);
            tx.events.push(Event::InstanceChanged {
                service: key.clone(),
                instance: instance.clone(),
            });
        }
        Ok(())
    }

    pub(super) fn set_health(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        ikey: &InstanceKey,
        healthy: bool,
        source: &HealthSource,
    ) -> Result<(), Error> {
        let instance = self.service_ref(key).and_then(|s| s.instance(ikey));
        match source {
            HealthSource::Liveness { owner } => {
                // The liveness decision is stale if the instance left or moved.
                if instance.is_none_or(|i| i.owner != *owner) {
                    return Ok(());
                }
            }
            HealthSource::Probe => {
                if instance.is_none_or(|i| i.kind.is_ephemeral()) {
                    return Ok(());
                }
            }
            HealthSource::Operator => {
                let instance = instance.ok_or_else(|| instance_not_found(key, ikey))?;
                if instance.kind.is_ephemeral() {
                    return Err(Error::invalid(
                        "ephemeral",
                        "health of ephemeral instances follows their beats or connection; only persistent instances take an operator's health",
                    ));
                }
            }
        }
        let service = self.service_mut(key).expect("instance found above");
        let instance = service
            .instances
            .get_mut(ikey)
            .expect("instance found above");
        if instance.healthy != healthy {
            Arc::make_mut(instance).healthy = healthy;
            tx.events.push(Event::InstanceChanged {
                service: key.clone(),
                instance: instance.clone(),
            });
        }
        Ok(())
    }

    pub(super) fn expire(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        ikey: &InstanceKey,
        owner: &Owner,
    ) {
        let still_owned = self
            .service_ref(key)
            .and_then(|s| s.instance(ikey).map(|i| i.owner == *owner))
            .unwrap_or(false);
        if still_owned {
            self.remove_instance(tx, key, ikey, RemovalCause::Expired);
        }
    }

    pub(super) fn existing_service(&self, key: &ServiceKey) -> Result<&Service, Error> {
        self.service_ref(key).ok_or_else(|| Error::ServiceNotFound {
            namespace: key.namespace.to_string(),
            service: key.grouped_name(),
        })
    }

    pub(super) fn create_service(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        kind: ServiceKind,
        meta: &ServiceMeta,
    ) -> Result<(), Error> {
        meta.validate(&self.options.limits)?;
        if self.service_ref(key).is_some() {
            return Err(Error::ServiceExists {
                service: key.grouped_name(),
            });
        }
        self.check_room_for_service(key)?;
        self.insert_service(Service::new(key.clone(), kind, Some(meta.clone()), tx.at));
        tx.events.push(Event::ServiceCreated {
            service: key.clone(),
            kind,
            meta: Some(Box::new(meta.clone())),
        });
        Ok(())
    }

    pub(super) fn update_service(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        patch: &ServiceMetaPatch,
    ) -> Result<(), Error> {
        let current = self.existing_service(key)?.meta.as_deref().cloned();
        let mut meta = current.clone().unwrap_or_default();
        if let Some(threshold) = patch.protect_threshold {
            meta.protect_threshold = threshold;
        }
        if let Some(metadata) = &patch.metadata {
            meta.metadata = metadata.clone();
        }
        if let Some(selector) = &patch.selector {
            meta.selector = selector.clone();
        }
        meta.validate(&self.options.limits)?;
        if current.as_ref() == Some(&meta) {
            return Ok(());
        }
        let meta = Box::new(meta);
        self.service_mut(key).expect("checked above").meta = Some(meta.clone());
        tx.events.push(Event::ServiceUpdated {
            service: key.clone(),
            meta,
        });
        Ok(())
    }

    pub(super) fn delete_service(&mut self, tx: &mut Tx, key: &ServiceKey) -> Result<(), Error> {
        if !self.existing_service(key)?.instances.is_empty() {
            return Err(Error::ServiceNotEmpty {
                service: key.grouped_name(),
            });
        }
        self.remove_service(key);
        tx.events.push(Event::ServiceRemoved {
            service: key.clone(),
        });
        Ok(())
    }

    pub(super) fn purge_empty_services(&mut self, tx: &mut Tx) {
        let ttl = self.options.empty_service_ttl;
        let due: Vec<ServiceKey> = self
            .all_services()
            .filter(|s| s.meta.is_none() && s.instances.is_empty())
            .filter(|s| {
                s.empty_since
                    .is_some_and(|since| since.saturating_add(ttl) <= tx.at)
            })
            .map(|s| s.key.clone())
            .collect();
        for key in due {
            self.remove_service(&key);
            tx.events.push(Event::ServiceRemoved { service: key });
        }
    }
}

fn instance_not_found(key: &ServiceKey, ikey: &InstanceKey) -> Error {
    Error::InstanceNotFound {
        service: key.grouped_name(),
        ip: ikey.ip.clone(),
        port: ikey.port,
    }
}

impl Registry {
    /// Every owner of instances, connections (by node) first.
    pub fn owners(&self) -> impl Iterator<Item = &Owner> {
        self.owners.keys()
    }

    /// What `owner` publishes: each service and the instances it holds
    /// there.
    pub fn published_by<'a>(
        &'a self,
        owner: &'a Owner,
    ) -> impl Iterator<Item = (&'a ServiceKey, &'a Instance)> + 'a {
        self.owners
            .get(owner)
            .into_iter()
            .flatten()
            .flat_map(move |key| self.owned(owner, key).map(move |i| (key, i)))
    }
}
