//! Nacos JSON bodies of the naming HTTP API, field for field as Nacos 2.x
//! writes them (see the protocol reference, §2, §7, §8, §10, §11). Output
//! types never serialize `null`: absent values are omitted or empty.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_core::{Instance, Metadata, Millis, Service, ServiceKey};

use crate::DecodeError;

/// Default `cacheMillis` of a ServiceInfo.
pub const DEFAULT_CACHE_MILLIS: u64 = 10_000;

/// An instance as Nacos renders it in lists and pushes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceJson {
    /// Empty (and left out) in v2 and v3 HTTP lists, as Nacos renders them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_id: String,
    pub ip: String,
    pub port: u16,
    pub weight: f64,
    pub healthy: bool,
    pub enabled: bool,
    pub ephemeral: bool,
    pub cluster_name: String,
    /// Always the grouped name.
    pub service_name: String,
    pub metadata: Metadata,
    pub instance_heart_beat_interval: u64,
    pub instance_heart_beat_time_out: u64,
    pub ip_delete_timeout: u64,
    /// Nacos' getter: "simple" while the metadata is empty, else the
    /// metadata's `instanceIdGenerator`, left out when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id_generator: Option<String>,
}

impl InstanceJson {
    /// Renders a stored instance of `service`.
    pub fn new(service: &ServiceKey, instance: &Instance) -> Self {
        let timeouts = instance.timeouts();
        Self {
            instance_id: instance.instance_id(service).into_owned(),
            ip: instance.ip.to_string(),
            port: instance.port,
            weight: instance.weight,
            healthy: instance.healthy,
            enabled: instance.enabled,
            ephemeral: instance.kind.is_ephemeral(),
            cluster_name: instance.cluster.to_string(),
            service_name: service.grouped_name(),
            metadata: instance.metadata.clone(),
            instance_heart_beat_interval: timeouts.beat_interval,
            instance_heart_beat_time_out: timeouts.unhealthy_after,
            ip_delete_timeout: timeouts.delete_after,
            instance_id_generator: instance_id_generator(&instance.metadata),
        }
    }

    /// As the v2 and v3 HTTP APIs render it: without its id.
    pub fn without_id(mut self) -> Self {
        self.instance_id.clear();
        self
    }
}

/// The id generator Nacos' `Instance.getInstanceIdGenerator` reports.
fn instance_id_generator(metadata: &Metadata) -> Option<String> {
    if metadata.is_empty() {
        return Some("simple".to_owned());
    }
    metadata.get("instanceIdGenerator").map(str::to_owned)
}

/// The object clients cache and receive: a service's selected instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceInfo {
    /// Grouped on HTTP lists, plain on gRPC.
    pub name: String,
    pub group_name: String,
    /// The caller's cluster filter, echoed.
    pub clusters: String,
    pub cache_millis: u64,
    pub hosts: Vec<InstanceJson>,
    pub last_ref_time: Millis,
    pub checksum: String,
    #[serde(rename = "allIPs")]
    pub all_ips_upper: bool,
    pub all_ips: bool,
    pub reach_protection_threshold: bool,
    pub valid: bool,
}

impl ServiceInfo {
    /// As the v2 HTTP list renders it: hosts without their ids.
    pub fn without_instance_ids(mut self) -> Self {
        self.hosts = self
            .hosts
            .into_iter()
            .map(InstanceJson::without_id)
            .collect();
        self
    }

    /// A ServiceInfo for `service` with the given hosts.
    pub fn new(
        name: String,
        service: &ServiceKey,
        clusters: &str,
        hosts: Vec<InstanceJson>,
        reach_protection_threshold: bool,
        last_ref_time: Millis,
    ) -> Self {
        Self {
            name,
            group_name: service.group.to_string(),
            clusters: clusters.to_owned(),
            cache_millis: DEFAULT_CACHE_MILLIS,
            hosts,
            last_ref_time,
            checksum: String::new(),
            all_ips_upper: false,
            all_ips: false,
            reach_protection_threshold,
            valid: true,
        }
    }
}

