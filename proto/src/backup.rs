//! The export document (`GET /understudy/v1/export`, read back by
//! `POST /understudy/v1/import`): the explicitly created namespaces, the
//! services with their persistent instances, and the config items, as one
//! JSON document. [`Document::read`] reads one item by item, so that an
//! error names the item (`services[3].instances[0].port`); what the items
//! mean to the registry, and the import plan, are the core's
//! (`understudy_core::import`).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;
use understudy_core::{Instance, Metadata, Millis, ServiceKey, ServiceKind};

use crate::clip;
use crate::nacos::SelectorJson;

/// The document's `format`.
pub const FORMAT: &str = "understudy-export";
/// The document `version` this server writes and reads.
pub const VERSION: u64 = 1;
/// The top-level keys of a document.
pub const KEYS: &[&str] = &[
    "format",
    "version",
    "exportedAt",
    "namespaces",
    "services",
    "configs",
    "ephemeralInstances",
];

/// A whole export.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    /// Always [`FORMAT`].
    pub format: &'static str,
    /// Always [`VERSION`].
    pub version: u64,
    /// When it was written, epoch ms.
    pub exported_at: Millis,
    /// Explicitly created namespaces.
    pub namespaces: Vec<NamespaceEntry>,
    /// Services with their persistent instances.
    pub services: Vec<ServiceEntry>,
    /// Config items.
    pub configs: Vec<ConfigEntry>,
    /// Ephemeral instances held when exporting; informational.
    pub ephemeral_instances: usize,
}

/// An explicitly created namespace (the default one exists everywhere).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceEntry {
    /// Its id.
    pub id: String,
    /// Its display name.
    pub name: String,
    /// Its description.
    #[serde(default)]
    pub description: String,
}

/// A service's kind, as the document spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KindEntry {
    /// Instances kept alive by their connections or beats.
    Ephemeral,
    /// Instances kept until deregistered.
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

impl From<ServiceKind> for KindEntry {
    fn from(kind: ServiceKind) -> Self {
        match kind {
            ServiceKind::Ephemeral => KindEntry::Ephemeral,
            ServiceKind::Persistent => KindEntry::Persistent,
        }
    }
}

/// A service: created through the service API (`meta` set), or created by
/// the registration of its persistent instances (`meta` null).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceEntry {
    /// Its namespace; empty is the default one.
    #[serde(default)]
    pub namespace: String,
    /// Its group; empty is the default one.
    #[serde(default)]
    pub group: String,
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: KindEntry,
    /// What the service API set on it, if it was created through it.
    #[serde(default)]
    pub meta: Option<MetaEntry>,
    /// Persistent instances only. Read item by item, so that an error
    /// names the instance.
    #[serde(default, skip_deserializing)]
    pub instances: Vec<InstanceEntry>,
}

/// What the service API sets on a service.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetaEntry {
    /// The protect threshold.
    #[serde(default)]
    pub protect_threshold: f32,
    /// The service's metadata.
    #[serde(default)]
    pub metadata: Metadata,
    /// Its selector, as Nacos writes it.
    #[serde(default = "no_selector")]
    pub selector: SelectorJson,
}

fn no_selector() -> SelectorJson {
    SelectorJson::from(&understudy_core::Selector::default())
}

/// A persistent instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceEntry {
    /// Its id, if it has its own.
    #[serde(default)]
    pub instance_id: Option<String>,
    /// Its address.
    pub ip: String,
    /// Its port; wider than a port, so that an out-of-range one is
    /// refused by name.
    pub port: i64,
    /// Its cluster; empty is the default one.
    #[serde(default)]
    pub cluster: String,
    /// Its weight.
    #[serde(default = "one")]
    pub weight: f64,
    /// Whether it takes traffic.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Whether it is healthy.
    #[serde(default = "yes")]
    pub healthy: bool,
    /// Its metadata.
    #[serde(default)]
    pub metadata: Metadata,
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

impl InstanceEntry {
    /// The entry of `instance`, an instance of `service`.
    pub fn of(service: &ServiceKey, instance: &Instance) -> Self {
        Self {
            instance_id: Some(instance.instance_id(service).into_owned()),
            ip: instance.ip.to_string(),
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
pub struct ConfigEntry {
    /// Its tenant; empty is the default namespace.
    #[serde(default)]
    pub namespace: String,
    /// Its group.
    pub group: String,
    /// Its data id.
    pub data_id: String,
    /// Its content.
    pub content: String,
    /// Its content type.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// The application it belongs to.
    #[serde(default)]
    pub app_name: String,
    /// Its description.
    #[serde(default)]
    pub desc: String,
    /// Its tags.
    #[serde(default)]
    pub tags: String,
    /// The key its content is encrypted with, if it is.
    #[serde(default)]
    pub encrypted_data_key: String,
}

/// A document that cannot be read, naming where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DocumentError {
    /// A required top-level key is absent.
    #[error("'{0}' is required")]
    Missing(&'static str),
    /// A key or item is wrong; `path` names it (`body` for the whole).
    #[error("{path}: {reason}")]
    Invalid {
        /// Where: `version`, `services[2].instances[0]`, ...
        path: String,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(path: impl Into<String>, reason: impl Into<String>) -> DocumentError {
    DocumentError::Invalid {
        path: path.into(),
        reason: reason.into(),
    }
}

/// A document as read for an import: its items.
#[derive(Debug, Clone, Default)]
pub struct Items {
    /// The namespaces, in document order.
    pub namespaces: Vec<NamespaceEntry>,
    /// The services, each with its instances.
    pub services: Vec<ServiceEntry>,
    /// The config items.
    pub configs: Vec<ConfigEntry>,
}

impl Document {
    /// Reads a document's items, one by one, so that an error names the
    /// item; unknown keys are refused.
    pub fn read(body: &[u8]) -> Result<Items, DocumentError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| invalid("body", format!("not a JSON document: {e}")))?;
        let Value::Object(mut top) = value else {
            return Err(invalid("body", "must be a JSON object"));
        };
        if let Some(unknown) = top.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(invalid(
                clip(unknown),
                format!("unknown key; a document has {}", KEYS.join(", ")),
            ));
        }
        match top.get("format") {
            None => return Err(DocumentError::Missing("format")),
            Some(Value::String(f)) if f == FORMAT => {}
            Some(other) => {
                return Err(invalid(
                    "format",
                    format!("must be \"{FORMAT}\", got {}", clip(&other.to_string())),
                ))
            }
        }
        match top.get("version") {
            None => return Err(DocumentError::Missing("version")),
            Some(v) if v.as_u64() == Some(VERSION) => {}
            Some(other) => {
                return Err(invalid(
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
        Ok(Items {
            namespaces,
            services,
            configs,
        })
    }
}

/// The array under `key`; absent means empty.
fn items(top: &mut Map<String, Value>, key: &'static str) -> Result<Vec<Value>, DocumentError> {
    match top.remove(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(invalid(key, "must be an array")),
    }
}

fn entry<T: DeserializeOwned>(value: Value, path: &str) -> Result<T, DocumentError> {
    serde_json::from_value(value).map_err(|e| invalid(path, e.to_string()))
}

fn service_entry(mut value: Value, path: &str) -> Result<ServiceEntry, DocumentError> {
    let instances = match value.as_object_mut() {
        Some(object) => object.remove("instances"),
        None => return Err(invalid(path, "must be a JSON object")),
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
        Some(_) => return Err(invalid(format!("{path}.instances"), "must be an array")),
    }
    Ok(service)
}
