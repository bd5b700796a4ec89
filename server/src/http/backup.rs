//! Backup, restore and migration: `GET /understudy/v1/export` writes the
//! explicitly created namespaces, the services with their persistent
//! instances and the config items as one JSON document
//! (`understudy_proto::backup`), and `POST /understudy/v1/import` merges
//! such a document into the registry. This adapter reads the document,
//! turns its text into the core's typed items (naming the key of any that
//! cannot be), asks the core for the plan (`understudy_core::plan_import`:
//! checked against a copy of the registry, so a document the core would
//! refuse anywhere is refused as a whole, naming the item, before the first
//! write), and writes it in log entries of at most [`IMPORT_BATCH`]
//! commands. Ephemeral instances are only counted: their connections and
//! beats register them again.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use understudy_core::{
    plan_import, ClusterName, ConfigImport, ConfigKey, ConfigSpec, Error as CoreError, Event,
    ImportError, ImportItems, Instance, InstanceImport, InstanceSpec, NamespaceId, NamespaceImport,
    Registry, ServiceImport, ServiceKey, ServiceKind, ServiceMeta, Step,
};
use understudy_proto::backup::{
    ConfigEntry, Document, DocumentError, InstanceEntry, Items, MetaEntry, NamespaceEntry,
    ServiceEntry, FORMAT, VERSION,
};
use understudy_proto::nacos::SelectorJson;

use super::error::ApiError;
use crate::node::Node;

/// Most writes of an import in one log entry: each entry reaches the log
/// whole or not at all.
const IMPORT_BATCH: usize = 256;

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
            kind: service.kind().into(),
            meta: service.meta().map(|meta| MetaEntry {
                protect_threshold: meta.protect_threshold,
                metadata: meta.metadata.clone(),
                selector: SelectorJson::from(&meta.selector),
            }),
            instances: persistent
                .into_iter()
                .map(|i| InstanceEntry::of(key, i))
                .collect(),
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
        let items = Document::read(&body).map_err(|e| match e {
            DocumentError::Missing(key) => ApiError::missing(key),
            DocumentError::Invalid { path, reason } => ApiError::invalid_owned(path, reason),
        })?;
        let items = typed(items)?;
        let scratch = {
            let registry = node.registry();
            let (snapshot, mut options) = (registry.snapshot(), registry.options().clone());
            // The scratch copy answers nobody's watch.
            options.change_log_capacity = 0;
            (snapshot, options)
        };
        let scratch = Registry::restore(scratch.0, scratch.1);
        let steps = plan_import(scratch, node.now(), &items).map_err(|e| match e {
            ImportError::Refused { path, error } => located(&path, error),
            ImportError::KindConflict { ref path, .. } => {
                ApiError::conflict(path.clone(), e.to_string())
            }
            ImportError::Duplicate { .. } | ImportError::EphemeralInstances { .. } => {
                ApiError::invalid_owned(e.path().to_owned(), e.to_string())
            }
        })?;
        write(&node, steps).await
    }
    .await;
    match imported {
        Ok(imported) => Json(imported).into_response(),
        Err(e) => e.v2(),
    }
}

/// The document's items as the core's typed values.
fn typed(items: Items) -> Result<ImportItems, ApiError> {
    let namespaces = items
        .namespaces
        .into_iter()
        .enumerate()
        .map(|(i, ns)| namespace(ns, format!("namespaces[{i}]")))
        .collect::<Result<_, _>>()?;
    let services = items
        .services
        .into_iter()
        .enumerate()
        .map(|(i, service)| service_item(service, format!("services[{i}]")))
        .collect::<Result<_, _>>()?;
    let configs = items
        .configs
        .into_iter()
        .enumerate()
        .map(|(i, config)| config_item(config, format!("configs[{i}]")))
        .collect::<Result<_, _>>()?;
    Ok(ImportItems {
        namespaces,
        services,
        configs,
    })
}

fn namespace(ns: NamespaceEntry, path: String) -> Result<NamespaceImport, ApiError> {
    Ok(NamespaceImport {
        id: NamespaceId::parse(&ns.id).map_err(|e| located(&path, e))?,
        name: ns.name,
        description: ns.description,
        path,
    })
}

