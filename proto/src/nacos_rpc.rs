//! Nacos 2.x gRPC bodies: the JSON inside `Payload.body.value`, one type
//! per Nacos message with its exact field names (§4, §5 of the protocol
//! reference). Input types are lenient (unknown fields ignored, `null` is
//! absent, the field-name variants real clients send are accepted);
//! output types are strict (never `null`; `resultCode`, `errorCode` and
//! `success` always present; server requests always carry `headers`).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_core::{ClusterName, InstanceSpec, Metadata, ServiceKey};

use crate::grpc::{Metadata as WireMetadata, Payload};
use crate::nacos::ServiceInfoRef;
use crate::DecodeError;

/// Error code: the connection has not completed its setup (clients
/// reconnect and redo their registrations).
pub const UN_REGISTER: i32 = 301;
/// Error code: no handler for the request type.
pub const NO_HANDLER: i32 = 302;
/// Error code: invalid parameter.
pub const INVALID_PARAM: i32 = 400;
/// Error code: the server failed.
pub const SERVER_ERROR: i32 = 500;
/// `errorCode` of a request refused by auth (Java re-logs in on it).
pub const NO_RIGHT: i32 = 403;
/// Error code: the body could not be parsed.
pub const BAD_GATEWAY: i32 = 502;
/// Error code: the server is overloaded.
pub const OVER_THRESHOLD: i32 = 503;

/// A payload's type name and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// `Metadata.type`.
    pub kind: String,
    /// `Metadata.headers`.
    pub headers: BTreeMap<String, String>,
    /// The raw JSON body.
    pub body: Vec<u8>,
}

impl Envelope {
    /// Opens a payload.
    pub fn open(payload: Payload) -> Self {
        let metadata = payload.metadata.unwrap_or_default();
        Self {
            kind: metadata.r#type,
            headers: metadata.headers.into_iter().collect(),
            body: payload.body.map(|b| b.value).unwrap_or_default(),
        }
    }

    /// Decodes the body as `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, DecodeError> {
        let body: &[u8] = if self.body.is_empty() {
            b"{}"
        } else {
            &self.body
        };
        serde_json::from_slice(body).map_err(|e| {
            DecodeError::new(
                "body",
                format!("{} is not valid JSON for it: {e}", self.kind),
            )
        })
    }

    /// A header, looked up case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Seals a body into a payload of type `kind`.
pub fn seal(kind: &str, body: &impl Serialize) -> Payload {
    let value = serde_json::to_vec(body).expect("wire bodies always serialize");
    Payload {
        metadata: Some(WireMetadata {
            r#type: kind.to_owned(),
            client_ip: String::new(),
            headers: Default::default(),
        }),
        body: Some(prost_types::Any {
            type_url: String::new(),
            value,
        }),
    }
}

// ---- responses -------------------------------------------------------------

/// A response: the common fields and the type-specific ones.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Response<T> {
    pub result_code: i32,
    pub error_code: i32,
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(flatten)]
    pub body: T,
}

impl<T> Response<T> {
    /// A success.
    pub fn ok(body: T) -> Self {
        Self {
            result_code: 200,
            error_code: 0,
            success: true,
            message: None,
            request_id: None,
            body,
        }
    }

    /// A failure in the handler's own response type.
    pub fn failed(error_code: i32, message: impl Into<String>, body: T) -> Self {
        Self {
            result_code: 500,
            error_code,
            success: false,
            message: Some(message.into()),
            request_id: None,
            body,
        }
    }
}

/// No type-specific fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Empty {}

/// An `ErrorResponse`. Built from a code, or (for validation errors) with
/// `resultCode` equal to `errorCode`, as Nacos does.
pub fn error_response(error_code: i32, message: impl Into<String>) -> Payload {
    error_response_as("ErrorResponse", error_code, message)
}

/// A failure in a given response type: Nacos answers some failures (auth
/// refusals) in the handler's own response type, and clients act on the
/// `errorCode` only there.
pub fn error_response_as(kind: &str, error_code: i32, message: impl Into<String>) -> Payload {
    let result_code = if error_code == INVALID_PARAM {
        INVALID_PARAM
    } else {
        SERVER_ERROR
    };
    let body = Response {
        result_code,
        error_code,
        success: false,
        message: Some(message.into()),
        request_id: None,
        body: Empty {},
    };
    seal(kind, &body)
}

/// `ServerCheckResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerCheck {
    pub connection_id: String,
    pub support_ability_negotiation: bool,
}

