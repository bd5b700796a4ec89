//! `/nacos/v3/admin/ai/mcp`: the MCP server registry's admin API, as
//! nacos-maintainer-sdk-python and MCP routers call it. The registry is
//! [`crate::mcp`]; this reads the form, proposes and answers.

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
use crate::mcp::{self, McpError, Publish};
use crate::node::Node;

type Input = Result<Params, ApiError>;

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            "/nacos/v3/admin/ai/mcp",
            get(detail).post(create).put(update).delete(delete),
        ),
        ("/nacos/v3/admin/ai/mcp/list", get(list)),
    ]
}

fn api_error(e: McpError) -> ApiError {
    match e {
        McpError::Invalid { field, reason } => ApiError::invalid(field, reason),
        McpError::NotFound(message) => ApiError::not_found(ErrorCode::McpServerNotFound, message),
        McpError::VersionNotFound(message) => {
            ApiError::not_found(ErrorCode::McpServerVersionNotFound, message)
        }
        McpError::Conflict(message) => ApiError::conflict("serverSpecification", message),
    }
}

fn namespace(p: &Params) -> String {
    mcp::namespace(p.get("namespaceId"))
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
    write(node, planned.ops).await?;
    Ok(planned.id)
}

/// Proposes `ops` as one entry; a refused one (the version list moved
/// under a compare-and-set) is a conflict.
async fn write(node: &Node, ops: Vec<understudy_core::Op>) -> Result<(), ApiError> {
    for result in node.propose_all(ops).await? {
        if let Err(e) = result {
            return Err(ApiError::conflict(
                "mcpName",
                format!("the server changed meanwhile: {e}"),
            ));
        }
    }
    Ok(())
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
            write(&node, ops).await?;
            Ok("ok")
        }
        .await,
    )
}
