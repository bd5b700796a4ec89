//! Backup, restore and migration: `GET /understudy/v1/export` writes the
//! explicitly created namespaces, the services with their persistent
//! instances and the config items as one JSON document, and
//! `POST /understudy/v1/import` merges such a document into the registry.
//! It owns the document format and the import plan. It adds no rule of its
//! own: the plan is applied to a scratch copy of the registry, so a
//! document the core would refuse anywhere is refused as a whole, naming
//! the item, before the first write. Ephemeral instances are only counted:
//! their connections and beats register them again. Writes go through
//! `Node::propose`, like every other adapter's.

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use understudy_core::{
    ClusterName, Command, ConfigItem, ConfigKey, ConfigSpec, Error as CoreError, Event, Instance,
    InstanceKey, InstanceSpec, Metadata, Millis, NamespaceId, Op, Owner, Registry, ServiceKey,
    ServiceKind, ServiceMeta, ServiceMetaPatch,
};
use understudy_proto::nacos::SelectorJson;

use super::error::ApiError;
use super::params::clip;
use crate::node::Node;

/// The document's `format`.
const FORMAT: &str = "understudy-export";
/// The document `version` this server writes and reads.
const VERSION: u64 = 1;
/// The top-level keys of a document.
const KEYS: &[&str] = &[
    "format",
    "version",
    "exportedAt",
    "namespaces",
    "services",
    "configs",
    "ephemeralInstances",
];

/// A whole export.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    format: &'static str,
    version: u64,
    exported_at: Millis,
    namespaces: Vec<NamespaceEntry>,
    services: Vec<ServiceEntry>,
    configs: Vec<ConfigEntry>,
    /// Ephemeral instances held when exporting; informational.
    ephemeral_instances: usize,
}

/// An explicitly created namespace (the default one exists everywhere).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NamespaceEntry {
    id: String,
    name: String,
    #[serde(default)]
    description: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum KindEntry {
    Ephemeral,
    Persistent,
}

impl From<KindEntry> for ServiceKind {
    fn from(kind: KindEntry) -> Self {
        match kind {
            KindEntry::Ephemeral => ServiceKind::Ephemeral,
            KindEntry::Persistent => ServiceKind::Persistent,
        }
    }
}

/// A service: created through the service API (`meta` set), or created by
/// the registration of its persistent instances (`meta` null).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ServiceEntry {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    group: String,
    name: String,
    kind: KindEntry,
    #[serde(default)]
    meta: Option<MetaEntry>,
    /// Persistent instances only. Read item by item on import, so that an
    /// error names the instance.
    #[serde(default, skip_deserializing)]
    instances: Vec<InstanceEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MetaEntry {
    #[serde(default)]
    protect_threshold: f32,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default = "no_selector")]
    selector: SelectorJson,
}

fn no_selector() -> SelectorJson {
    SelectorJson::from(&understudy_core::Selector::default())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InstanceEntry {
    #[serde(default)]
    instance_id: Option<String>,
    ip: String,
    /// Wider than a port, so that an out-of-range one is refused by name.
    port: i64,
    #[serde(default)]
    cluster: String,
    #[serde(default = "one")]
    weight: f64,
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default = "yes")]
    healthy: bool,
    #[serde(default)]
    metadata: Metadata,
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

impl From<&Instance> for InstanceEntry {
    fn from(instance: &Instance) -> Self {
        Self {
            instance_id: Some(instance.instance_id.clone()),
            ip: instance.ip.clone(),
            port: i64::from(instance.port),
            cluster: instance.cluster.to_string(),
            weight: instance.weight,
            enabled: instance.enabled,
            healthy: instance.healthy,
            metadata: instance.metadata.clone(),
        }
    }
}

/// A config item; `namespace` is its tenant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigEntry {
    #[serde(default)]
    namespace: String,
    group: String,
    data_id: String,
    content: String,
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    app_name: String,
    #[serde(default)]
    desc: String,
    #[serde(default)]
    tags: String,
    #[serde(default)]
    encrypted_data_key: String,
}

/// What an import created or changed; all zero when the registry already
/// held everything in the document.
#[derive(Debug, Default, Serialize)]
struct Imported {
    namespaces: usize,
    services: usize,
    instances: usize,
    configs: usize,
}

impl Imported {
    fn count(&mut self, event: &Event) {
        match event {
            Event::NamespaceSaved { .. } => self.namespaces += 1,
            Event::ServiceCreated { .. } | Event::ServiceUpdated { .. } => self.services += 1,
            Event::InstanceAdded { .. } | Event::InstanceChanged { .. } => self.instances += 1,
            Event::ConfigPublished { .. } => self.configs += 1,
            _ => {}
        }
    }
}