/// How a ServiceInfo names its service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameStyle {
    /// `group@@service`: HTTP lists and UDP pushes ("for 1.x SDKs").
    Grouped,
    /// `service`: gRPC answers and pushes.
    Plain,
}

/// Which instances of a service a ServiceInfo shows.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The cluster filter as the caller wrote it (echoed).
    pub clusters_raw: &'a str,
    /// The parsed filter.
    pub clusters: &'a [understudy_core::ClusterName],
    /// Drop unhealthy instances.
    pub healthy_only: bool,
}

impl ServiceInfo {
    /// Selects from `service` (which may not exist) as Nacos does
    /// (enabled instances only, protect threshold applied) and renders.
    pub fn render(
        key: &ServiceKey,
        service: Option<&Service>,
        style: NameStyle,
        view: View<'_>,
        last_ref_time: Millis,
    ) -> Self {
        let (hosts, reach_protection_threshold) = select_hosts(key, service, view);
        let name = match style {
            NameStyle::Grouped => key.grouped_name(),
            NameStyle::Plain => key.name.to_string(),
        };
        Self::new(
            name,
            key,
            view.clusters_raw,
            hosts,
            reach_protection_threshold,
            last_ref_time,
        )
    }
}

/// Selects from `service` (which may not exist) as Nacos does: enabled
/// instances only, protect threshold applied; the hosts and whether the
/// threshold was reached.
fn select_hosts(
    key: &ServiceKey,
    service: Option<&Service>,
    view: View<'_>,
) -> (Vec<InstanceJson>, bool) {
    let selected = understudy_core::select(
        service,
        &understudy_core::Selection {
            clusters: view.clusters,
            healthy_only: view.healthy_only,
            enabled_only: true,
        },
    );
    let hosts = selected
        .instances
        .iter()
        .map(|i| InstanceJson::new(key, i))
        .collect();
    (hosts, selected.reach_protection_threshold)
}

/// A selection's hosts already written as JSON, with the flag the
/// selection set: the costly part of a ServiceInfo, rendered once per
/// service revision and view and shared by every answer and push of it.
#[derive(Debug)]
pub struct Hosts {
    /// The `hosts` array.
    pub json: Box<serde_json::value::RawValue>,
    /// Whether the protect threshold was reached.
    pub reach_protection_threshold: bool,
}

impl Hosts {
    /// Selects from `service` as [`ServiceInfo::render`] does and writes
    /// the hosts.
    pub fn render(key: &ServiceKey, service: Option<&Service>, view: View<'_>) -> Self {
        let (hosts, reach_protection_threshold) = select_hosts(key, service, view);
        let json = serde_json::value::to_raw_value(&hosts).expect("instances always serialize");
        Self {
            json,
            reach_protection_threshold,
        }
    }
}

/// A ServiceInfo over shared, pre-rendered [`Hosts`]: serializes exactly
/// as the [`ServiceInfo`] that [`ServiceInfo::render`] returns.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceInfoRef<'a> {
    name: std::borrow::Cow<'a, str>,
    group_name: &'a str,
    clusters: &'a str,
    cache_millis: u64,
    hosts: &'a serde_json::value::RawValue,
    last_ref_time: Millis,
    checksum: &'static str,
    #[serde(rename = "allIPs")]
    all_ips_upper: bool,
    all_ips: bool,
    reach_protection_threshold: bool,
    valid: bool,
}

impl<'a> ServiceInfoRef<'a> {
    /// The ServiceInfo of `key` with `hosts`, as `style` names it.
    pub fn new(
        key: &'a ServiceKey,
        style: NameStyle,
        clusters_raw: &'a str,
        hosts: &'a Hosts,
        last_ref_time: Millis,
    ) -> Self {
        let name = match style {
            NameStyle::Grouped => std::borrow::Cow::Owned(key.grouped_name()),
            NameStyle::Plain => std::borrow::Cow::Borrowed(key.name.as_str()),
        };
        Self {
            name,
            group_name: key.group.as_str(),
            clusters: clusters_raw,
            cache_millis: DEFAULT_CACHE_MILLIS,
            hosts: &hosts.json,
            last_ref_time,
            checksum: "",
            all_ips_upper: false,
            all_ips: false,
            reach_protection_threshold: hosts.reach_protection_threshold,
            valid: true,
        }
    }
}

