//! `/nacos/v3/admin/ai/mcp` and `/nacos/v3/admin/ai/a2a`: the admin API
//! of the MCP server and A2A agent registries, as
//! nacos-maintainer-sdk-python and MCP routers call it. The registry is
//! [`crate::ai`]; this reads the form, proposes and answers.

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde_json::Value;
use understudy_proto::nacos::ErrorCode;
use understudy_proto::nacos3::Page;
use understudy_proto::nacos_ai::EndpointSpec;

use super::super::error::ApiError;
use super::super::params::Params;
use super::{page, reply, Route};
use crate::ai::a2a::{self, Mode};
use crate::ai::mcp::{self, Publish};
use crate::ai::AiError;
use crate::node::Node;
use crate::write::ProposeError;

type Input = Result<Params, ApiError>;

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            "/nacos/v3/admin/ai/mcp",
            get(detail).post(create).put(update).delete(delete),
        ),
        ("/nacos/v3/admin/ai/mcp/list", get(list)),
        (
            "/nacos/v3/admin/ai/a2a",
            get(agent_card)
                .post(register_agent)
                .put(update_agent)
                .delete(delete_agent),
        ),
        ("/nacos/v3/admin/ai/a2a/list", get(list_agents)),
        ("/nacos/v3/admin/ai/a2a/version/list", get(agent_versions)),
    ]
}

fn api_error(e: AiError) -> ApiError {
    match e {
        AiError::Invalid { field, reason } => ApiError::invalid(field, reason),
        AiError::NotFound(message) => ApiError::not_found(ErrorCode::McpServerNotFound, message),
        AiError::VersionNotFound(message) => {
            ApiError::not_found(ErrorCode::McpServerVersionNotFound, message)
        }
        AiError::Conflict(message) => ApiError::conflict("serverSpecification", message),
    }
}

fn agent_error(e: AiError) -> ApiError {
    match e {
        AiError::Invalid { field, reason } => ApiError::invalid(field, reason),
        AiError::NotFound(message) => ApiError::not_found(ErrorCode::AgentNotFound, message),
        AiError::VersionNotFound(message) => {
            ApiError::not_found(ErrorCode::AgentVersionNotFound, message)
        }
        AiError::Conflict(message) => ApiError::conflict("agentCard", message),
    }
}

fn namespace(p: &Params) -> String {
    crate::ai::namespace(p.get("namespaceId"))
}

/// `mcpName` or `mcpId`: one of them names the server.
fn named(p: &Params) -> Result<(Option<&str>, Option<&str>), ApiError> {
    let (name, id) = (p.get("mcpName"), p.get("mcpId"));
    if name.is_none() && id.is_none() {
        return Err(ApiError::missing("mcpName"));
    }
    Ok((name, id))
}

/// A JSON form field.
fn json_field(p: &Params, field: &'static str) -> Result<Option<Value>, ApiError> {
    match p.get(field) {
        None => Ok(None),
        Some(raw) => serde_json::from_str::<Value>(raw)
            .map(|v| Some(v).filter(|v| !v.is_null()))
            .map_err(|e| ApiError::invalid(field, format!("is not JSON: {e}"))),
    }
}

/// `GET /ai/mcp?mcpName|mcpId&version`: the server's detail.
async fn detail(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (name, id) = named(&p)?;
        mcp::detail(&node.registry(), &namespace(&p), name, id, p.get("version")).map_err(api_error)
    }))
}

/// `GET /ai/mcp/list?mcpName&search=accurate|blur&pageNo&pageSize`.
async fn list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (page_no, page_size) = page(&p)?;
        let blur = p.blur(false)?;
        let all = mcp::list(&node.registry(), &namespace(&p), p.get("mcpName"), blur);
        Ok(Page::slice(all, page_no, page_size))
    }))
}

async fn publish(node: &Node, p: &Params, mode: Publish) -> Result<String, ApiError> {
    let mut spec = json_field(p, "serverSpecification")?
        .ok_or_else(|| ApiError::missing("serverSpecification"))?;
    if spec["name"].as_str().is_none_or(str::is_empty) {
        if let (Some(name), Some(object)) = (p.get("mcpName"), spec.as_object_mut()) {
            object.insert("name".to_owned(), Value::from(name));
        }
    }
    let tools = json_field(p, "toolSpecification")?;
    let endpoint: Option<EndpointSpec> = json_field(p, "endpointSpecification")?
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| ApiError::invalid("endpointSpecification", e.to_string()))?;
    let planned = mcp::plan_publish(
        &node.registry(),
        &namespace(p),
        spec,
        tools,
        endpoint.as_ref(),
        mode,
        node.now(),
    )
    .map_err(api_error)?;
    write(node, planned.ops, "mcpName").await?;
    Ok(planned.id)
}

