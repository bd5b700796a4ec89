//! The registry state: namespaces of services of instances, the owner
//! index, the revision counter and the change log. `apply` is the only way
//! to change it; it validates a whole command before touching anything, so
//! a refused command leaves no trace and consumes no revision.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::ChangeLog;
use crate::instance::Rules;
use crate::{
    Change, Command, ConfigItem, ConfigKey, ConfigSpec, Error, Event, GroupName, HealthSource,
    HealthTimeouts, Instance, InstanceKey, InstancePatch, InstanceSpec, Limits, Millis,
    NamespaceId, Op, Owner, RemovalCause, Service, ServiceKey, ServiceKind, ServiceMeta,
    ServiceMetaPatch, ServiceName, UpdateMode,
};

/// Rules every replica must share: they decide what `apply` accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryOptions {
    /// Default beat period and liveness timeouts.
    pub health: HealthTimeouts,
    /// Size limits.
    pub limits: Limits,
    /// The metadata key an instance's zone is read from; without it the
    /// zone is the cluster name.
    pub zone_key: String,
    /// How long an implicitly created service may stay empty, in ms.
    pub empty_service_ttl: Millis,
    /// How many recent changes the change log keeps.
    pub change_log_capacity: usize,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        Self {
            health: HealthTimeouts::default(),
            limits: Limits::default(),
            zone_key: "zone".to_owned(),
            empty_service_ttl: 60_000,
            change_log_capacity: 100_000,
        }
    }
}

impl RegistryOptions {
    /// The zone of an instance under these options.
    pub fn zone_of(&self, instance: &Instance) -> String {
        instance.zone_under(&self.zone_key)
    }
}

/// An explicitly created namespace's display name and description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceInfo {
    /// Display name.
    pub name: String,
    /// Description.
    pub description: String,
}

/// One namespace as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSummary {
    /// Its id.
    pub id: NamespaceId,
    /// Display name and description if created explicitly (the default
    /// namespace always has them).
    pub info: NamespaceInfo,
    /// Whether it was created explicitly (or is the default namespace).
    pub explicit: bool,
    /// How many services it holds.
    pub services: usize,
    /// How many instances its services hold.
    pub instances: usize,
}

#[derive(Debug, Clone, Default)]
struct Namespace {
    info: Option<NamespaceInfo>,
    /// Keyed by the full key so lookups need no allocation; keys sort by
    /// group, so one group is one range.
    services: BTreeMap<ServiceKey, Arc<Service>>,
}

impl Namespace {
    fn instances(&self) -> usize {
        self.services.values().map(|s| s.instances().len()).sum()
    }
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// How many items there are in all.
    pub count: usize,
    /// The items of the requested page.
    pub items: Vec<T>,
}

/// Sizes, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Namespaces that hold services or were created explicitly.
    pub namespaces: usize,
    /// Services.
    pub services: usize,
    /// Instances.
    pub instances: usize,
}

/// A consistent view of one namespace at one revision. Taking it copies
/// one `Arc` per service, never an instance.
#[derive(Debug, Clone)]
pub struct NamespaceView {
    /// The registry revision the view is at.
    pub revision: u64,
    /// The services, sorted by group and name.
    pub services: Vec<Arc<Service>>,
}

/// The whole registry as data, sorted: what raft snapshots serialize.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistrySnapshot {
    /// The revision it was taken at.
    pub revision: u64,
    /// Explicitly created namespaces.
    pub namespaces: Vec<(NamespaceId, NamespaceInfo)>,
    /// Every service, shared with the registry it was taken from: taking a
    /// snapshot copies one `Arc` per service.
    pub services: Vec<Arc<Service>>,
    /// Every config item.
    pub configs: Vec<(ConfigKey, Arc<ConfigItem>)>,
    /// Nodes the leader declared lost ([`Op::NodeLost`]) and that have not
    /// come back.
    pub lost_nodes: Vec<u64>,
}