/// `GET /nacos/v1/ns/instance` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceDetailV1 {
    pub service: String,
    pub ip: String,
    pub port: u16,
    pub cluster_name: String,
    pub weight: f64,
    pub healthy: bool,
    pub instance_id: String,
    pub metadata: Metadata,
}

/// `GET /nacos/v2/ns/instance` answer (`data`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceDetailV2 {
    pub service_name: String,
    pub ip: String,
    pub port: u16,
    pub cluster_name: String,
    pub weight: f64,
    pub healthy: bool,
    /// Always `null`: Nacos' v2 detail leaves it unset.
    pub instance_id: Option<String>,
    pub metadata: Metadata,
}

impl InstanceDetailV1 {
    /// Renders a stored instance.
    pub fn new(service: &ServiceKey, instance: &Instance) -> Self {
        Self {
            service: service.grouped_name(),
            ip: instance.ip.to_string(),
            port: instance.port,
            cluster_name: instance.cluster.to_string(),
            weight: instance.weight,
            healthy: instance.healthy,
            instance_id: instance.instance_id(service).into_owned(),
            metadata: instance.metadata.clone(),
        }
    }
}

impl From<InstanceDetailV1> for InstanceDetailV2 {
    fn from(v1: InstanceDetailV1) -> Self {
        Self {
            service_name: v1.service,
            ip: v1.ip,
            port: v1.port,
            cluster_name: v1.cluster_name,
            weight: v1.weight,
            healthy: v1.healthy,
            instance_id: None,
            metadata: v1.metadata,
        }
    }
}

/// The `beat` parameter of `PUT /instance/beat`, as 1.x clients send it.
/// Lenient: unknown fields are ignored, `null` means absent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BeatInfo {
    pub ip: Option<String>,
    pub port: Option<i64>,
    pub service_name: Option<String>,
    pub cluster: Option<String>,
    pub weight: Option<f64>,
    pub metadata: Option<BTreeMap<String, Value>>,
    pub scheduled: Option<bool>,
    pub ephemeral: Option<bool>,
}

impl BeatInfo {
    /// Parses the `beat` parameter.
    pub fn parse(raw: &str) -> Result<Self, DecodeError> {
        serde_json::from_str(raw)
            .map_err(|e| DecodeError::new("beat", format!("not a beat JSON object: {e}")))
    }

    /// The beat's metadata with every value as a string.
    pub fn metadata(&self) -> Metadata {
        self.metadata
            .iter()
            .flatten()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect()
    }
}

/// `PUT /instance/beat` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeatReply {
    pub client_beat_interval: u64,
    /// 10200 when the beat was taken; 20404 to make the client register.
    pub code: u32,
    pub light_beat_enabled: bool,
}

/// Beat answer code: the beat was taken.
pub const BEAT_OK: u32 = 10200;
/// Beat answer code: unknown instance, register again.
pub const BEAT_RESOURCE_NOT_FOUND: u32 = 20404;

/// Parses the HTTP `metadata` parameter: a JSON object, or the legacy
/// `k1=v1,k2=v2`. Blank means empty.
pub fn parse_metadata(raw: &str) -> Result<Metadata, DecodeError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Ok(Metadata::new());
    }
    if trimmed.starts_with('{') {
        let map: BTreeMap<String, Value> = serde_json::from_str(trimmed)
            .map_err(|e| DecodeError::new("metadata", format!("metadata format incorrect: {e}")))?;
        return map
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, s)),
                Value::Number(_) | Value::Bool(_) => Ok((k, v.to_string())),
                _ => Err(DecodeError::new(
                    "metadata",
                    format!("metadata format incorrect: value of '{k}' must be a string"),
                )),
            })
            .collect();
    }
    trimmed
        .split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
            _ => Err(DecodeError::new(
                "metadata",
                format!("metadata format incorrect: '{pair}' is not key=value"),
            )),
        })
        .collect()
}