/// Proposes `ops` in turn; a refused one (the version list moved under a
/// compare-and-set) is a conflict over `field`, and nothing after it is
/// written.
async fn write(
    node: &Node,
    ops: Vec<understudy_core::Op>,
    field: &'static str,
) -> Result<(), ApiError> {
    match node.propose_in_turn(ops).await {
        Ok(()) => Ok(()),
        Err(ProposeError::Rejected(e)) => Err(ApiError::conflict(
            field,
            format!("it changed meanwhile: {e}"),
        )),
        Err(e) => Err(e.into()),
    }
}

/// `POST /ai/mcp` (form): a new server; answers its id.
async fn create(State(node): State<Node>, params: Input) -> Response {
    reply(async { publish(&node, &params?, Publish::Create).await }.await)
}

/// `PUT /ai/mcp` (form, `latest` default true): a new version, or a new
/// specification of one.
async fn update(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let p = params?;
            let latest = p.flag("latest", true);
            publish(&node, &p, Publish::Update { latest }).await?;
            Ok("ok")
        }
        .await,
    )
}

/// `DELETE /ai/mcp?mcpName|mcpId&version`: one version, or all.
async fn delete(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let p = params?;
            let (name, id) = named(&p)?;
            let ops =
                mcp::plan_delete(&node.registry(), &namespace(&p), name, id, p.get("version"))
                    .map_err(api_error)?;
            write(&node, ops, "mcpName").await?;
            Ok("ok")
        }
        .await,
    )
}

/// `agentName`, required.
fn agent_name(p: &Params) -> Result<&str, ApiError> {
    p.get("agentName")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::missing("agentName"))
}

/// `GET /ai/a2a?agentName&version&registrationType`: the agent's card.
async fn agent_card(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let registration = a2a::registration(p.get("registrationType")).map_err(agent_error)?;
        a2a::card(
            &node.registry(),
            &namespace(&p),
            agent_name(&p)?,
            p.get("version"),
            registration,
        )
        .map_err(agent_error)
    }))
}

/// `GET /ai/a2a/list?agentName&search=accurate|blur&pageNo&pageSize`: no
/// name lists every agent.
async fn list_agents(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (page_no, page_size) = page(&p)?;
        let blur = p.blur(false)?;
        let all = a2a::list(&node.registry(), &namespace(&p), p.get("agentName"), blur);
        Ok(Page::slice(all, page_no, page_size))
    }))
}

/// `GET /ai/a2a/version/list?agentName`: the agent's versions.
async fn agent_versions(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        a2a::versions(&node.registry(), &namespace(&p), agent_name(&p)?).map_err(agent_error)
    }))
}

async fn release_agent(node: &Node, p: &Params, mode: Mode) -> Result<&'static str, ApiError> {
    let card = json_field(p, "agentCard")?.ok_or_else(|| ApiError::missing("agentCard"))?;
    let registration = a2a::registration(p.get("registrationType")).map_err(agent_error)?;
    let ops = a2a::plan_release(
        &node.registry(),
        &namespace(p),
        card,
        registration,
        mode,
        node.now(),
    )
    .map_err(agent_error)?;
    write(node, ops, "agentCard").await?;
    Ok("ok")
}

/// `POST /ai/a2a` (form: `agentCard`, `registrationType` default `URL`):
/// a new agent.
async fn register_agent(State(node): State<Node>, params: Input) -> Response {
    reply(async { release_agent(&node, &params?, Mode::Register).await }.await)
}

/// `PUT /ai/a2a` (form: `agentCard`, `registrationType`, `setAsLatest`
/// default false): a new version of an agent, or a version's new card.
async fn update_agent(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let p = params?;
            let latest = p.flag("setAsLatest", false);
            release_agent(&node, &p, Mode::Update { latest }).await
        }
        .await,
    )
}

/// `DELETE /ai/a2a?agentName&version`: one version, or all.
async fn delete_agent(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let p = params?;
            let ops = a2a::plan_delete(
                &node.registry(),
                &namespace(&p),
                agent_name(&p)?,
                p.get("version"),
            )
            .map_err(agent_error)?;
            write(&node, ops, "agentName").await?;
            Ok("ok")
        }
        .await,
    )
}