// ---- export --------------------------------------------------------------

/// `GET /understudy/v1/export`.
pub(crate) async fn export(State(node): State<Node>) -> Response {
    Json(document(&node)).into_response()
}

fn document(node: &Node) -> Document {
    let snapshot = node.registry().snapshot();
    let mut ephemeral_instances = 0;
    let mut services = Vec::new();
    for service in &snapshot.services {
        let (ephemeral, persistent): (Vec<&Instance>, Vec<&Instance>) =
            service.instances().partition(|i| i.kind.is_ephemeral());
        ephemeral_instances += ephemeral.len();
        // A service that exists only for its ephemeral instances comes
        // back with them; one that is empty and implicit is about to go.
        if service.meta().is_none() && persistent.is_empty() {
            continue;
        }
        let key = service.key();
        services.push(ServiceEntry {
            namespace: key.namespace.to_string(),
            group: key.group.to_string(),
            name: key.name.to_string(),
            kind: match service.kind() {
                ServiceKind::Ephemeral => KindEntry::Ephemeral,
                ServiceKind::Persistent => KindEntry::Persistent,
            },
            meta: service.meta().map(|meta| MetaEntry {
                protect_threshold: meta.protect_threshold,
                metadata: meta.metadata.clone(),
                selector: SelectorJson::from(&meta.selector),
            }),
            instances: persistent.into_iter().map(InstanceEntry::from).collect(),
        });
    }
    Document {
        format: FORMAT,
        version: VERSION,
        exported_at: node.now(),
        namespaces: snapshot
            .namespaces
            .iter()
            .map(|(id, info)| NamespaceEntry {
                id: id.to_string(),
                name: info.name.clone(),
                description: info.description.clone(),
            })
            .collect(),
        services,
        configs: snapshot
            .configs
            .iter()
            .map(|(key, item)| ConfigEntry {
                namespace: key.namespace.to_string(),
                group: key.group.clone(),
                data_id: key.data_id.clone(),
                content: item.content.clone(),
                kind: item.kind.clone(),
                app_name: item.app_name.clone(),
                desc: item.desc.clone(),
                tags: item.tags.clone(),
                encrypted_data_key: item.encrypted_data_key.clone(),
            })
            .collect(),
        ephemeral_instances,
    }
}

// ---- import --------------------------------------------------------------

/// `POST /understudy/v1/import`: validates the whole document, then
/// writes what the registry does not hold yet.
pub(crate) async fn import(
    State(node): State<Node>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let imported = async {
        let body = body.map_err(ApiError::from_body)?;
        let parsed = Parsed::read(&body)?;
        let steps = plan(&node, &parsed)?;
        write(&node, steps).await
    }
    .await;
    match imported {
        Ok(imported) => Json(imported).into_response(),
        Err(e) => e.v2(),
    }
}

/// A document read item by item.
struct Parsed {
    namespaces: Vec<NamespaceEntry>,
    services: Vec<ServiceEntry>,
    configs: Vec<ConfigEntry>,
}

impl Parsed {
    fn read(body: &[u8]) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::invalid("body", format!("not a JSON document: {e}")))?;
        let Value::Object(mut top) = value else {
            return Err(ApiError::invalid("body", "must be a JSON object"));
        };
        if let Some(unknown) = top.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(ApiError::invalid_owned(
                clip(unknown).to_owned(),
                format!("unknown key; a document has {}", KEYS.join(", ")),
            ));
        }
        match top.get("format") {
            None => return Err(ApiError::missing("format")),
            Some(Value::String(f)) if f == FORMAT => {}
            Some(other) => {
                return Err(ApiError::invalid(
                    "format",
                    format!("must be \"{FORMAT}\", got {}", clip(&other.to_string())),
                ))
            }
        }
        match top.get("version") {
            None => return Err(ApiError::missing("version")),
            Some(v) if v.as_u64() == Some(VERSION) => {}
            Some(other) => {
                return Err(ApiError::invalid(
                    "version",
                    format!(
                        "this server reads version {VERSION}, got {}",
                        clip(&other.to_string())
                    ),
                ))
            }
        }
        let namespaces = items(&mut top, "namespaces")?
            .into_iter()
            .enumerate()
            .map(|(i, v)| entry(v, &format!("namespaces[{i}]")))
            .collect::<Result<_, _>>()?;
        let services = items(&mut top, "services")?
            .into_iter()
            .enumerate()
            .map(|(i, v)| service_entry(v, &format!("services[{i}]")))
            .collect::<Result<_, _>>()?;
        let configs = items(&mut top, "configs")?
            .into_iter()
            .enumerate()
            .map(|(i, v)| entry(v, &format!("configs[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            namespaces,
            services,
            configs,
        })
    }
}

