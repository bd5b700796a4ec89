//! The registry state: namespaces of services of instances, the owner
//! index, the revision counter and the change log. `apply` is the only way
//! to change it; it validates a whole command before touching anything, so
//! a refused command leaves no trace and consumes no revision.
//!
//! By aggregate: naming (services, instances and their owners, lost
//! nodes) in `naming.rs`, namespaces in `namespaces.rs`, configs in
//! `configs.rs`; this module holds the state, the queries, snapshots and
//! `apply`, which dispatches a command to its aggregate and numbers the
//! events.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::ChangeLog;
use crate::{
    Change, Command, ConfigItem, ConfigKey, ConfigSource, Error, Event, GrayRelease, GroupName,
    HealthTimeouts, HistoryEntry, HistoryRetention, Limits, Millis, NamespaceId, Op, Owner,
    RemovalCause, Service, ServiceKey, ServiceName,
};
use history::History;
pub use locks::LockName;

mod access;
mod configs;
mod history;
mod locks;
mod namespaces;
mod naming;

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
    /// How much config history is kept.
    pub history: HistoryRetention,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        Self {
            health: HealthTimeouts::default(),
            limits: Limits::default(),
            zone_key: "zone".to_owned(),
            empty_service_ttl: 60_000,
            change_log_capacity: 100_000,
            history: HistoryRetention::default(),
        }
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
    /// Every gray release, by config.
    pub grays: Vec<(ConfigKey, Arc<GrayRelease>)>,
    /// Every config history entry kept, oldest first.
    pub history: Vec<Arc<HistoryEntry>>,
    /// Users created through the API, with their password hashes.
    pub users: Vec<(String, String)>,
    /// Role bindings, as (role, user).
    pub roles: Vec<(String, String)>,
    /// Permissions granted to roles.
    pub permissions: Vec<crate::access::Permission>,
    /// The last config id or history id handed out.
    pub serial: u64,
    /// Nodes the leader declared lost ([`Op::NodeLost`]) and that have not
    /// come back.
    pub lost_nodes: Vec<u64>,
    /// Held locks: (type, key) and the instant each expires.
    pub locks: Vec<(locks::LockName, Millis)>,
}