/// The instances one owner published in one service: nearly always one,
/// so a sorted vector, not a set whose first node holds room for eleven.
#[derive(Debug, Clone, Default)]
struct Held(Vec<InstanceKey>);

impl Held {
    fn insert(&mut self, key: InstanceKey) {
        if let Err(at) = self.0.binary_search(&key) {
            self.0.insert(at, key);
        }
    }

    fn remove(&mut self, key: &InstanceKey) {
        if let Ok(at) = self.0.binary_search(key) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> std::slice::Iter<'_, InstanceKey> {
        self.0.iter()
    }
}

impl Extend<InstanceKey> for Held {
    fn extend<I: IntoIterator<Item = InstanceKey>>(&mut self, keys: I) {
        for key in keys {
            self.insert(key);
        }
    }
}

impl IntoIterator for Held {
    type Item = InstanceKey;
    type IntoIter = std::vec::IntoIter<InstanceKey>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The registry.
#[derive(Debug, Clone)]
pub struct Registry {
    options: RegistryOptions,
    namespaces: BTreeMap<NamespaceId, Namespace>,
    /// Which instances each owner published, per service.
    owners: BTreeMap<Owner, BTreeMap<ServiceKey, Held>>,
    revision: u64,
    instance_count: usize,
    log: ChangeLog,
    /// Implicit services with no instances, by the time they became empty:
    /// the purge deadline is a lookup, not a scan.
    empty_implicit: BTreeSet<(Millis, ServiceKey)>,
    /// The same index by service, to find an entry without a scan.
    empty_since: BTreeMap<ServiceKey, Millis>,
    configs: BTreeMap<ConfigKey, Arc<ConfigItem>>,
    lost_nodes: BTreeSet<u64>,
}

fn default_namespace_info() -> NamespaceInfo {
    NamespaceInfo {
        name: crate::DEFAULT_NAMESPACE.to_owned(),
        description: "Default Namespace".to_owned(),
    }
}

impl Registry {
    /// An empty registry.
    pub fn new(options: RegistryOptions) -> Self {
        let log = ChangeLog::new(options.change_log_capacity);
        Self {
            options,
            namespaces: BTreeMap::new(),
            owners: BTreeMap::new(),
            revision: 0,
            instance_count: 0,
            log,
            empty_implicit: BTreeSet::new(),
            empty_since: BTreeMap::new(),
            configs: BTreeMap::new(),
            lost_nodes: BTreeSet::new(),
        }
    }

    /// The options it applies commands under.
    pub fn options(&self) -> &RegistryOptions {
        &self.options
    }

    /// The revision of the newest change.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    // ---- queries -------------------------------------------------------

    /// One service, as a cheap snapshot.
    pub fn service(&self, key: &ServiceKey) -> Option<Arc<Service>> {
        self.namespaces
            .get(&key.namespace)?
            .services
            .get(key)
            .cloned()
    }

    /// The services of a namespace, optionally of one group, sorted.
    pub fn services<'a>(
        &'a self,
        namespace: &NamespaceId,
        group: Option<&'a GroupName>,
    ) -> impl Iterator<Item = &'a Arc<Service>> + 'a {
        let namespace = namespace.clone();
        let services = self.namespaces.get(&namespace).map(|ns| &ns.services);
        services.into_iter().flat_map(move |services| match group {
            Some(group) => {
                let from = ServiceKey::new(namespace.clone(), group.clone(), ServiceName::min());
                Box::new(
                    services
                        .range(from..)
                        .take_while(move |(k, _)| k.group == *group)
                        .map(|(_, s)| s),
                ) as Box<dyn Iterator<Item = &Arc<Service>>>
            }
            None => Box::new(services.values()),
        })
    }

