//! Nacos 3's AI registry requests (module `ai`): query and release an MCP
//! server, and register or deregister one of its endpoints. The registry
//! itself is [`crate::mcp`]; this decodes, proposes and answers.

use std::sync::Arc;

use understudy_core::{InstanceSpec, Op};
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_ai::{
    McpRequest, McpServerEndpointBody, QueryMcpServerBody, ReleaseMcpServerBody,
    DEREGISTER_ENDPOINT, REGISTER_ENDPOINT, VERSION_TAG,
};
use understudy_proto::nacos_rpc::{error_response_as, seal, Envelope, Response};
use understudy_proto::DecodeError;

use super::conn::Conn;
use super::kind::Failure;
use crate::mcp::{self, McpError};
use crate::node::Node;

fn refused(response: &str, e: &McpError) -> Payload {
    error_response_as(response, e.code(), e.to_string())
}

/// The server a request names, or its refusal in `response`'s type.
fn name<'a>(request: &'a McpRequest, response: &str) -> Result<&'a str, Box<Payload>> {
    request
        .mcp_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            let missing = McpError::Invalid {
                field: "mcpName",
                reason: "is required".to_owned(),
            };
            Box::new(refused(response, &missing))
        })
}

/// Answers a `QueryMcpServerRequest`.
pub(crate) fn query(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    const RESPONSE: &str = "QueryMcpServerResponse";
    let request: McpRequest = envelope.decode()?;
    let name = match name(&request, RESPONSE) {
        Ok(name) => name,
        Err(refusal) => return Ok(*refusal),
    };
    let namespace = mcp::namespace(request.namespace_id.as_deref());
    let found = mcp::detail(
        &node.registry(),
        &namespace,
        Some(name),
        None,
        request.version.as_deref(),
    );
    Ok(match found {
        Ok(detail) => seal(
            RESPONSE,
            &Response::ok(QueryMcpServerBody {
                mcp_server_detail_info: detail,
            }),
        ),
        Err(e) => refused(RESPONSE, &e),
    })
}

/// Answers a `ReleaseMcpServerRequest`: a new server, or a new version of
/// one, written as one raft entry.
pub(crate) async fn release(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    const RESPONSE: &str = "ReleaseMcpServerResponse";
    let request: McpRequest = envelope.decode()?;
    let spec = request
        .server_specification
        .clone()
        .filter(|s| !s.is_null())
        .ok_or_else(|| DecodeError::new("serverSpecification", "is required"))?;
    let namespace = mcp::namespace(request.namespace_id.as_deref());
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
    for result in node.propose_all(release.ops).await? {
        if let Err(e) = result {
            // The version list moved under us: another release won.
            return Ok(refused(
                RESPONSE,
                &McpError::Conflict(format!("the server changed while releasing: {e}")),
            ));
        }
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
    let namespace = mcp::namespace(request.namespace_id.as_deref());
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
