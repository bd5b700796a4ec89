//! Nacos 3's AI registry over gRPC (module `ai`): the MCP server and A2A
//! agent requests and answers, and the documents servers and agents are
//! stored as. A server's specification, its tools and an agent's card are
//! kept as the JSON the client sent (Nacos and the A2A protocol add
//! fields to them release by release, and a stand-in must hand back what
//! it was given); the fields understudy reads are typed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `registerEndpoint`, the `type` of an endpoint request that adds one.
pub const REGISTER_ENDPOINT: &str = "registerEndpoint";
/// `deregisterEndpoint`, the `type` of one that removes it.
pub const DEREGISTER_ENDPOINT: &str = "deregisterEndpoint";
/// An endpoint specification naming a service of the registry.
pub const ENDPOINT_REF: &str = "REF";
/// An endpoint specification giving an address.
pub const ENDPOINT_DIRECT: &str = "DIRECT";
/// The protocol of a server run as a local process: it has no endpoints.
pub const PROTOCOL_STDIO: &str = "stdio";

/// Config group of each server's version list.
pub const VERSIONS_GROUP: &str = "mcp-server-versions";
/// Config group of each version's specification.
pub const SERVER_GROUP: &str = "mcp-server";
/// Config group of each version's tools.
pub const TOOLS_GROUP: &str = "mcp-tools";
/// Naming group of the services made for direct endpoints.
pub const ENDPOINT_GROUP: &str = "mcp-endpoints";
/// Metadata key an endpoint registered through `McpServerEndpointRequest`
/// carries its server version under.
pub const VERSION_TAG: &str = "_mcp_server_version";

/// `QueryMcpServerRequest`, `ReleaseMcpServerRequest` and
/// `McpServerEndpointRequest`: one shape, each reads its fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct McpRequest {
    pub namespace_id: Option<String>,
    pub mcp_id: Option<String>,
    pub mcp_name: Option<String>,
    pub version: Option<String>,
    pub server_specification: Option<Value>,
    pub tool_specification: Option<Value>,
    pub endpoint_specification: Option<EndpointSpec>,
    pub address: Option<String>,
    pub port: Option<i64>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// `McpEndpointSpec`: `REF` with `namespaceId`, `groupName`,
/// `serviceName`; or `DIRECT` with `address` and `port`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EndpointSpec {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub data: BTreeMap<String, Value>,
}

impl EndpointSpec {
    /// A field of its data, as text.
    pub fn field(&self, name: &str) -> Option<String> {
        match self.data.get(name)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// `ServerVersionDetail`. Its snake-case fields are Nacos' own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VersionDetail {
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_date: Option<String>,
    pub is_latest: bool,
}

/// `McpServerVersionInfo`: a server's identity and its versions, stored
/// as config `{id}-mcp-versions.json` of group [`VERSIONS_GROUP`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct McpVersions {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub front_protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
    pub latest_published_version: String,
    pub version_details: Vec<VersionDetail>,
}

/// `QueryMcpServerResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryMcpServerBody {
    pub mcp_server_detail_info: Value,
}

/// `ReleaseMcpServerResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseMcpServerBody {
    pub mcp_id: String,
}

/// `McpServerEndpointResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpServerEndpointBody {
    #[serde(rename = "type")]
    pub kind: String,
}

/// `McpEndpointInfo`: one live endpoint of a server, as a query answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    pub address: String,
    pub port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Config group of each agent's version list (`AgentCardVersionInfo`),
/// by agent name.
pub const AGENT_GROUP: &str = "agent";
/// Config group of each agent version's card (`AgentCardDetailInfo`), as
/// `{name}-{version}`.
pub const AGENT_VERSION_GROUP: &str = "agent-version";
/// Naming group of the services an agent's endpoints are instances of,
/// one a version: `{name}::{version}`.
pub const AGENT_ENDPOINT_GROUP: &str = "agent-endpoints";
/// Endpoint metadata: the path of its URL.
pub const AGENT_ENDPOINT_PATH: &str = "__nacos.agent.endpoint.path__";
/// Endpoint metadata: its transport (`JSONRPC`, `GRPC`, `HTTP+JSON`).
pub const AGENT_ENDPOINT_TRANSPORT: &str = "__nacos.agent.endpoint.transport__";
/// Endpoint metadata: whether it is served over TLS.
pub const AGENT_ENDPOINT_TLS: &str = "__nacos.agent.endpoint.supportTls__";
/// An agent whose card's URL is its own.
pub const REGISTRATION_URL: &str = "URL";
/// An agent whose card's URL is one of its registered endpoints.
pub const REGISTRATION_SERVICE: &str = "SERVICE";

/// `QueryAgentCardRequest`, `ReleaseAgentCardRequest` and
/// `AgentEndpointRequest`: one shape, each reads its fields. The card is
/// kept as the JSON the client sent (the A2A card grows fields).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentRequest {
    pub namespace_id: Option<String>,
    pub agent_name: Option<String>,
    pub version: Option<String>,
    pub registration_type: Option<String>,
    pub agent_card: Option<Value>,
    pub set_as_latest: Option<bool>,
    pub endpoint: Option<AgentEndpoint>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// `AgentEndpoint`: where one instance of an agent version serves.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentEndpoint {
    pub transport: Option<String>,
    pub address: Option<String>,
    pub port: Option<i64>,
    pub path: Option<String>,
    pub support_tls: Option<bool>,
    pub version: Option<String>,
}

/// `AgentVersionDetail`, as stored: Nacos' own field names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentVersion {
    pub version: String,
    pub created_at: String,
    pub updated_at: String,
    pub latest: bool,
}

/// `QueryAgentCardResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryAgentCardBody {
    pub agent_card_detail_info: Value,
}

/// `AgentEndpointResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentEndpointBody {
    #[serde(rename = "type")]
    pub kind: String,
}