    /// A page of the service keys of a namespace (optionally one group).
    /// `page_no` counts from 1; out-of-range pages are empty.
    pub fn list_services(
        &self,
        namespace: &NamespaceId,
        group: Option<&GroupName>,
        page_no: u64,
        page_size: u64,
    ) -> Page<ServiceKey> {
        let count = self.services(namespace, group).count();
        let start = page_no.saturating_sub(1).saturating_mul(page_size);
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        let size = usize::try_from(page_size).unwrap_or(usize::MAX);
        let items = self
            .services(namespace, group)
            .skip(start)
            .take(size)
            .map(|s| s.key.clone())
            .collect();
        Page { count, items }
    }

    /// A consistent view of a whole namespace.
    pub fn namespace_view(&self, namespace: &NamespaceId) -> NamespaceView {
        NamespaceView {
            revision: self.revision,
            services: self.services(namespace, None).cloned().collect(),
        }
    }

    /// Every namespace that exists: the default one, the explicit ones and
    /// the ones that hold services. Sorted by id, the default one first.
    pub fn namespaces(&self) -> Vec<NamespaceSummary> {
        let mut list = vec![NamespaceSummary {
            id: NamespaceId::public(),
            info: default_namespace_info(),
            explicit: true,
            services: self
                .namespaces
                .get(&NamespaceId::public())
                .map_or(0, |ns| ns.services.len()),
            instances: self
                .namespaces
                .get(&NamespaceId::public())
                .map_or(0, Namespace::instances),
        }];
        list.extend(
            self.namespaces
                .iter()
                .filter(|(id, _)| !id.is_public())
                .map(|(id, ns)| NamespaceSummary {
                    id: id.clone(),
                    info: ns.info.clone().unwrap_or_else(|| NamespaceInfo {
                        name: id.to_string(),
                        description: String::new(),
                    }),
                    explicit: ns.info.is_some(),
                    services: ns.services.len(),
                    instances: ns.instances(),
                }),
        );
        list
    }

    /// Sizes.
    pub fn counts(&self) -> Counts {
        Counts {
            namespaces: self.namespaces.len(),
            services: self.namespaces.values().map(|ns| ns.services.len()).sum(),
            instances: self.instance_count,
        }
    }

    /// One config item.
    pub fn config(&self, key: &ConfigKey) -> Option<Arc<ConfigItem>> {
        self.configs.get(key).cloned()
    }

    /// The md5 of a config item, `""` when it does not exist (as Nacos
    /// compares listeners' md5s).
    pub fn config_md5(&self, key: &ConfigKey) -> &str {
        self.configs.get(key).map_or("", |c| c.md5.as_str())
    }

    /// How many config items a namespace holds.
    pub fn config_count(&self, namespace: &NamespaceId) -> usize {
        self.configs
            .keys()
            .filter(|k| k.namespace == *namespace)
            .count()
    }

    /// The connection owners held by node `node` that own instances.
    pub fn owners_on(&self, node: u64) -> impl Iterator<Item = &Owner> {
        let first = Owner::Connection {
            node,
            id: String::new(),
        };
        self.owners
            .range(first..)
            .map(|(owner, _)| owner)
            .take_while(
                move |owner| matches!(owner, Owner::Connection { node: n, .. } if *n == node),
            )
    }

    /// The nodes holding connection owners, each once.
    pub fn owner_nodes(&self) -> BTreeSet<u64> {
        // Connection owners sort first, by node: jump from node to node
        // rather than visiting every connection.
        let mut nodes = BTreeSet::new();
        let mut from = 0;
        while let Some((Owner::Connection { node, .. }, _)) = self
            .owners
            .range(
                Owner::Connection {
                    node: from,
                    id: String::new(),
                }..,
            )
            .next()
        {
            nodes.insert(*node);
            match node.checked_add(1) {
                Some(next) => from = next,
                None => break,
            }
        }
        nodes
    }

    /// Nodes declared lost by the leader ([`Op::NodeLost`]) that have not
    /// come back.
    pub fn lost_nodes(&self) -> &BTreeSet<u64> {
        &self.lost_nodes
    }