/// Selector JSON (`{"contextType":"NONE","type":"none"}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectorJson {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expression: String,
    /// What Nacos' selector reads its context from: `NONE`, or `CMDB`
    /// for a label selector. Rendered only; never read.
    #[serde(
        rename = "contextType",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub context_type: String,
}

impl SelectorJson {
    /// Parses the `selector` parameter; blank means `none`.
    pub fn parse(raw: &str) -> Result<understudy_core::Selector, DecodeError> {
        if raw.trim().is_empty() {
            return Ok(understudy_core::Selector::default());
        }
        // Read as a JSON value first: Jackson writes a selector's `type`
        // twice (its type id and its property: the maintainer client sends
        // `{"type":"none","type":"none",...}`), and Nacos reads the last.
        let invalid = |why: String| DecodeError::new("selector", why);
        let value: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| invalid(format!("not a selector JSON object: {e}")))?;
        let json: SelectorJson = serde_json::from_value(value)
            .map_err(|e| invalid(format!("not a selector JSON object: {e}")))?;
        match json.kind.as_str() {
            "none" | "label" => Ok(understudy_core::Selector {
                kind: json.kind,
                expression: json.expression,
            }),
            other => Err(DecodeError::new(
                "selector",
                format!("type must be 'none' or 'label', got '{other}'"),
            )),
        }
    }
}

impl SelectorJson {
    /// As a service detail renders it, with its `contextType`.
    pub fn rendered(selector: &understudy_core::Selector) -> Self {
        let context_type = match selector.kind.as_str() {
            "label" => "CMDB",
            _ => "NONE",
        };
        Self {
            context_type: context_type.to_owned(),
            ..Self::from(selector)
        }
    }
}

impl From<&understudy_core::Selector> for SelectorJson {
    fn from(selector: &understudy_core::Selector) -> Self {
        Self {
            kind: selector.kind.clone(),
            expression: selector.expression.clone(),
            context_type: String::new(),
        }
    }
}

/// A cluster in a service detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterJson {
    pub name: String,
    pub health_checker: Value,
    pub metadata: Metadata,
}

impl ClusterJson {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            health_checker: serde_json::json!({"type": "TCP"}),
            metadata: Metadata::new(),
        }
    }
}

/// `GET /nacos/v1/ns/service` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDetailV1 {
    pub namespace_id: String,
    pub group_name: String,
    pub name: String,
    pub protect_threshold: f32,
    pub metadata: Metadata,
    pub selector: SelectorJson,
    pub clusters: Vec<ClusterJson>,
}

impl ServiceDetailV1 {
    /// Renders a service.
    pub fn new(service: &Service) -> Self {
        let meta = service.meta().cloned().unwrap_or_default();
        Self {
            namespace_id: service.key().namespace.to_string(),
            group_name: service.key().group.to_string(),
            name: service.key().name.to_string(),
            protect_threshold: meta.protect_threshold,
            metadata: meta.metadata,
            selector: SelectorJson::rendered(&meta.selector),
            clusters: service
                .clusters()
                .into_iter()
                .map(|c| ClusterJson::new(c.as_str()))
                .collect(),
        }
    }
}

/// `GET /nacos/v2/ns/service` answer (`data`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDetailV2 {
    pub namespace: String,
    pub service_name: String,
    pub group_name: String,
    pub cluster_map: BTreeMap<String, ClusterJson>,
    pub metadata: Metadata,
    pub protect_threshold: f32,
    pub selector: SelectorJson,
    pub ephemeral: bool,
}

impl ServiceDetailV2 {
    /// Renders a service: the v1 detail, reshaped.
    pub fn new(service: &Service) -> Self {
        let v1 = ServiceDetailV1::new(service);
        Self {
            namespace: v1.namespace_id,
            service_name: v1.name,
            group_name: v1.group_name,
            cluster_map: v1
                .clusters
                .into_iter()
                .map(|c| (c.name.clone(), c))
                .collect(),
            metadata: v1.metadata,
            protect_threshold: v1.protect_threshold,
            selector: v1.selector,
            ephemeral: service.kind().is_ephemeral(),
        }
    }
}