/// `InstanceResponse` and `BatchInstanceResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceAck {
    #[serde(rename = "type")]
    pub kind: String,
}

/// `QueryServiceResponse` and `SubscribeServiceResponse`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceInfoBody<'a> {
    pub service_info: ServiceInfoRef<'a>,
}

/// `ServiceListResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceList {
    pub count: usize,
    pub service_names: Vec<String>,
}

// ---- server requests -------------------------------------------------------

/// A request the server sends on the bi-stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerRequest<T> {
    pub headers: BTreeMap<String, String>,
    pub request_id: String,
    pub module: &'static str,
    #[serde(flatten)]
    pub body: T,
}

impl<T> ServerRequest<T> {
    /// A request with `request_id` for `module`.
    pub fn new(request_id: impl Into<String>, module: &'static str, body: T) -> Self {
        Self {
            headers: BTreeMap::new(),
            request_id: request_id.into(),
            module,
            body,
        }
    }
}

/// `SetupAckRequest`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupAck {
    pub ability_table: BTreeMap<String, bool>,
}

/// `ConnectResetRequest`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectReset {
    pub connection_id: String,
}

/// `NotifySubscriberRequest`: the ServiceInfo alone, as Nacos builds it
/// (its namespace, serviceName and groupName fields stay unset).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotifySubscriber<'a> {
    pub service_info: ServiceInfoRef<'a>,
}

// ---- client requests -------------------------------------------------------

/// `ConnectionSetupRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConnectionSetup {
    pub client_version: Option<String>,
    pub tenant: Option<String>,
    pub labels: Option<BTreeMap<String, Value>>,
    /// Present (even empty) when the client negotiates abilities and waits
    /// for a `SetupAckRequest`.
    pub ability_table: Option<BTreeMap<String, Value>>,
}

/// The answer a client sends to a server request (any response type).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientAck {
    pub request_id: Option<String>,
    pub result_code: Option<i64>,
    pub error_code: Option<i64>,
}

impl ClientAck {
    /// Whether the client reports success.
    pub fn succeeded(&self) -> bool {
        self.result_code == Some(200) || self.error_code == Some(0)
    }
}

/// The fields every naming request shares.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NamingCommon {
    pub namespace: Option<String>,
    pub service_name: Option<String>,
    pub group_name: Option<String>,
}

impl NamingCommon {
    /// The service the request names.
    pub fn service_key(&self) -> Result<ServiceKey, DecodeError> {
        let name = self.service_name.as_deref().unwrap_or("");
        ServiceKey::parse(
            self.namespace.as_deref().unwrap_or(""),
            self.group_name.as_deref().unwrap_or(""),
            name,
        )
        .map_err(DecodeError::from)
    }
}

impl From<understudy_core::Error> for DecodeError {
    fn from(error: understudy_core::Error) -> Self {
        match error {
            understudy_core::Error::Invalid { field, reason } => DecodeError::new(field, reason),
            other => DecodeError::new("request", other.to_string()),
        }
    }
}

/// Nacos' parameter check's words for a port out of range.
pub const PORT_ILLEGAL: &str = "Param 'port' is illegal, the value should be between 0 and 65535.";

/// Nacos' parameter check of one cluster name (blank passes: it means the
/// default cluster): at most 64 letters, digits, '-' and '_'. Its words
/// when the name fails.
pub fn cluster_param_check(raw: &str) -> Option<&'static str> {
    if raw.trim().is_empty() {
        None
    } else if raw.chars().count() > 64 {
        Some("Param 'cluster' is illegal, the param length should not exceed 64.")
    } else if !raw
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Some("Param 'cluster' is illegal, illegal characters should not appear in the param.")
    } else {
        None
    }
}

/// Nacos' parameter check of an instance in a naming request, which runs
/// before the handler: the first field it refuses, in its words (cluster
/// before port, as Nacos checks them).
pub fn instance_param_check(wire: &InstanceWire) -> Option<&'static str> {
    if let Some(refusal) = cluster_param_check(wire.cluster_name.as_deref().unwrap_or("")) {
        return Some(refusal);
    }
    match wire.port {
        Some(port) if !(0..=65535).contains(&port) => Some(PORT_ILLEGAL),
        _ => None,
    }
}

/// A parameter check's refusal, as Nacos answers it: in the handler's own
/// response type, `resultCode` 500 with `errorCode` 400, the message
/// prefixed `Param check invalid:`.
pub fn param_check_response(kind: &str, message: &str) -> Payload {
    let body = Response {
        result_code: SERVER_ERROR,
        error_code: INVALID_PARAM,
        success: false,
        message: Some(format!("Param check invalid:{message}")),
        request_id: None,
        body: Empty {},
    };
    seal(kind, &body)
}