    /// The changes after revision `after`, oldest first, or
    /// [`Error::HistoryCompacted`] when the log no longer holds them all
    /// (then take a fresh view).
    pub fn changes_since(&self, after: u64) -> Result<impl Iterator<Item = &Change>, Error> {
        self.log.since(after, self.revision)
    }

    /// When the next implicitly created service becomes due for purging.
    pub fn next_purge_deadline(&self) -> Option<Millis> {
        self.empty_implicit
            .first()
            .map(|(since, _)| since.saturating_add(self.options.empty_service_ttl))
    }

    /// The service's entry in the empty-implicit index, if it belongs there.
    fn purge_entry(service: &Service) -> Option<(Millis, ServiceKey)> {
        match (
            &service.meta,
            service.instances.is_empty(),
            service.empty_since,
        ) {
            (None, true, Some(since)) => Some((since, service.key.clone())),
            _ => None,
        }
    }

    fn all_services(&self) -> impl Iterator<Item = &Arc<Service>> {
        self.namespaces.values().flat_map(|ns| ns.services.values())
    }

    // ---- snapshots -----------------------------------------------------

    /// The whole registry as sorted data.
    pub fn snapshot(&self) -> RegistrySnapshot {
        RegistrySnapshot {
            revision: self.revision,
            namespaces: self
                .namespaces
                .iter()
                .filter_map(|(id, ns)| ns.info.clone().map(|info| (id.clone(), info)))
                .collect(),
            services: self.all_services().cloned().collect(),
            configs: self
                .configs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            lost_nodes: self.lost_nodes.iter().copied().collect(),
        }
    }

    /// Rebuilds a registry from a snapshot. The change log starts empty, so
    /// watchers resuming from before the snapshot get a fresh view.
    pub fn restore(snapshot: RegistrySnapshot, options: RegistryOptions) -> Self {
        let mut registry = Registry::new(options);
        registry.revision = snapshot.revision;
        for (id, info) in snapshot.namespaces {
            registry.namespaces.entry(id).or_default().info = Some(info);
        }
        registry.configs = snapshot.configs.into_iter().collect();
        registry.lost_nodes = snapshot.lost_nodes.into_iter().collect();
        for service in snapshot.services {
            for (key, instance) in &service.instances {
                registry
                    .owners
                    .entry(instance.owner.clone())
                    .or_default()
                    .entry(service.key.clone())
                    .or_default()
                    .insert(key.clone());
            }
            registry.instance_count += service.instances.len();
            if let Some((since, key)) = Self::purge_entry(&service) {
                registry.index_empty(key, Some(since));
            }
            registry
                .namespaces
                .entry(service.key.namespace.clone())
                .or_default()
                .services
                .insert(service.key.clone(), service);
        }
        registry
    }

    // ---- commands ------------------------------------------------------

    /// Applies a command. On success, returns the changes it made (possibly
    /// none), with consecutive revisions; on error, nothing changed.
    pub fn apply(&mut self, command: &Command) -> Result<Vec<Change>, Error> {
        let mut tx = Tx {
            at: command.at,
            events: Vec::new(),
        };
        match &command.op {
            Op::Register {
                service,
                owner,
                instances,
            } => self.register(&mut tx, service, owner, instances)?,
            Op::Deregister { service, owner } => {
                self.remove_owned(&mut tx, owner, Some(service), RemovalCause::Deregistered)
            }
            Op::RemoveOwner { owner, cause } => self.remove_owned(&mut tx, owner, None, *cause),
            Op::UpdateInstance {
                service,
                key,
                patch,
                mode,
            } => self.update_instance(&mut tx, service, key, patch, *mode)?,
            Op::SetHealth {
                service,
                key,
                healthy,
                source,
            } => self.set_health(&mut tx, service, key, *healthy, source)?,
            Op::Expire {
                service,
                key,
                owner,
            } => self.expire(&mut tx, service, key, owner),
            Op::CreateService {
                service,
                kind,
                meta,
            } => self.create_service(&mut tx, service, *kind, meta)?,
            Op::UpdateService { service, patch } => self.update_service(&mut tx, service, patch)?,
            Op::DeleteService { service } => self.delete_service(&mut tx, service)?,
            Op::PurgeEmptyServices => self.purge_empty_services(&mut tx),
            Op::CreateNamespace {
                namespace,
                name,
                description,
            } => self.save_namespace(&mut tx, namespace, name, description, SaveMode::Create)?,
            Op::UpdateNamespace {
                namespace,
                name,
                description,
            } => self.save_namespace(&mut tx, namespace, name, description, SaveMode::Update)?,
            Op::DeleteNamespace { namespace } => self.delete_namespace(&mut tx, namespace)?,
            Op::PublishConfig { key, spec, cas_md5 } => {
                self.publish_config(&mut tx, key, spec, cas_md5.as_deref())?
            }
            Op::RemoveConfig { key } => self.remove_config(&mut tx, key),
            Op::NodeLost { node } => self.node_lost(&mut tx, *node),
            Op::NodeBack { node } => {
                self.lost_nodes.remove(node);
            }
        }
        Ok(self.commit(tx))
    }