/// `GET /nacos/v1/ns/service/list` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceListV1 {
    pub count: usize,
    pub doms: Vec<String>,
}

/// `GET /nacos/v2/ns/service/list` answer (`data`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceListV2 {
    pub count: usize,
    pub services: Vec<String>,
}

/// The v2 `Result` envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NacosResult<T> {
    pub code: u32,
    pub message: String,
    pub data: T,
}

impl<T> NacosResult<T> {
    /// `{"code":0,"message":"success","data":...}`.
    pub fn success(data: T) -> Self {
        Self {
            code: 0,
            message: "success".to_owned(),
            data,
        }
    }
}

/// The v2 error codes used here, with their Nacos short texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    ParameterMissing,
    AccessDenied,
    ParameterValidateError,
    ResourceNotFound,
    ResourceConflict,
    ServiceNameError,
    WeightError,
    InstanceMetadataError,
    InstanceNotFound,
    InstanceError,
    ServiceAlreadyExist,
    ServiceNotExist,
    ServiceDeleteFailure,
    IllegalNamespace,
    NamespaceNotExist,
    NamespaceAlreadyExist,
    ServerError,
    /// An endpoint switched off for Nacos 3 compatibility (HTTP 410).
    ApiDeprecated,
    /// A function this server does not offer (understudy answers it with
    /// HTTP 501).
    ApiFunctionDisabled,
    /// No MCP server of that name or id.
    McpServerNotFound,
    /// The MCP server has no such version.
    McpServerVersionNotFound,
    /// No A2A agent of that name.
    AgentNotFound,
    /// The agent has no such version.
    AgentVersionNotFound,
}

impl ErrorCode {
    /// The numeric code.
    pub fn code(self) -> u32 {
        match self {
            ErrorCode::ParameterMissing => 10000,
            ErrorCode::AccessDenied => 10001,
            ErrorCode::ParameterValidateError => 20002,
            ErrorCode::ResourceNotFound => 20004,
            ErrorCode::ResourceConflict => 20005,
            ErrorCode::ServiceNameError => 21000,
            ErrorCode::WeightError => 21001,
            ErrorCode::InstanceMetadataError => 21002,
            ErrorCode::InstanceNotFound => 21003,
            ErrorCode::InstanceError => 21004,
            ErrorCode::ServiceAlreadyExist => 21007,
            ErrorCode::ServiceNotExist => 21008,
            ErrorCode::ServiceDeleteFailure => 21009,
            ErrorCode::IllegalNamespace => 22000,
            ErrorCode::NamespaceNotExist => 22001,
            ErrorCode::NamespaceAlreadyExist => 22002,
            ErrorCode::ServerError => 30000,
            ErrorCode::ApiDeprecated => 40000,
            ErrorCode::ApiFunctionDisabled => 40001,
            ErrorCode::McpServerNotFound => 50000,
            ErrorCode::McpServerVersionNotFound => 50001,
            ErrorCode::AgentNotFound => 50100,
            ErrorCode::AgentVersionNotFound => 50101,
        }
    }

    /// The short text Nacos puts in `message`.
    pub fn message(self) -> &'static str {
        match self {
            ErrorCode::ParameterMissing => "parameter missing",
            ErrorCode::AccessDenied => "access denied",
            ErrorCode::ParameterValidateError => "parameter validate error",
            ErrorCode::ResourceNotFound => "resource not found",
            ErrorCode::ResourceConflict => "resource conflict",
            ErrorCode::ServiceNameError => "service name error",
            ErrorCode::WeightError => "weight error",
            ErrorCode::InstanceMetadataError => "instance metadata error",
            ErrorCode::InstanceNotFound => "instance not found",
            ErrorCode::InstanceError => "instance error",
            ErrorCode::ServiceAlreadyExist => "service already exist",
            ErrorCode::ServiceNotExist => "service not exist",
            ErrorCode::ServiceDeleteFailure => "service delete failure",
            ErrorCode::IllegalNamespace => "illegal namespace",
            ErrorCode::NamespaceNotExist => "namespace not exist",
            ErrorCode::NamespaceAlreadyExist => "namespace already exist",
            ErrorCode::ServerError => "server error",
            ErrorCode::ApiDeprecated => "API deprecated.",
            ErrorCode::ApiFunctionDisabled => "API function disabled.",
            ErrorCode::McpServerNotFound => "MCP server not found",
            ErrorCode::McpServerVersionNotFound => "MCP server version not found",
            ErrorCode::AgentNotFound => "Agent not found",
            ErrorCode::AgentVersionNotFound => "Agent version not found",
        }
    }
}