/// An instance as clients send it. Lenient: `null` is absent, `healthy`
/// and `enabled` default to true, `weight` to 1.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct InstanceWire {
    pub instance_id: Option<String>,
    pub ip: Option<String>,
    pub port: Option<i64>,
    pub weight: Option<f64>,
    pub healthy: Option<bool>,
    pub enabled: Option<bool>,
    pub ephemeral: Option<bool>,
    pub cluster_name: Option<String>,
    pub service_name: Option<String>,
    pub metadata: Option<BTreeMap<String, Value>>,
}

impl TryFrom<InstanceWire> for InstanceSpec {
    type Error = DecodeError;

    fn try_from(wire: InstanceWire) -> Result<Self, DecodeError> {
        let ip = wire
            .ip
            .filter(|ip| !ip.trim().is_empty())
            .ok_or_else(|| DecodeError::new("ip", "is required"))?;
        let port = wire
            .port
            .ok_or_else(|| DecodeError::new("port", "is required"))?;
        let port = u16::try_from(port).map_err(|_| {
            DecodeError::new("port", format!("must be between 0 and 65535, got {port}"))
        })?;
        let mut spec = InstanceSpec::new(ip.trim(), port);
        spec.instance_id = wire.instance_id.filter(|id| !id.trim().is_empty());
        if let Some(weight) = wire.weight {
            spec.weight = weight;
        }
        spec.healthy = wire.healthy.unwrap_or(true);
        spec.enabled = wire.enabled.unwrap_or(true);
        spec.cluster = ClusterName::parse(wire.cluster_name.as_deref().unwrap_or(""))?;
        spec.metadata = metadata_strings(wire.metadata)?;
        understudy_core::check_weight(spec.weight)?;
        Ok(spec)
    }
}

fn metadata_strings(raw: Option<BTreeMap<String, Value>>) -> Result<Metadata, DecodeError> {
    raw.into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            Value::Number(_) | Value::Bool(_) => Ok((k, v.to_string())),
            _ => Err(DecodeError::new(
                "metadata",
                format!("value of '{k}' must be a string"),
            )),
        })
        .collect()
}

/// `InstanceRequest` and `PersistentInstanceRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct InstanceRequest {
    #[serde(flatten)]
    pub common: NamingCommon,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub instance: Option<InstanceWire>,
}

/// `BatchInstanceRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct BatchInstanceRequest {
    #[serde(flatten)]
    pub common: NamingCommon,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub instances: Option<Vec<InstanceWire>>,
}

/// `ServiceQueryRequest`. Only Nacos' own field names narrow the answer:
/// a client that misspells one (nacos-sdk-python sends `healthOnly`) gets
/// every instance, as it does from Nacos, which ignores unknown fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceQueryRequest {
    #[serde(flatten)]
    pub common: NamingCommon,
    pub cluster: Option<String>,
    pub healthy_only: Option<bool>,
}

/// `SubscribeServiceRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscribeServiceRequest {
    #[serde(flatten)]
    pub common: NamingCommon,
    pub subscribe: Option<bool>,
    pub clusters: Option<String>,
}

/// `ServiceListRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceListRequest {
    #[serde(flatten)]
    pub common: NamingCommon,
    pub page_no: Option<i64>,
    pub page_size: Option<i64>,
}

