//! Nacos 3's AI registry requests (module `ai`): query and release an MCP
//! server or an A2A agent card, and register or deregister one of their
//! endpoints. The registry itself is [`crate::ai`]; this decodes,
//! proposes and answers.

use std::sync::Arc;

use understudy_core::{InstanceSpec, Op};
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_ai::{
    AgentEndpointBody, AgentRequest, McpRequest, McpServerEndpointBody, QueryAgentCardBody,
    QueryMcpServerBody, ReleaseMcpServerBody, DEREGISTER_ENDPOINT, REGISTER_ENDPOINT,
    REGISTRATION_SERVICE, VERSION_TAG,
};
use understudy_proto::nacos_rpc::{error_response_as, seal, Empty, Envelope, Response};
use understudy_proto::DecodeError;

use super::conn::Conn;
use super::kind::Failure;
use crate::ai::{a2a, mcp, AiError};
use crate::node::Node;
use crate::write::ProposeError;

fn refused(response: &str, e: &AiError) -> Payload {
    error_response_as(response, e.code(), e.to_string())
}

/// A query's answer in `response`'s type: what it found, or its refusal.
fn answer<T: serde::Serialize>(response: &str, found: Result<T, AiError>) -> Payload {
    match found {
        Ok(body) => seal(response, &Response::ok(body)),
        Err(e) => refused(response, &e),
    }
}

/// Proposes a release's `ops` in turn; a refused one (another release
/// moved the version list first) is a conflict, answered in `response`'s
/// type, and nothing after it is written.
async fn in_turn(
    node: &Node,
    ops: Vec<Op>,
    response: &str,
    what: &str,
) -> Result<Option<Payload>, Failure> {
    match node.propose_in_turn(ops).await {
        Ok(()) => Ok(None),
        Err(ProposeError::Rejected(e)) => Ok(Some(refused(
            response,
            &AiError::Conflict(format!("the {what} changed while releasing: {e}")),
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The name a request gives in `field`, or its refusal in `response`'s
/// type.
fn required<'a>(
    given: Option<&'a str>,
    field: &'static str,
    response: &str,
) -> Result<&'a str, Box<Payload>> {
    given
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Box::new(refused(response, &AiError::invalid(field, "is required"))))
}

/// The server a request names, or its refusal in `response`'s type.
fn name<'a>(request: &'a McpRequest, response: &str) -> Result<&'a str, Box<Payload>> {
    required(request.mcp_name.as_deref(), "mcpName", response)
}

/// Answers a `QueryMcpServerRequest`.
pub(crate) fn query(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    const RESPONSE: &str = "QueryMcpServerResponse";
    let request: McpRequest = envelope.decode()?;
    let name = match name(&request, RESPONSE) {
        Ok(name) => name,
        Err(refusal) => return Ok(*refusal),
    };
    let namespace = crate::ai::namespace(request.namespace_id.as_deref());
    let found = mcp::detail(
        &node.registry(),
        &namespace,
        Some(name),
        None,
        request.version.as_deref(),
    );
    Ok(answer(
        RESPONSE,
        found.map(|detail| QueryMcpServerBody {
            mcp_server_detail_info: detail,
        }),
    ))
}

/// Answers a `ReleaseMcpServerRequest`: a new server, or a new version of
/// one, its items written as one (see [`mcp::Release`]).
pub(crate) async fn release(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    const RESPONSE: &str = "ReleaseMcpServerResponse";
    let request: McpRequest = envelope.decode()?;
    let spec = request
        .server_specification
        .clone()
        .filter(|s| !s.is_null())
        .ok_or_else(|| DecodeError::new("serverSpecification", "is required"))?;
    let namespace = crate::ai::namespace(request.namespace_id.as_deref());
    let planned = mcp::plan_publish(
        &node.registry(),
        &namespace,
        spec,
        request.tool_specification.clone().filter(|t| !t.is_null()),
        request.endpoint_specification.as_ref(),
        mcp::Publish::Release,
        node.now(),
    );
    let release = match planned {
        Ok(release) => release,
        Err(e) => return Ok(refused(RESPONSE, &e)),
    };
    if let Some(refusal) = in_turn(node, release.ops, RESPONSE, "server").await? {
        return Ok(refusal);
    }
    Ok(seal(
        RESPONSE,
        &Response::ok(ReleaseMcpServerBody { mcp_id: release.id }),
    ))
}