/// A namespace in `GET /nacos/v1/console/namespaces`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceJson {
    /// `""` for the default namespace, as Nacos 2.x lists it.
    pub namespace: String,
    pub namespace_show_name: String,
    pub namespace_desc: String,
    pub quota: u32,
    pub config_count: u64,
    /// 0 global (default), 2 custom.
    #[serde(rename = "type")]
    pub kind: u8,
}

impl NamespaceJson {
    /// Renders a namespace holding `config_count` configs.
    pub fn new(summary: &understudy_core::NamespaceSummary, config_count: usize) -> Self {
        let default = summary.id.is_public();
        Self {
            namespace: if default {
                String::new()
            } else {
                summary.id.to_string()
            },
            namespace_show_name: summary.info.name.clone(),
            namespace_desc: summary.info.description.clone(),
            quota: 200,
            config_count: config_count as u64,
            kind: if default { 0 } else { 2 },
        }
    }
}

/// The console's `{"code":200,"message":null,"data":...}` envelope. Its
/// `message` is `null` in Nacos; console clients tolerate it, SDKs never
/// read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsoleResult<T> {
    pub code: u32,
    pub message: Option<String>,
    pub data: T,
}

impl<T> ConsoleResult<T> {
    /// `code` 200 with `data`.
    pub fn ok(data: T) -> Self {
        Self {
            code: 200,
            message: None,
            data,
        }
    }
}

/// Login answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoginReply {
    pub access_token: String,
    /// Seconds.
    pub token_ttl: u64,
    pub global_admin: bool,
    pub username: String,
}