/// Parses a comma-separated cluster filter.
pub fn parse_clusters(raw: &str) -> Result<Vec<ClusterName>, DecodeError> {
    raw.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| ClusterName::parse(c).map_err(|e| DecodeError::new("clusters", e.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_requests_tolerate_nulls_and_extras() {
        let body = r#"{"headers":{},"namespace":null,"serviceName":"svc","groupName":null,
            "type":"registerInstance","module":"naming",
            "instance":{"instanceId":null,"ip":"10.0.0.1","port":8080,"weight":1.0,"healthy":true,
            "enabled":true,"ephemeral":true,"clusterName":null,"serviceName":null,"metadata":{"a":"b"},
            "instanceHeartBeatInterval":5000,"valid":true,"marked":false}}"#;
        let request: InstanceRequest = serde_json::from_str(body).unwrap();
        let key = request.common.service_key().unwrap();
        assert_eq!(key.grouped_name(), "DEFAULT_GROUP@@svc");
        let spec = InstanceSpec::try_from(request.instance.unwrap()).unwrap();
        assert_eq!(
            (spec.ip.as_str(), spec.port, spec.cluster.as_str()),
            ("10.0.0.1", 8080, "DEFAULT")
        );
    }

    #[test]
    fn bad_instances_name_the_field() {
        let cases = [
            (r#"{"port":1}"#, "ip"),
            (r#"{"ip":"a"}"#, "port"),
            (r#"{"ip":"a","port":70000}"#, "port"),
            (r#"{"ip":"a","port":1,"weight":-1}"#, "weight"),
            (r#"{"ip":"a","port":1,"clusterName":"a.b"}"#, "clusterName"),
            (r#"{"ip":"a","port":1,"metadata":{"k":[1]}}"#, "metadata"),
        ];
        for (json, field) in cases {
            let wire: InstanceWire = serde_json::from_str(json).unwrap();
            assert_eq!(
                InstanceSpec::try_from(wire).unwrap_err().field,
                field,
                "{json}"
            );
        }
    }

    #[test]
    fn responses_always_carry_the_common_fields_and_no_nulls() {
        let payload = seal(
            "InstanceResponse",
            &Response::ok(InstanceAck {
                kind: "registerInstance".into(),
            }),
        );
        let envelope = Envelope::open(payload);
        let json: Value = serde_json::from_slice(&envelope.body).unwrap();
        assert_eq!(json["resultCode"], 200);
        assert_eq!(json["errorCode"], 0);
        assert_eq!(json["success"], true);
        assert_eq!(json["type"], "registerInstance");
        assert!(!String::from_utf8(envelope.body).unwrap().contains("null"));
        let detection = ServerRequest::new("7", "internal", Empty {});
        let json = serde_json::to_value(detection).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"headers":{},"requestId":"7","module":"internal"})
        );
    }
}

// ---- config ---------------------------------------------------------------

/// The fields every config request shares.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigCommon {
    pub data_id: Option<String>,
    pub group: Option<String>,
    pub tenant: Option<String>,
    pub tag: Option<String>,
}

impl ConfigCommon {
    /// The config the request names.
    pub fn key(&self) -> Result<understudy_core::ConfigKey, DecodeError> {
        understudy_core::ConfigKey::parse(
            self.tenant.as_deref().unwrap_or(""),
            self.group.as_deref().unwrap_or(""),
            self.data_id.as_deref().unwrap_or(""),
        )
        .map_err(DecodeError::from)
    }
}

/// `ConfigQueryRequest` and `ConfigRemoveRequest`.
pub type ConfigQueryRequest = ConfigCommon;

/// `ConfigPublishRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigPublishRequest {
    #[serde(flatten)]
    pub common: ConfigCommon,
    pub content: Option<String>,
    pub cas_md5: Option<String>,
    pub addition_map: Option<BTreeMap<String, Option<String>>>,
}

impl ConfigPublishRequest {
    /// An `additionMap` value, blank when absent.
    pub fn addition(&self, key: &str) -> String {
        self.addition_map
            .as_ref()
            .and_then(|m| m.get(key).cloned().flatten())
            .unwrap_or_default()
    }
}

/// `ConfigQueryResponse` fields (found or not).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigQueryBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted_data_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub md5: Option<String>,
    pub last_modified: u64,
    /// The content is a beta (IP) gray release's.
    pub beta: bool,
    /// The content is the gray release of this tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// Error code of a missing config in `ConfigQueryResponse`.
pub const CONFIG_NOT_FOUND: i32 = 300;

/// One context of a `ConfigBatchListenRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigListenContext {
    pub data_id: Option<String>,
    pub group: Option<String>,
    pub tenant: Option<String>,
    pub md5: Option<String>,
}

/// `ConfigBatchListenRequest`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigBatchListenRequest {
    pub listen: Option<bool>,
    pub config_listen_contexts: Option<Vec<ConfigListenContext>>,
}

/// A config named in answers and pushes, with the tenant as the client
/// sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigContext {
    pub data_id: String,
    pub group: String,
    pub tenant: String,
}

/// `ConfigChangeNotifyRequest`'s body: the config that changed, with the
/// tenant as its listener sent it; an empty tenant is left out, as Nacos
/// leaves out its null one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigChangeNotify {
    pub data_id: String,
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tenant: String,
}

/// `ConfigChangeBatchListenResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigChangedBody {
    pub changed_configs: Vec<ConfigContext>,
}