/// The registry.
#[derive(Debug, Clone)]
pub struct Registry {
    options: RegistryOptions,
    namespaces: BTreeMap<NamespaceId, Namespace>,
    /// The services each owner publishes instances in. Which instances
    /// those are is read off the service (an instance names its owner),
    /// so the index holds one key per (owner, service), not one per
    /// instance.
    owners: BTreeMap<Owner, BTreeSet<ServiceKey>>,
    revision: u64,
    instance_count: usize,
    log: ChangeLog,
    /// Implicit services with no instances, by the time they became empty:
    /// the purge deadline is a lookup, not a scan.
    empty_implicit: BTreeSet<(Millis, ServiceKey)>,
    /// The same index by service, to find an entry without a scan.
    empty_since: BTreeMap<ServiceKey, Millis>,
    configs: BTreeMap<ConfigKey, Arc<ConfigItem>>,
    /// The gray releases of each config that has any.
    grays: BTreeMap<ConfigKey, Vec<Arc<GrayRelease>>>,
    history: History,
    access: access::Access,
    /// The last config id or history id handed out.
    serial: u64,
    lost_nodes: BTreeSet<u64>,
    /// Held locks, by (type, key), with the instant each expires.
    locks: BTreeMap<locks::LockName, Millis>,
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
            grays: BTreeMap::new(),
            history: History::default(),
            access: access::Access::default(),
            serial: 0,
            lost_nodes: BTreeSet::new(),
            locks: BTreeMap::new(),
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
        self.configs_in(namespace).count()
    }

    /// The config items of a namespace, by group and data id.
    pub fn configs_in<'a>(
        &'a self,
        namespace: &NamespaceId,
    ) -> impl Iterator<Item = (&'a ConfigKey, &'a Arc<ConfigItem>)> + 'a {
        let namespace = namespace.clone();
        let from = ConfigKey {
            namespace: namespace.clone(),
            group: String::new(),
            data_id: String::new(),
        };
        self.configs
            .range(from..)
            .take_while(move |(k, _)| k.namespace == namespace)
    }

    /// The services a fuzzy-watch pattern matches, in key order.
    pub fn services_matching<'a>(
        &'a self,
        pattern: &'a crate::GroupKeyPattern,
    ) -> impl Iterator<Item = &'a ServiceKey> + 'a {
        // Every stored namespace passed `parse`: one that fails holds none.
        let namespace = NamespaceId::parse(pattern.namespace()).ok();
        namespace
            .and_then(|ns| self.namespaces.get(&ns))
            .into_iter()
            .flat_map(|ns| ns.services.keys())
            .filter(|key| pattern.matches_service(key))
    }

    /// The config items a fuzzy-watch pattern matches, in key order.
    pub fn configs_matching<'a>(
        &'a self,
        pattern: &'a crate::GroupKeyPattern,
    ) -> impl Iterator<Item = &'a ConfigKey> + 'a {
        let tenant = pattern.namespace();
        let namespace = if tenant == crate::DEFAULT_NAMESPACE {
            NamespaceId::public()
        } else {
            NamespaceId::from_config_tenant(tenant)
        };
        self.configs_in(&namespace)
            .map(|(key, _)| key)
            .filter(|key| pattern.matches_config(key))
    }

    /// The connection owners held by node `node` that own instances.
    pub fn owners_on(&self, node: u64) -> impl Iterator<Item = &Owner> {
        let first = Owner::Connection {
            node,
            id: "".into(),
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
                    id: "".into(),
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
    pub fn changes_since(&self, after: u64) -> Result<impl Iterator<Item = Change> + '_, Error> {
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
            grays: self
                .grays
                .iter()
                .flat_map(|(k, grays)| grays.iter().map(move |g| (k.clone(), g.clone())))
                .collect(),
            history: self.history.entries().cloned().collect(),
            users: self.access.users(),
            roles: self.access.roles(),
            permissions: self.access.permissions(),
            serial: self.serial,
            lost_nodes: self.lost_nodes.iter().copied().collect(),
            locks: self.locks.iter().map(|(n, at)| (n.clone(), *at)).collect(),
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
        for (key, gray) in snapshot.grays {
            registry.grays.entry(key).or_default().push(gray);
        }
        registry.history = snapshot.history.into_iter().collect();
        registry.access =
            access::Access::restore(snapshot.users, snapshot.roles, snapshot.permissions);
        registry.serial = snapshot.serial;
        registry.lost_nodes = snapshot.lost_nodes.into_iter().collect();
        registry.locks = snapshot.locks.into_iter().collect();
        for service in snapshot.services {
            let service = service.without_stored_generated_ids();
            for instance in service.instances.values() {
                registry
                    .owners
                    .entry(instance.owner.clone())
                    .or_default()
                    .insert(service.key.clone());
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
            Op::CreateUser {
                name,
                password_hash,
            } => self.access.create_user(name, password_hash)?,
            Op::CreateInitialAdmin {
                name,
                password_hash,
            } => self.access.create_initial_admin(name, password_hash)?,
            Op::SetPassword {
                name,
                password_hash,
            } => self.access.set_password(name, password_hash)?,
            Op::DeleteUser { name } => self.access.delete_user(name)?,
            Op::BindRole { role, user } => self.access.bind(role, user)?,
            Op::UnbindRole { role, user } => self.access.unbind(role, user.as_deref())?,
            Op::Grant { permission } => self.access.grant(permission)?,
            Op::Revoke { permission } => self.access.revoke(permission),
            Op::RemoveInstanceMetadata { service, key, keys } => {
                self.remove_instance_metadata(&mut tx, service, key, keys)?
            }
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
            // Written before sources were recorded: who is unknown.
            Op::PublishConfig { key, spec, cas_md5 } => self.publish_config(
                &mut tx,
                key,
                spec,
                cas_md5.as_deref(),
                &ConfigSource::default(),
            )?,
            Op::RemoveConfig { key } => self.remove_config(&mut tx, key, &ConfigSource::default()),
            Op::PublishConfigFrom {
                key,
                spec,
                cas_md5,
                source,
            } => self.publish_config(&mut tx, key, spec, cas_md5.as_deref(), source)?,
            Op::RemoveConfigFrom { key, source } => self.remove_config(&mut tx, key, source),
            Op::PublishConfigGray {
                key,
                rule,
                spec,
                source,
            } => self.publish_gray(&mut tx, key, rule, spec, source)?,
            Op::RemoveConfigGray { key, name, source } => {
                self.remove_gray(&mut tx, key, name, source)
            }
            Op::NodeLost { node } => self.node_lost(&mut tx, *node),
            Op::NodeBack { node } => {
                self.lost_nodes.remove(node);
            }
            Op::AcquireLock { kind, key, ttl } => {
                self.drop_expired_locks(tx.at);
                let until = tx.at.saturating_add(*ttl);
                self.acquire_lock(&tx, &(kind.clone(), key.clone()), until)?;
            }
            Op::ReleaseLock { kind, key } => self.release_lock(&(kind.clone(), key.clone()))?,
            Op::WriteConfigs {
                expect,
                publish,
                remove,
            } => self.write_configs(&mut tx, expect, publish, remove)?,
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