/// The SwitchDomain object of `GET /nacos/v1/ns/operator/switches`, with
/// Nacos 2.5.1's defaults and the beat interval in force here.
pub fn switches(client_beat_interval: u64) -> Value {
    serde_json::json!({
        "name": "00-00---000-NACOS_SWITCH_DOMAIN-000---00-00",
        "adWeightMap": {},
        "defaultPushCacheMillis": 10000,
        "clientBeatInterval": client_beat_interval,
        "defaultCacheMillis": 3000,
        "distroThreshold": 0.7,
        "healthCheckEnabled": true,
        "autoChangeHealthCheckEnabled": true,
        "distroEnabled": true,
        "enableStandalone": true,
        "pushEnabled": true,
        "checkTimes": 3,
        "httpHealthParams": {"max": 5000, "min": 500, "factor": 0.85},
        "tcpHealthParams": {"max": 5000, "min": 1000, "factor": 0.75},
        "mysqlHealthParams": {"max": 3000, "min": 2000, "factor": 0.65},
        "incrementalList": [],
        "serverStatusSynchronizationPeriodMillis": 2000,
        "serviceStatusSynchronizationPeriodMillis": 5000,
        "disableAddIP": false,
        "sendBeatOnly": false,
        "lightBeatEnabled": true,
        "limitedUrlMap": {},
        "distroServerExpiredMillis": 10000,
        "pushGoVersion": "0.1.0",
        "pushJavaVersion": "0.1.0",
        "pushPythonVersion": "0.4.3",
        "pushCVersion": "1.0.12",
        "pushCSharpVersion": "0.9.0",
        "enableAuthentication": false,
        "defaultInstanceEphemeral": true,
        "healthCheckWhiteList": []
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_with_its_type_twice_reads_as_nacos_reads_it() {
        // What nacos-maintainer-client 3.1 sends for a service's selector.
        let selector = SelectorJson::parse(r#"{"type":"none","type":"none","contextType":"NONE"}"#)
            .expect("Nacos takes a repeated type");
        assert_eq!(selector.kind, "none");
        let label =
            SelectorJson::parse(r#"{"type":"none","type":"label","expression":"a = b"}"#).unwrap();
        assert_eq!(
            (label.kind.as_str(), label.expression.as_str()),
            ("label", "a = b")
        );
        let refused = SelectorJson::parse(r#"{"type":"all"}"#).unwrap_err();
        assert_eq!(refused.field, "selector");
        assert!(SelectorJson::parse("[1]").is_err());
    }

    #[test]
    fn metadata_accepts_json_and_legacy_pairs() {
        let json = parse_metadata(r#"{"a":"1","b":2}"#).unwrap();
        assert_eq!(json.get("b"), Some("2"));
        let legacy = parse_metadata("a=1, b = 2").unwrap();
        assert_eq!(legacy.len(), 2);
        assert!(parse_metadata("").unwrap().is_empty());
        for bad in ["{", "a", "=1", r#"{"a":{"b":1}}"#, "[1]"] {
            assert_eq!(parse_metadata(bad).unwrap_err().field, "metadata", "{bad}");
        }
    }

    #[test]
    fn beat_info_tolerates_nulls_and_unknown_fields() {
        let beat = BeatInfo::parse(
            r#"{"ip":"1.2.3.4","port":80,"cluster":null,"metadata":{"a":"b","n":1},"cpu":0.5}"#,
        )
        .unwrap();
        assert_eq!(beat.ip.as_deref(), Some("1.2.3.4"));
        assert_eq!(beat.cluster, None);
        assert_eq!(beat.metadata().get("n"), Some("1"));
        assert_eq!(BeatInfo::parse("garbage").unwrap_err().field, "beat");
    }

    #[test]
    fn service_info_uses_nacos_field_names_and_no_nulls() {
        let key = ServiceKey::parse("", "", "svc").unwrap();
        let info = ServiceInfo::new(key.grouped_name(), &key, "", vec![], false, 7);
        let json = serde_json::to_value(&info).unwrap();
        for field in [
            "name",
            "groupName",
            "clusters",
            "cacheMillis",
            "hosts",
            "lastRefTime",
            "checksum",
            "allIPs",
            "allIps",
            "reachProtectionThreshold",
            "valid",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
        assert!(!json.to_string().contains("null"));
    }

    #[test]
    fn shared_hosts_serialize_exactly_as_a_rendered_service_info() {
        use understudy_core::{Command, InstanceSpec, Op, Owner, Registry, RegistryOptions};
        let key = ServiceKey::parse("", "", "svc").unwrap();
        let mut registry = Registry::new(RegistryOptions::default());
        for (n, cluster) in [(1, "a"), (2, "b"), (3, "a")] {
            let mut spec = InstanceSpec::new(format!("10.0.0.{n}"), 8080);
            spec.cluster = understudy_core::ClusterName::parse(cluster).unwrap();
            spec.metadata.insert("zone".into(), "hz \"quoted\"".into());
            let op = Op::Register {
                service: key.clone(),
                owner: Owner::Beat {
                    ip: spec.ip.as_str().into(),
                    port: 8080,
                },
                instances: vec![spec],
            };
            registry.apply(&Command::new(0, op)).unwrap();
        }
        let service = registry.service(&key);
        let filter = [understudy_core::ClusterName::parse("a").unwrap()];
        for (raw, clusters) in [("", &filter[..0]), ("a", &filter[..])] {
            let view = View {
                clusters_raw: raw,
                clusters,
                healthy_only: false,
            };
            for style in [NameStyle::Plain, NameStyle::Grouped] {
                let whole = ServiceInfo::render(&key, service.as_deref(), style, view, 42);
                let hosts = Hosts::render(&key, service.as_deref(), view);
                let shared = ServiceInfoRef::new(&key, style, raw, &hosts, 42);
                assert_eq!(
                    serde_json::to_string(&shared).unwrap(),
                    serde_json::to_string(&whole).unwrap()
                );
            }
        }
        let none = Hosts::render(
            &key,
            None,
            View {
                clusters_raw: "",
                clusters: &[],
                healthy_only: true,
            },
        );
        assert_eq!(none.json.get(), "[]");
    }
}
