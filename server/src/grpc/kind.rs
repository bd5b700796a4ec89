//! The Nacos gRPC request types the server answers, as one enum: the
//! dispatch, the response type a refusal is rendered as, the metric label
//! and the fuzz target all read it, so they cannot drift apart. And
//! [`Failure`], why a request failed, rendered as an `ErrorResponse`.

use understudy_proto::grpc::Payload;
use understudy_proto::nacos_rpc::{
    error_response, param_check_response, INVALID_PARAM, OVER_THRESHOLD, SERVER_ERROR,
};
use understudy_proto::DecodeError;

use crate::node::ProposeError;

/// A request type, by its Nacos class name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// The first request of a connection, before it is registered.
    ServerCheck,
    /// The stream's first message, on the bi-stream only.
    ConnectionSetup,
    /// A client's keepalive.
    HealthCheck,
    /// Register or deregister one ephemeral instance (or several, as one
    /// owner's entry).
    Instance,
    /// Register or deregister one persistent instance.
    PersistentInstance,
    /// Replace the connection's instances of a service.
    BatchInstance,
    /// Read a service's instances.
    ServiceQuery,
    /// Subscribe to (or unsubscribe from) a service's pushes.
    Subscribe,
    /// A page of a group's service names.
    ServiceList,
    /// Read a config.
    ConfigQuery,
    /// Publish a config.
    ConfigPublish,
    /// Remove a config.
    ConfigRemove,
    /// Listen to (or stop listening to) configs.
    ConfigBatchListen,
    /// Watch (or stop watching) the set of services a pattern matches.
    NamingFuzzyWatch,
    /// Watch (or stop watching) the set of configs a pattern matches.
    ConfigFuzzyWatch,
    /// Read an MCP server (Nacos 3's AI registry).
    QueryMcpServer,
    /// Release an MCP server, or a new version of one.
    ReleaseMcpServer,
    /// Register or deregister an endpoint of an MCP server.
    McpServerEndpoint,
    /// Read an A2A agent's card.
    QueryAgentCard,
    /// Release an agent card, or a new version of one.
    ReleaseAgentCard,
    /// Register or deregister an endpoint of an agent.
    AgentEndpoint,
    /// Take or release a lock.
    LockOperation,
}

impl RequestKind {
    /// Every type, in dispatch order.
    pub const ALL: [RequestKind; 22] = [
        RequestKind::ServerCheck,
        RequestKind::ConnectionSetup,
        RequestKind::HealthCheck,
        RequestKind::Instance,
        RequestKind::PersistentInstance,
        RequestKind::BatchInstance,
        RequestKind::ServiceQuery,
        RequestKind::Subscribe,
        RequestKind::ServiceList,
        RequestKind::ConfigQuery,
        RequestKind::ConfigPublish,
        RequestKind::ConfigRemove,
        RequestKind::ConfigBatchListen,
        RequestKind::NamingFuzzyWatch,
        RequestKind::ConfigFuzzyWatch,
        RequestKind::QueryMcpServer,
        RequestKind::ReleaseMcpServer,
        RequestKind::McpServerEndpoint,
        RequestKind::QueryAgentCard,
        RequestKind::ReleaseAgentCard,
        RequestKind::AgentEndpoint,
        RequestKind::LockOperation,
    ];