fn service_item(service: ServiceEntry, path: String) -> Result<ServiceImport, ApiError> {
    let key = ServiceKey::parse(&service.namespace, &service.group, &service.name)
        .map_err(|e| located(&path, e))?;
    let meta = service
        .meta
        .map(|meta| service_meta(meta, &format!("{path}.meta")))
        .transpose()?;
    let instances = service
        .instances
        .into_iter()
        .enumerate()
        .map(|(j, instance)| instance_item(instance, format!("{path}.instances[{j}]")))
        .collect::<Result<_, _>>()?;
    Ok(ServiceImport {
        key,
        kind: ServiceKind::from(service.kind),
        meta,
        instances,
        path,
    })
}

/// The service API's selector rule, on the selector's JSON.
fn service_meta(meta: MetaEntry, path: &str) -> Result<ServiceMeta, ApiError> {
    let selector_path = format!("{path}.selector");
    let selector = serde_json::to_string(&meta.selector)
        .map_err(|e| ApiError::invalid_owned(selector_path.clone(), e.to_string()))
        .and_then(|raw| {
            SelectorJson::parse(&raw).map_err(|e| ApiError::invalid_owned(selector_path, e.reason))
        })?;
    Ok(ServiceMeta {
        protect_threshold: meta.protect_threshold,
        metadata: meta.metadata,
        selector,
    })
}

fn instance_item(entry: InstanceEntry, path: String) -> Result<InstanceImport, ApiError> {
    let port = u16::try_from(entry.port).map_err(|_| {
        ApiError::invalid_owned(
            format!("{path}.port"),
            format!("must be between 0 and 65535, got {}", entry.port),
        )
    })?;
    let cluster = ClusterName::parse(&entry.cluster).map_err(|e| located(&path, e))?;
    Ok(InstanceImport {
        spec: InstanceSpec {
            instance_id: entry.instance_id,
            ip: entry.ip,
            port,
            weight: entry.weight,
            healthy: entry.healthy,
            enabled: entry.enabled,
            cluster,
            metadata: entry.metadata,
        },
        path,
    })
}

fn config_item(config: ConfigEntry, path: String) -> Result<ConfigImport, ApiError> {
    Ok(ConfigImport {
        key: ConfigKey::parse(&config.namespace, &config.group, &config.data_id)
            .map_err(|e| located(&path, e))?,
        spec: ConfigSpec {
            content: config.content,
            kind: config.kind,
            app_name: config.app_name,
            desc: config.desc,
            tags: config.tags,
            encrypted_data_key: config.encrypted_data_key,
        },
        path,
    })
}

/// Writes the plan, [`IMPORT_BATCH`] commands to a log entry. The document
/// was checked against this node's registry; a write refused now met a
/// concurrent change, and one that fails met an unavailable cluster:
/// importing the same document again finishes the job.
async fn write(node: &Node, steps: Vec<Step>) -> Result<Imported, ApiError> {
    let total = steps.len();
    let mut imported = Imported::default();
    let mut done = 0;
    let mut steps = steps.into_iter().peekable();
    while steps.peek().is_some() {
        let chunk: Vec<Step> = steps.by_ref().take(IMPORT_BATCH).collect();
        let (paths, ops): (Vec<String>, Vec<_>) = chunk.into_iter().map(|s| (s.path, s.op)).unzip();
        let results = match node.propose_all(ops).await {
            Ok(results) => results,
            Err(e) => {
                return Err(ApiError::unavailable(format!(
                    "{e} ({done} of {total} writes were applied; importing the document again completes it)"
                )))
            }
        };
        let mut refused = None;
        for (path, result) in paths.into_iter().zip(results) {
            match result {
                Ok(applied) => {
                    done += 1;
                    for change in &applied.changes {
                        imported.count(&change.event);
                    }
                }
                Err(e) => {
                    refused.get_or_insert((path, e));
                }
            }
        }
        if let Some((path, e)) = refused {
            return Err(ApiError::conflict(
                path.clone(),
                format!(
                    "{path}: {e} (the registry changed during the import; {done} of {total} writes were applied, importing the document again completes it)"
                ),
            ));
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