/// The array under `key`; absent means empty.
fn items(top: &mut Map<String, Value>, key: &'static str) -> Result<Vec<Value>, ApiError> {
    match top.remove(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(ApiError::invalid(key, "must be an array")),
    }
}

fn entry<T: DeserializeOwned>(value: Value, path: &str) -> Result<T, ApiError> {
    serde_json::from_value(value)
        .map_err(|e| ApiError::invalid_owned(path.to_owned(), e.to_string()))
}

fn service_entry(mut value: Value, path: &str) -> Result<ServiceEntry, ApiError> {
    let instances = match value.as_object_mut() {
        Some(object) => object.remove("instances"),
        None => {
            return Err(ApiError::invalid_owned(
                path.to_owned(),
                "must be a JSON object",
            ))
        }
    };
    let mut service: ServiceEntry = entry(value, path)?;
    match instances {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for (j, instance) in list.into_iter().enumerate() {
                service
                    .instances
                    .push(entry(instance, &format!("{path}.instances[{j}]"))?);
            }
        }
        Some(_) => {
            return Err(ApiError::invalid_owned(
                format!("{path}.instances"),
                "must be an array",
            ))
        }
    }
    Ok(service)
}

/// One write of the plan, and where in the document it comes from.
struct Step {
    path: String,
    op: Op,
}

/// The plan: every write the document needs, in order (namespaces,
/// services, instances, configs), already applied to a scratch copy of
/// the registry. A write that would change nothing is left out, so
/// importing the same document twice writes nothing the second time.
struct Planner {
    scratch: Registry,
    now: Millis,
    steps: Vec<Step>,
}

impl Planner {
    /// Applies `op` to the scratch copy; keeps it if it changed anything.
    fn step(&mut self, path: String, op: Op) -> Result<(), ApiError> {
        let changes = self
            .scratch
            .apply(&Command::new(self.now, op.clone()))
            .map_err(|e| located(&path, e))?;
        if !changes.is_empty() {
            self.steps.push(Step { path, op });
        }
        Ok(())
    }
}

fn plan(node: &Node, parsed: &Parsed) -> Result<Vec<Step>, ApiError> {
    let (snapshot, mut options) = {
        let registry = node.registry();
        (registry.snapshot(), registry.options().clone())
    };
    // The scratch copy answers nobody's watch.
    options.change_log_capacity = 0;
    let mut planner = Planner {
        scratch: Registry::restore(snapshot, options.clone()),
        now: node.now(),
        steps: Vec::new(),
    };
    plan_namespaces(&mut planner, &parsed.namespaces)?;
    plan_services(&mut planner, &options, &parsed.services)?;
    plan_configs(&mut planner, &parsed.configs)?;
    Ok(planner.steps)
}

fn plan_namespaces(planner: &mut Planner, entries: &[NamespaceEntry]) -> Result<(), ApiError> {
    let mut seen: BTreeMap<NamespaceId, usize> = BTreeMap::new();
    for (i, ns) in entries.iter().enumerate() {
        let path = format!("namespaces[{i}]");
        let id = NamespaceId::parse(&ns.id).map_err(|e| located(&path, e))?;
        if let Some(first) = seen.insert(id.clone(), i) {
            return Err(duplicate(&path, &format!("namespaces[{first}]")));
        }
        let explicit = planner
            .scratch
            .namespaces()
            .iter()
            .any(|n| n.id == id && n.explicit);
        let (namespace, name, description) = (id, ns.name.clone(), ns.description.clone());
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
        planner.step(path, op)?;
    }
    Ok(())
}