    /// The type a payload names, if the server answers it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Its Nacos class name, as payloads carry it.
    pub fn name(self) -> &'static str {
        match self {
            RequestKind::ServerCheck => "ServerCheckRequest",
            RequestKind::ConnectionSetup => "ConnectionSetupRequest",
            RequestKind::HealthCheck => "HealthCheckRequest",
            RequestKind::Instance => "InstanceRequest",
            RequestKind::PersistentInstance => "PersistentInstanceRequest",
            RequestKind::BatchInstance => "BatchInstanceRequest",
            RequestKind::ServiceQuery => "ServiceQueryRequest",
            RequestKind::Subscribe => "SubscribeServiceRequest",
            RequestKind::ServiceList => "ServiceListRequest",
            RequestKind::ConfigQuery => "ConfigQueryRequest",
            RequestKind::ConfigPublish => "ConfigPublishRequest",
            RequestKind::ConfigRemove => "ConfigRemoveRequest",
            RequestKind::ConfigBatchListen => "ConfigBatchListenRequest",
            RequestKind::NamingFuzzyWatch => "NamingFuzzyWatchRequest",
            RequestKind::ConfigFuzzyWatch => "ConfigFuzzyWatchRequest",
            RequestKind::QueryMcpServer => "QueryMcpServerRequest",
            RequestKind::ReleaseMcpServer => "ReleaseMcpServerRequest",
            RequestKind::McpServerEndpoint => "McpServerEndpointRequest",
            RequestKind::QueryAgentCard => "QueryAgentCardRequest",
            RequestKind::ReleaseAgentCard => "ReleaseAgentCardRequest",
            RequestKind::AgentEndpoint => "AgentEndpointRequest",
            RequestKind::LockOperation => "LockOperationRequest",
        }
    }

    /// The response type its handler answers with.
    pub fn response(self) -> &'static str {
        match self {
            RequestKind::ServerCheck => "ServerCheckResponse",
            RequestKind::ConnectionSetup => "ErrorResponse",
            RequestKind::HealthCheck => "HealthCheckResponse",
            RequestKind::Instance | RequestKind::PersistentInstance => "InstanceResponse",
            RequestKind::BatchInstance => "BatchInstanceResponse",
            RequestKind::ServiceQuery => "QueryServiceResponse",
            RequestKind::Subscribe => "SubscribeServiceResponse",
            RequestKind::ServiceList => "ServiceListResponse",
            RequestKind::ConfigQuery => "ConfigQueryResponse",
            RequestKind::ConfigPublish => "ConfigPublishResponse",
            RequestKind::ConfigRemove => "ConfigRemoveResponse",
            RequestKind::ConfigBatchListen => "ConfigChangeBatchListenResponse",
            RequestKind::NamingFuzzyWatch => "NamingFuzzyWatchResponse",
            RequestKind::ConfigFuzzyWatch => "ConfigFuzzyWatchResponse",
            RequestKind::QueryMcpServer => "QueryMcpServerResponse",
            RequestKind::ReleaseMcpServer => "ReleaseMcpServerResponse",
            RequestKind::McpServerEndpoint => "McpServerEndpointResponse",
            RequestKind::QueryAgentCard => "QueryAgentCardResponse",
            RequestKind::ReleaseAgentCard => "ReleaseAgentCardResponse",
            RequestKind::AgentEndpoint => "AgentEndpointResponse",
            RequestKind::LockOperation => "LockOperationResponse",
        }
    }

    /// The metric label of a payload's type: its name, or `other`, so the
    /// label set stays bounded.
    pub fn label(kind: Option<Self>) -> &'static str {
        kind.map_or("other", Self::name)
    }
}

/// Why a request failed, rendered as an `ErrorResponse` (or, for Nacos'
/// parameter check, in the handler's own response type).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(super) code: i32,
    pub(super) message: String,
    /// The response type a parameter check answers in.
    pub(super) param_check: Option<&'static str>,
}

impl From<DecodeError> for Failure {
    fn from(e: DecodeError) -> Self {
        Self::invalid(e.to_string())
    }
}

impl From<ProposeError> for Failure {
    fn from(e: ProposeError) -> Self {
        let code = match &e {
            ProposeError::Rejected(understudy_core::Error::OverLimit { .. })
            | ProposeError::Busy => OVER_THRESHOLD,
            ProposeError::Rejected(_) => INVALID_PARAM,
            ProposeError::ShuttingDown | ProposeError::Unavailable { .. } => SERVER_ERROR,
        };
        Self {
            code,
            message: e.to_string(),
            param_check: None,
        }
    }
}

impl Failure {
    /// A configured limit was hit.
    pub(crate) fn over_limit(message: impl Into<String>) -> Self {
        Self {
            code: OVER_THRESHOLD,
            message: message.into(),
            param_check: None,
        }
    }

    /// A field is missing or malformed.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: INVALID_PARAM,
            message: message.into(),
            param_check: None,
        }
    }

    /// Any other failure, with its Nacos error code.
    pub(crate) fn coded(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            param_check: None,
        }
    }

    /// Nacos' parameter check refused a field; answered in `response`.
    pub(crate) fn param_check(response: &'static str, message: &str) -> Self {
        Self {
            code: INVALID_PARAM,
            message: message.to_owned(),
            param_check: Some(response),
        }
    }

    pub(super) fn into_payload(self) -> Payload {
        if let Some(response) = self.param_check {
            return param_check_response(response, &self.message);
        }
        error_response(self.code, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_back_from_its_name() {
        for kind in RequestKind::ALL {
            assert_eq!(RequestKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(RequestKind::parse("NoSuchRequest"), None);
        assert_eq!(RequestKind::label(None), "other");
    }
}