/// Answers a `McpServerEndpointRequest`: the address becomes (or stops
/// being) an instance of the server's endpoint service, owned by the
/// connection as any registration over it.
pub(crate) async fn endpoint(
    node: &Node,
    conn: &Arc<Conn>,
    envelope: &Envelope,
) -> Result<Payload, Failure> {
    const RESPONSE: &str = "McpServerEndpointResponse";
    let request: McpRequest = envelope.decode()?;
    let name = match name(&request, RESPONSE) {
        Ok(name) => name,
        Err(refusal) => return Ok(*refusal),
    };
    let kind = request.kind.clone().unwrap_or_default();
    if kind != REGISTER_ENDPOINT && kind != DEREGISTER_ENDPOINT {
        return Err(Failure::invalid(format!(
            "invalid type: '{kind}' is neither {REGISTER_ENDPOINT} nor {DEREGISTER_ENDPOINT}"
        )));
    }
    let namespace = crate::ai::namespace(request.namespace_id.as_deref());
    let service = {
        let registry = node.registry();
        mcp::detail(
            &registry,
            &namespace,
            Some(name),
            None,
            request.version.as_deref(),
        )
        .and_then(|detail| mcp::endpoint_service(&detail))
    };
    let service = match service {
        Ok(service) => service,
        Err(e) => return Ok(refused(RESPONSE, &e)),
    };
    let op = if kind == REGISTER_ENDPOINT {
        let address = request
            .address
            .clone()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| DecodeError::new("address", "is required"))?;
        let port = request
            .port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| DecodeError::new("port", "must be between 1 and 65535"))?;
        understudy_core::check_ip(&address).map_err(DecodeError::from)?;
        let mut spec = InstanceSpec::new(address, port);
        if let Some(version) = request.version.clone().filter(|v| !v.is_empty()) {
            spec.metadata.insert(VERSION_TAG.to_owned(), version);
        }
        Op::Register {
            service,
            owner: conn.owner(node),
            instances: vec![spec],
        }
    } else {
        Op::Deregister {
            service,
            owner: conn.owner(node),
        }
    };
    node.propose(op).await?;
    Ok(seal(
        RESPONSE,
        &Response::ok(McpServerEndpointBody { kind }),
    ))
}

/// Answers a `QueryAgentCardRequest`.
pub(crate) fn query_agent(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    const RESPONSE: &str = "QueryAgentCardResponse";
    let request: AgentRequest = envelope.decode()?;
    let name = match required(request.agent_name.as_deref(), "agentName", RESPONSE) {
        Ok(name) => name,
        Err(refusal) => return Ok(*refusal),
    };
    let found = a2a::registration(request.registration_type.as_deref()).and_then(|registration| {
        a2a::card(
            &node.registry(),
            &crate::ai::namespace(request.namespace_id.as_deref()),
            name,
            request.version.as_deref(),
            registration,
        )
    });
    Ok(answer(
        RESPONSE,
        found.map(|card| QueryAgentCardBody {
            agent_card_detail_info: card,
        }),
    ))
}

/// Answers a `ReleaseAgentCardRequest`: a new agent (registered as
/// `SERVICE` unless the request says otherwise), or a new version of one,
/// its items written as one; a version released before is left as it is.
pub(crate) async fn release_agent(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    const RESPONSE: &str = "ReleaseAgentCardResponse";
    let request: AgentRequest = envelope.decode()?;
    let planned = match request.agent_card.clone().filter(|c| !c.is_null()) {
        None => Err(AiError::invalid("agentCard", "is required")),
        Some(card) => a2a::registration(request.registration_type.as_deref()).and_then(|r| {
            a2a::plan_release(
                &node.registry(),
                &crate::ai::namespace(request.namespace_id.as_deref()),
                card,
                Some(r.unwrap_or(REGISTRATION_SERVICE)),
                a2a::Mode::Release {
                    latest: request.set_as_latest.unwrap_or(false),
                },
                node.now(),
            )
        }),
    };
    let ops = match planned {
        Ok(ops) => ops,
        Err(e) => return Ok(refused(RESPONSE, &e)),
    };
    if let Some(refusal) = in_turn(node, ops, RESPONSE, "agent").await? {
        return Ok(refusal);
    }
    Ok(seal(RESPONSE, &Response::ok(Empty {})))
}

/// Answers an `AgentEndpointRequest`: the endpoint becomes (or stops
/// being) an instance of the agent version's endpoint service, owned by
/// the connection as any registration over it.
pub(crate) async fn agent_endpoint(
    node: &Node,
    conn: &Arc<Conn>,
    envelope: &Envelope,
) -> Result<Payload, Failure> {
    const RESPONSE: &str = "AgentEndpointResponse";
    let request: AgentRequest = envelope.decode()?;
    let name = match required(request.agent_name.as_deref(), "agentName", RESPONSE) {
        Ok(name) => name,
        Err(refusal) => return Ok(*refusal),
    };
    let kind = request.kind.clone().unwrap_or_default();
    if kind != REGISTER_ENDPOINT && kind != DEREGISTER_ENDPOINT {
        return Ok(refused(
            RESPONSE,
            &AiError::invalid(
                "type",
                format!("should be {REGISTER_ENDPOINT} or {DEREGISTER_ENDPOINT}, but was '{kind}'"),
            ),
        ));
    }
    let namespace = crate::ai::namespace(request.namespace_id.as_deref());
    let (service, spec) = match a2a::endpoint_instance(&namespace, name, request.endpoint.as_ref())
    {
        Ok(planned) => planned,
        Err(e) => return Ok(refused(RESPONSE, &e)),
    };
    let op = if kind == REGISTER_ENDPOINT {
        Op::Register {
            service,
            owner: conn.owner(node),
            instances: vec![spec],
        }
    } else {
        Op::Deregister {
            service,
            owner: conn.owner(node),
        }
    };
    node.propose(op).await?;
    Ok(seal(RESPONSE, &Response::ok(AgentEndpointBody { kind })))
}