fn plan_services(
    planner: &mut Planner,
    options: &understudy_core::RegistryOptions,
    entries: &[ServiceEntry],
) -> Result<(), ApiError> {
    let mut seen: BTreeMap<ServiceKey, usize> = BTreeMap::new();
    // Metadata first, then instances, as a provider would.
    let mut registrations: Vec<(String, ServiceKey, Vec<InstanceSpec>)> = Vec::new();
    for (i, service) in entries.iter().enumerate() {
        let path = format!("services[{i}]");
        let key = ServiceKey::parse(&service.namespace, &service.group, &service.name)
            .map_err(|e| located(&path, e))?;
        if let Some(first) = seen.insert(key.clone(), i) {
            return Err(duplicate(&path, &format!("services[{first}]")));
        }
        let kind = ServiceKind::from(service.kind);
        if let Some(existing) = planner.scratch.service(&key) {
            if existing.kind() != kind {
                return Err(ApiError::conflict(
                    path.clone(),
                    format!(
                        "{path}: service {key} is {} here; the document has it {kind}",
                        existing.kind()
                    ),
                ));
            }
        }
        if kind.is_ephemeral() && !service.instances.is_empty() {
            return Err(ApiError::invalid_owned(
                format!("{path}.instances"),
                "an ephemeral service's instances are not imported: their owners register them again",
            ));
        }
        if let Some(meta) = &service.meta {
            let meta_path = format!("{path}.meta");
            // The service API's selector rule, on the selector's JSON.
            let selector_path = format!("{meta_path}.selector");
            let selector = serde_json::to_string(&meta.selector)
                .map_err(|e| ApiError::invalid_owned(selector_path.clone(), e.to_string()))
                .and_then(|raw| {
                    SelectorJson::parse(&raw)
                        .map_err(|e| ApiError::invalid_owned(selector_path, e.reason))
                })?;
            let meta = ServiceMeta {
                protect_threshold: meta.protect_threshold,
                metadata: meta.metadata.clone(),
                selector,
            };
            let op = if planner.scratch.service(&key).is_some() {
                Op::UpdateService {
                    service: key.clone(),
                    patch: ServiceMetaPatch {
                        protect_threshold: Some(meta.protect_threshold),
                        metadata: Some(meta.metadata),
                        selector: Some(meta.selector),
                    },
                }
            } else {
                Op::CreateService {
                    service: key.clone(),
                    kind,
                    meta,
                }
            };
            planner.step(meta_path, op)?;
        }
        let mut specs = Vec::with_capacity(service.instances.len());
        let mut keys: BTreeMap<InstanceKey, usize> = BTreeMap::new();
        for (j, instance) in service.instances.iter().enumerate() {
            let instance_path = format!("{path}.instances[{j}]");
            let spec = instance_spec(options, &key, instance, &instance_path)?;
            if let Some(first) = keys.insert(spec.key(), j) {
                return Err(duplicate(
                    &instance_path,
                    &format!("{path}.instances[{first}]"),
                ));
            }
            specs.push(spec);
        }
        registrations.push((path, key, specs));
    }
    for (path, key, specs) in registrations {
        plan_registrations(planner, &path, &key, specs)?;
    }
    Ok(())
}

/// Registers a service's instances, one registration per owner (a
/// persistent instance's owner is its `ip:port`). An owner's instances
/// already here and not in the document are registered with it, since a
/// registration replaces the owner's whole entry and an import only adds.
fn plan_registrations(
    planner: &mut Planner,
    path: &str,
    key: &ServiceKey,
    specs: Vec<InstanceSpec>,
) -> Result<(), ApiError> {
    let mut by_owner: BTreeMap<(String, u16), Vec<InstanceSpec>> = BTreeMap::new();
    for spec in specs {
        by_owner
            .entry((spec.ip.clone(), spec.port))
            .or_default()
            .push(spec);
    }
    for ((ip, port), mut instances) in by_owner {
        let owner = Owner::Persistent { ip, port };
        let listed: BTreeSet<InstanceKey> = instances.iter().map(InstanceSpec::key).collect();
        if let Some(service) = planner.scratch.service(key) {
            instances.extend(
                service
                    .instances()
                    .filter(|i| i.owner == owner && !listed.contains(&i.key()))
                    .map(spec_of),
            );
        }
        let op = Op::Register {
            service: key.clone(),
            owner,
            instances,
        };
        // Each instance was checked on its own already: an error here
        // concerns the batch (its size, the service's kind).
        planner.step(path.to_owned(), op)?;
    }
    Ok(())
}

/// The spec that registers `instance` again as it is.
fn spec_of(instance: &Instance) -> InstanceSpec {
    InstanceSpec {
        instance_id: Some(instance.instance_id.clone()),
        ip: instance.ip.clone(),
        port: instance.port,
        weight: instance.weight,
        healthy: instance.healthy,
        enabled: instance.enabled,
        cluster: instance.cluster.clone(),
        metadata: instance.metadata.clone(),
    }
}