    /// Numbers the events, stamps their services' revisions and logs them.
    fn commit(&mut self, tx: Tx) -> Vec<Change> {
        let touched: BTreeSet<ServiceKey> = tx
            .events
            .iter()
            .filter_map(|e| e.service().cloned())
            .collect();
        for key in touched {
            let since = self
                .service_ref(&key)
                .and_then(Self::purge_entry)
                .map(|(since, _)| since);
            self.index_empty(key, since);
        }
        let mut changes = Vec::with_capacity(tx.events.len());
        for event in tx.events {
            self.revision += 1;
            match &event {
                Event::InstanceAdded { .. } => self.instance_count += 1,
                Event::InstanceRemoved { .. } => self.instance_count -= 1,
                _ => {}
            }
            let revision = self.revision;
            if let Some(key) = event.service() {
                if let Some(service) = self.service_mut(key) {
                    service.revision = revision;
                }
            }
            let change = Change {
                revision: self.revision,
                at: tx.at,
                event,
            };
            self.log.push(change.clone());
            changes.push(change);
        }
        changes
    }

    /// A borrowed service. Internal reads use this rather than cloning the
    /// `Arc`, which would make the next `Arc::make_mut` copy the service.
    fn service_ref(&self, key: &ServiceKey) -> Option<&Service> {
        self.namespaces
            .get(&key.namespace)?
            .services
            .get(key)
            .map(|s| &**s)
    }

    fn index_empty(&mut self, key: ServiceKey, since: Option<Millis>) {
        if let Some(old) = self.empty_since.remove(&key) {
            self.empty_implicit.remove(&(old, key.clone()));
        }
        if let Some(since) = since {
            self.empty_implicit.insert((since, key.clone()));
            self.empty_since.insert(key, since);
        }
    }

    fn service_mut(&mut self, key: &ServiceKey) -> Option<&mut Service> {
        self.namespaces
            .get_mut(&key.namespace)?
            .services
            .get_mut(key)
            .map(Arc::make_mut)
    }

    fn insert_service(&mut self, service: Service) {
        self.namespaces
            .entry(service.key.namespace.clone())
            .or_default()
            .services
            .insert(service.key.clone(), Arc::new(service));
    }

    fn remove_service(&mut self, key: &ServiceKey) {
        if let Some(ns) = self.namespaces.get_mut(&key.namespace) {
            ns.services.remove(key);
            if ns.services.is_empty() && ns.info.is_none() {
                self.namespaces.remove(&key.namespace);
            }
        }
    }