/// Builds and checks one instance with the core's rules, by registering it
/// alone into an empty registry under the same options.
fn instance_spec(
    options: &understudy_core::RegistryOptions,
    service: &ServiceKey,
    entry: &InstanceEntry,
    path: &str,
) -> Result<InstanceSpec, ApiError> {
    let port = u16::try_from(entry.port).map_err(|_| {
        ApiError::invalid_owned(
            format!("{path}.port"),
            format!("must be between 0 and 65535, got {}", entry.port),
        )
    })?;
    let cluster = ClusterName::parse(&entry.cluster).map_err(|e| located(path, e))?;
    let spec = InstanceSpec {
        instance_id: entry.instance_id.clone(),
        ip: entry.ip.clone(),
        port,
        weight: entry.weight,
        healthy: entry.healthy,
        enabled: entry.enabled,
        cluster,
        metadata: entry.metadata.clone(),
    };
    let mut probe = Registry::new(options.clone());
    probe
        .apply(&Command::new(
            0,
            Op::Register {
                service: service.clone(),
                owner: Owner::Persistent {
                    ip: spec.ip.clone(),
                    port,
                },
                instances: vec![spec.clone()],
            },
        ))
        .map_err(|e| located(path, e))?;
    Ok(spec)
}

fn plan_configs(planner: &mut Planner, entries: &[ConfigEntry]) -> Result<(), ApiError> {
    let mut seen: BTreeMap<ConfigKey, usize> = BTreeMap::new();
    for (i, config) in entries.iter().enumerate() {
        let path = format!("configs[{i}]");
        let key = ConfigKey::parse(&config.namespace, &config.group, &config.data_id)
            .map_err(|e| located(&path, e))?;
        if let Some(first) = seen.insert(key.clone(), i) {
            return Err(duplicate(&path, &format!("configs[{first}]")));
        }
        let before = planner.scratch.config(&key);
        let spec = ConfigSpec {
            content: config.content.clone(),
            kind: config.kind.clone(),
            app_name: config.app_name.clone(),
            desc: config.desc.clone(),
            tags: config.tags.clone(),
            encrypted_data_key: config.encrypted_data_key.clone(),
        };
        let op = Op::PublishConfig {
            key: key.clone(),
            spec,
            cas_md5: None,
        };
        // A publish always stamps a new time, so compare what it stores.
        planner.step(path, op)?;
        let after = planner.scratch.config(&key);
        if let (Some(before), Some(after)) = (before, after) {
            let unchanged = ConfigItem {
                last_modified: before.last_modified,
                ..ConfigItem::clone(&after)
            } == *before;
            if unchanged {
                planner.steps.pop();
            }
        }
    }
    Ok(())
}

/// Runs the plan. The document was checked against this node's registry;
/// a write that fails now met a concurrent change or an unavailable
/// cluster, and importing the same document again finishes the job.
async fn write(node: &Node, steps: Vec<Step>) -> Result<Imported, ApiError> {
    let total = steps.len();
    let mut imported = Imported::default();
    for (done, step) in steps.into_iter().enumerate() {
        match node.propose(step.op).await {
            Ok(applied) => {
                for change in &applied.changes {
                    imported.count(&change.event);
                }
            }
            Err(crate::node::ProposeError::Rejected(e)) => {
                return Err(ApiError::conflict(
                    step.path.clone(),
                    format!(
                        "{}: {e} (the registry changed during the import; {done} of {total} writes were applied, importing the document again completes it)",
                        step.path
                    ),
                ))
            }
            Err(e) => {
                return Err(ApiError::unavailable(format!(
                    "{e} ({done} of {total} writes were applied; importing the document again completes it)"
                )))
            }
        }
    }
    Ok(imported)
}

/// A core error about the item at `path`, naming the document's key.
fn located(path: &str, error: CoreError) -> ApiError {
    match error {
        CoreError::Invalid { field, reason } => {
            let key = match field {
                "namespaceId" | "namespace" if path.starts_with("namespaces") => "id",
                "namespaceId" | "tenant" => "namespace",
                "groupName" => "group",
                "serviceName" | "namespaceName" => "name",
                "namespaceDesc" => "description",
                "clusterName" => "cluster",
                other => other,
            };
            ApiError::invalid_owned(format!("{path}.{key}"), reason)
        }
        CoreError::KindMismatch { .. } => {
            ApiError::conflict(path.to_owned(), format!("{path}: {error}"))
        }
        other => ApiError::invalid_owned(path.to_owned(), other.to_string()),
    }
}

fn duplicate(path: &str, first: &str) -> ApiError {
    ApiError::invalid_owned(path.to_owned(), format!("the same item as {first}"))
}