    fn register(
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

        let previous: Held = self
            .owners
            .get(owner)
            .and_then(|services| services.get(key))
            .cloned()
            .unwrap_or_default();
        let gone: Vec<InstanceKey> = previous
            .into_iter()
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
        let mut moved_from: Vec<(Owner, InstanceKey)> = Vec::new();
        let mut stored: Vec<InstanceKey> = Vec::with_capacity(built.len());
        for (ikey, mut instance) in built {
            if let Some(overlay) = service.overlays.get(&ikey) {
                overlay.apply_to(&mut instance);
            }
            let instance = match service.instances.get(&ikey) {
                Some(current) if **current == instance => continue,
                Some(current) => {
                    if current.owner != *owner {
                        moved_from.push((current.owner.clone(), ikey.clone()));
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
            service.instances.insert(ikey.clone(), instance);
            service.empty_since = None;
            stored.push(ikey);
        }
        if !stored.is_empty() {
            self.owners
                .entry(owner.clone())
                .or_default()
                .entry(key.clone())
                .or_default()
                .extend(stored);
        }
        // An instance registered again by a new owner moves in place:
        // subscribers see a change, never a removal and re-add.
        for (old_owner, ikey) in moved_from {
            self.unindex(&old_owner, key, &ikey);
        }
        // Removals come after the additions, so a replacement never shows
        // the service as empty in between.
        for ikey in gone {
            self.remove_instance(tx, key, &ikey, RemovalCause::Replaced);
        }
        Ok(())
    }

    /// Refuses a new service in a namespace that holds the most allowed.
    fn check_room_for_service(&self, key: &ServiceKey) -> Result<(), Error> {
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
    fn check_room_for_instances(
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
                    .filter(|k| !service.instances.contains_key(*k))
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

    fn unindex(&mut self, owner: &Owner, service: &ServiceKey, key: &InstanceKey) {
        if let Some(services) = self.owners.get_mut(owner) {
            if let Some(keys) = services.get_mut(service) {
                keys.remove(key);
                if keys.is_empty() {
                    services.remove(service);
                }
            }
            if services.is_empty() {
                self.owners.remove(owner);
            }
        }
    }

    /// Removes one instance, keeping the owner index and the service's
    /// empty-since time right.
    fn remove_instance(
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
        self.unindex(&instance.owner, service_key, key);
        tx.events.push(Event::InstanceRemoved {
            service: service_key.clone(),
            instance,
            cause,
        });
    }

    fn remove_owned(
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
            .filter(|(service, _)| only.is_none_or(|only| only == *service))
            .flat_map(|(service, keys)| keys.iter().map(move |k| (service.clone(), k.clone())))
            .collect();
        for (service, key) in doomed {
            self.remove_instance(tx, &service, &key, cause);
        }
    }

    fn node_lost(&mut self, tx: &mut Tx, node: u64) {
        self.lost_nodes.insert(node);
        let owners: Vec<Owner> = self.owners_on(node).cloned().collect();
        for owner in owners {
            self.remove_owned(tx, &owner, None, RemovalCause::OwnerLost);
        }
    }

    fn update_instance(
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
                patched.zone = patched.zone_under(&zone_key);
                *instance = Arc::new(patched);
                tx.events.push(Event::InstanceChanged {
                    service: key.clone(),
                    instance: instance.clone(),
                });
            }
        }
        Ok(())
    }

    fn set_health(
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

    fn expire(&mut self, tx: &mut Tx, key: &ServiceKey, ikey: &InstanceKey, owner: &Owner) {
        let still_owned = self
            .service_ref(key)
            .and_then(|s| s.instance(ikey).map(|i| i.owner == *owner))
            .unwrap_or(false);
        if still_owned {
            self.remove_instance(tx, key, ikey, RemovalCause::Expired);
        }
    }

    fn existing_service(&self, key: &ServiceKey) -> Result<&Service, Error> {
        self.service_ref(key).ok_or_else(|| Error::ServiceNotFound {
            namespace: key.namespace.to_string(),
            service: key.grouped_name(),
        })
    }

    fn create_service(
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
            meta: Some(meta.clone()),
        });
        Ok(())
    }

    fn update_service(
        &mut self,
        tx: &mut Tx,
        key: &ServiceKey,
        patch: &ServiceMetaPatch,
    ) -> Result<(), Error> {
        let current = self.existing_service(key)?.meta.clone();
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
        self.service_mut(key).expect("checked above").meta = Some(meta.clone());
        tx.events.push(Event::ServiceUpdated {
            service: key.clone(),
            meta,
        });
        Ok(())
    }

    fn delete_service(&mut self, tx: &mut Tx, key: &ServiceKey) -> Result<(), Error> {
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

    fn purge_empty_services(&mut self, tx: &mut Tx) {
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

    fn save_namespace(
        &mut self,
        tx: &mut Tx,
        id: &NamespaceId,
        name: &str,
        description: &str,
        mode: SaveMode,
    ) -> Result<(), Error> {
        if id.is_public() {
            return Err(match mode {
                SaveMode::Create => Error::NamespaceExists {
                    namespace: id.to_string(),
                },
                SaveMode::Update => {
                    Error::invalid("namespace", "the default namespace cannot be changed")
                }
            });
        }
        check_namespace_text("namespaceName", name, 128)?;
        check_namespace_text("namespaceDesc", description, 256)?;
        let explicit = self.namespaces.get(id).is_some_and(|ns| ns.info.is_some());
        match (mode, explicit) {
            (SaveMode::Create, true) => {
                return Err(Error::NamespaceExists {
                    namespace: id.to_string(),
                })
            }
            (SaveMode::Update, false) => {
                return Err(Error::NamespaceNotFound {
                    namespace: id.to_string(),
                })
            }
            _ => {}
        }
        let info = NamespaceInfo {
            name: name.to_owned(),
            description: description.to_owned(),
        };
        let namespace = self.namespaces.entry(id.clone()).or_default();
        if namespace.info.as_ref() == Some(&info) {
            return Ok(());
        }
        namespace.info = Some(info);
        tx.events.push(Event::NamespaceSaved {
            namespace: id.clone(),
            name: name.to_owned(),
            description: description.to_owned(),
        });
        Ok(())
    }

    fn delete_namespace(&mut self, tx: &mut Tx, id: &NamespaceId) -> Result<(), Error> {
        if id.is_public() {
            return Err(Error::invalid(
                "namespaceId",
                "the default namespace cannot be deleted",
            ));
        }
        let Some(namespace) = self.namespaces.get(id).filter(|ns| ns.info.is_some()) else {
            return Err(Error::NamespaceNotFound {
                namespace: id.to_string(),
            });
        };
        let configs = self.config_count(id);
        if !namespace.services.is_empty() || configs > 0 {
            // Deleting it would silently drop registrations or configs.
            return Err(Error::NamespaceNotEmpty {
                namespace: id.to_string(),
                services: namespace.services.len() + configs,
            });
        }
        self.namespaces.remove(id);
        tx.events.push(Event::NamespaceRemoved {
            namespace: id.clone(),
        });
        Ok(())
    }
}

impl Registry {
    fn publish_config(
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

    fn remove_config(&mut self, tx: &mut Tx, key: &ConfigKey) {
        if self.configs.remove(key).is_some() {
            tx.events.push(Event::ConfigRemoved { key: key.clone() });
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SaveMode {
    Create,
    Update,
}

/// The events of one command, before they get revisions.
struct Tx {
    at: Millis,
    events: Vec<Event>,
}

fn instance_not_found(key: &ServiceKey, ikey: &InstanceKey) -> Error {
    Error::InstanceNotFound {
        service: key.grouped_name(),
        ip: ikey.ip.clone(),
        port: ikey.port,
    }
}

fn check_namespace_text(field: &'static str, value: &str, max: usize) -> Result<(), Error> {
    if value.chars().count() > max {
        return Err(Error::invalid(
            field,
            format!("longer than {max} characters"),
        ));
    }
    if value
        .chars()
        .any(|c| "@#$%^&*".contains(c) || c.is_control())
    {
        return Err(Error::invalid(
            field,
            "must not contain @#$%^&* or control characters",
        ));
    }
    Ok(())
}
