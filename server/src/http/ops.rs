//! Operator, console and probe endpoints that clients and tools call
//! around the naming API: server status and metrics, switches, health and
//! readiness, server state, cluster members, login, namespaces and the
//! Prometheus scrape.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use understudy_core::{NamespaceId, Op};
use understudy_proto::nacos::{
    switches, ConsoleResult, ErrorCode, LoginReply, NacosResult, NamespaceJson,
};

use super::error::{plain, v1_true, v2_true, ApiError};
use super::params::Params;
use super::AppState;
use crate::node::Node;

type Input = Result<Params, ApiError>;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `GET /nacos/v1/ns/operator/metrics`: Java 2.x checks `status == "UP"`.
pub(crate) async fn operator_metrics(State(node): State<Node>, params: Input) -> Response {
    let only_status = params.as_ref().map_or(true, |p| p.flag("onlyStatus", true));
    if only_status {
        return Json(json!({"status": "UP"})).into_response();
    }
    let counts = node.registry().counts();
    Json(json!({
        "status": "UP",
        "serviceCount": counts.services,
        "instanceCount": counts.instances,
        "subscribeCount": 0,
        "responsibleInstanceCount": counts.instances,
        "clientCount": 0,
        "connectionBasedClientCount": 0,
        "ephemeralIpPortClientCount": 0,
        "persistentIpPortClientCount": 0,
        "responsibleClientCount": 0,
    }))
    .into_response()
}

pub(crate) async fn operator_metrics_v2(State(node): State<Node>, params: Input) -> Response {
    let counts = node.registry().counts();
    let mut data = json!({"status": "UP"});
    if !params.as_ref().map_or(true, |p| p.flag("onlyStatus", true)) {
        data["serviceCount"] = counts.services.into();
        data["instanceCount"] = counts.instances.into();
    }
    Json(NacosResult::success(data)).into_response()
}

fn current_switches(state: &AppState) -> Value {
    let mut all = switches(state.node.config().registry.health.beat_interval);
    let overrides = state.switches.lock().unwrap_or_else(|p| p.into_inner());
    for (k, v) in overrides.iter() {
        all[k] = v.clone();
    }
    all
}

pub(crate) async fn get_switches(State(state): State<AppState>) -> Response {
    Json(current_switches(&state)).into_response()
}

pub(crate) async fn get_switches_v2(State(state): State<AppState>) -> Response {
    Json(NacosResult::success(current_switches(&state))).into_response()
}

/// `PUT /operator/switches`: known entries only, and the value must have
/// the entry's type. Stored on this node and shown by `GET`.
fn put_switch(state: &AppState, p: &Params) -> Result<(), ApiError> {
    let entry = p.required("entry")?;
    let raw = p.required("value")?;
    let defaults = switches(state.node.config().registry.health.beat_interval);
    let value = match defaults.get(entry) {
        Some(Value::Bool(_)) => match raw.trim().to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => {
                return Err(ApiError::invalid(
                    "value",
                    format!("'{entry}' takes true or false"),
                ))
            }
        },
        Some(Value::Number(_)) => raw
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .and_then(|n| {
                if n.fract() == 0.0 && n.abs() < 9.0e15 {
                    Some(Value::from(n as i64))
                } else {
                    serde_json::Number::from_f64(n).map(Value::Number)
                }
            })
            .ok_or_else(|| ApiError::invalid("value", format!("'{entry}' takes a number")))?,
        Some(Value::String(_)) => Value::String(raw.to_owned()),
        _ => {
            return Err(ApiError::invalid(
                "entry",
                format!(
                    "'{}' is not a switch that can be set",
                    super::params::clip(entry)
                ),
            ))
        }
    };
    state
        .switches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(entry.to_owned(), value);
    Ok(())
}

pub(crate) async fn put_switches(State(state): State<AppState>, params: Input) -> Response {
    params
        .and_then(|p| put_switch(&state, &p))
        .map_or_else(ApiError::v1, |()| plain("ok"))
}

pub(crate) async fn put_switches_v2(State(state): State<AppState>, params: Input) -> Response {
    params
        .and_then(|p| put_switch(&state, &p))
        .map_or_else(ApiError::v2, |()| {
            Json(NacosResult::success("ok")).into_response()
        })
}

pub(crate) async fn health_server(State(node): State<Node>) -> Response {
    let services = node.registry().counts().services;
    Json(json!({
        "msg": format!(
            "Hello! I am Nacos-Naming and healthy! total services: {services}, local port:{}",
            node.config().http_port
        )
    }))
    .into_response()
}

pub(crate) async fn server_state(State(node): State<Node>) -> Response {
    Json(server_state_map(&node)).into_response()
}

/// What the server is and runs with, as Nacos' server state map.
pub(crate) fn server_state_map(node: &Node) -> Value {
    let mode = if node.members().len() > 1 {
        "cluster"
    } else {
        "standalone"
    };
    json!({
        "version": VERSION,
        "standalone_mode": mode,
        "startup_mode": mode,
        "function_mode": "naming",
        "server_port": node.config().http_port.to_string(),
        "auth_enabled": node.auth().enabled().to_string(),
        "login_page_enabled": "false",
        "auth_system_type": "nacos",
        "console_ui_enabled": "false",
    })
}

pub(crate) async fn ok_text() -> Response {
    plain("OK")
}

pub(crate) async fn cluster_nodes(State(node): State<Node>) -> Response {
    let config = node.config();
    let address = node.http_address();
    Json(ConsoleResult::ok(json!([{
        "ip": address.ip().to_string(),
        "port": address.port(),
        "state": "UP",
        "address": address.to_string(),
        "extendInfo": {"nodeId": config.node_id, "dc": config.dc},
        "abilities": {},
    }])))
    .into_response()
}

/// `GET /understudy/v1/cluster`: this node's view of the cluster.
pub(crate) async fn cluster_status(State(node): State<Node>) -> Response {
    Json(node.node_status()).into_response()
}

/// `POST /understudy/v1/raft/compact`: snapshots this node's applied
/// state and purges its raft log up to it, at once rather than at the
/// next 1,000 entries (before a memory measurement, say).
pub(crate) async fn compact(State(node): State<Node>) -> Response {
    match node.compact().await {
        Ok(index) => Json(serde_json::json!({ "compactedTo": index })).into_response(),
        Err(e) => ApiError::unavailable(format!("the raft log could not be compacted: {e}")).v2(),
    }
}

fn membership_error(e: crate::raft::MembershipError) -> ApiError {
    ApiError::unavailable(e.to_string())
}

/// `POST /understudy/v1/cluster/members?id=&raftAddr=&dc=&role=voter|learner`:
/// adds a member on the leader; it joins as a learner, catches up, and is
/// promoted unless `role=learner`.
pub(crate) async fn add_member(State(node): State<Node>, params: Input) -> Response {
    let added = async {
        let p = params?;
        let id: u64 = p
            .number("id")?
            .filter(|id| *id > 0)
            .ok_or_else(|| ApiError::invalid("id", "a positive node id is required"))?;
        let raft_addr = p.required("raftAddr")?.trim().to_owned();
        if !raft_addr
            .rsplit_once(':')
            .is_some_and(|(h, port)| !h.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
        {
            return Err(ApiError::invalid(
                "raftAddr",
                format!("'{raft_addr}' is not HOST:PORT"),
            ));
        }
        let role = match p.get("role").unwrap_or("voter") {
            "voter" => crate::raft::Voting::Voter,
            "learner" => crate::raft::Voting::Learner,
            other => {
                return Err(ApiError::invalid(
                    "role",
                    format!("'{other}' is neither voter nor learner"),
                ))
            }
        };
        let member = crate::raft::Member {
            raft_addr,
            dc: p.get("dc").unwrap_or_default().to_owned(),
        };
        node.add_member(id, member, role)
            .await
            .map_err(membership_error)
    }
    .await;
    match added {
        Ok(()) => Json(node.cluster_status()).into_response(),
        Err(e) => e.v2(),
    }
}

/// `DELETE /understudy/v1/cluster/members?id=`: removes a member.
pub(crate) async fn remove_member(State(node): State<Node>, params: Input) -> Response {
    let removed = async {
        let id: u64 = params?
            .number("id")?
            .ok_or_else(|| ApiError::missing("id"))?;
        node.remove_member(id).await.map_err(membership_error)
    }
    .await;
    match removed {
        Ok(()) => Json(node.cluster_status()).into_response(),
        Err(e) => e.v2(),
    }
}

pub(crate) async fn cluster_health() -> Response {
    Json(ConsoleResult::ok("UP")).into_response()
}

/// Login: checks the password (with auth on) and issues a signed token.
/// With auth off any credentials get one, as clients require (Python 3.x
/// fails every call if its login fails).
pub(crate) async fn login(State(node): State<Node>, params: Input) -> Response {
    let params = match params {
        Ok(params) => params,
        Err(e) => return e.v1(),
    };
    let username = params.get("username").unwrap_or("nacos").to_owned();
    let password = params.get("password").unwrap_or_default().to_owned();
    let now = node.now();
    let auth = node.auth().clone();
    let user = username.clone();
    // A bcrypt check takes milliseconds of CPU: not on the async threads.
    let issued = tokio::task::spawn_blocking(move || auth.login(&user, &password, now)).await;
    match issued {
        Ok(Ok(issued)) => {
            let reply = LoginReply {
                access_token: issued.token.clone(),
                token_ttl: issued.ttl_s,
                global_admin: issued.admin,
                username,
            };
            let bearer = format!("Bearer {}", issued.token);
            ([(AUTHORIZATION, bearer)], Json(reply)).into_response()
        }
        Ok(Err(denied)) => (StatusCode::FORBIDDEN, plain(denied.to_string())).into_response(),
        Err(e) => ApiError::unavailable(format!("the login could not be checked: {e}")).v1(),
    }
}

// ---- namespaces ----------------------------------------------------------

fn namespace_json(node: &Node, id: &NamespaceId) -> Option<NamespaceJson> {
    let registry = node.registry();
    registry
        .namespaces()
        .iter()
        .find(|n| n.id == *id)
        .map(|n| NamespaceJson::new(n, registry.config_count(&n.id)))
}

fn namespace_list(node: &Node) -> Vec<NamespaceJson> {
    let registry = node.registry();
    registry
        .namespaces()
        .iter()
        .map(|n| NamespaceJson::new(n, registry.config_count(&n.id)))
        .collect()
}

static NAMESPACE_IDS: AtomicU64 = AtomicU64::new(0);

fn new_namespace_id(node: &Node) -> String {
    let serial = NAMESPACE_IDS.fetch_add(1, Ordering::Relaxed);
    format!("ns-{:x}-{serial:x}", node.now())
}

pub(crate) fn namespace_id(p: &Params, field: &'static str) -> Result<NamespaceId, ApiError> {
    NamespaceId::parse(p.required(field)?).map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// `GET /nacos/v1/console/namespaces` in its three shapes.
pub(crate) async fn namespaces_get(State(node): State<Node>, params: Input) -> Response {
    let p = match params {
        Ok(p) => p,
        Err(e) => return e.v1(),
    };
    if p.flag("checkNamespaceIdExist", false) {
        let exists = p
            .get("customNamespaceId")
            .and_then(|id| NamespaceId::parse(id).ok())
            .is_some_and(|id| {
                node.registry()
                    .namespaces()
                    .iter()
                    .any(|n| n.id == id && n.explicit)
            });
        return Json(exists).into_response();
    }
    if p.get("show") == Some("all") {
        let id = NamespaceId::parse(p.get("namespaceId").unwrap_or(""));
        return match id.ok().and_then(|id| namespace_json(&node, &id)) {
            Some(ns) => Json(ns).into_response(),
            None => ApiError::not_found(
                understudy_proto::nacos::ErrorCode::NamespaceNotExist,
                "namespace does not exist",
            )
            .v1(),
        };
    }
    Json(ConsoleResult::ok(namespace_list(&node))).into_response()
}

pub(crate) async fn create_namespace(
    node: &Node,
    p: &Params,
    id_field: &'static str,
    name_field: &'static str,
) -> Result<(), ApiError> {
    let id = match p.get(id_field) {
        Some(raw) => {
            NamespaceId::parse(raw).map_err(|e| ApiError::invalid(id_field, e.to_string()))?
        }
        None => NamespaceId::parse(&new_namespace_id(node))?,
    };
    let name = p.required(name_field)?.to_owned();
    let description = p.get("namespaceDesc").unwrap_or("").to_owned();
    node.propose(Op::CreateNamespace {
        namespace: id,
        name,
        description,
    })
    .await?;
    Ok(())
}

pub(crate) async fn update_namespace(
    node: &Node,
    p: &Params,
    id_field: &'static str,
    name_field: &'static str,
) -> Result<(), ApiError> {
    let id = namespace_id(p, id_field)?;
    let name = p.required(name_field)?.to_owned();
    let description = p.get("namespaceDesc").unwrap_or("").to_owned();
    node.propose(Op::UpdateNamespace {
        namespace: id,
        name,
        description,
    })
    .await?;
    Ok(())
}

pub(crate) async fn delete_namespace(node: &Node, p: &Params) -> Result<(), ApiError> {
    let id = namespace_id(p, "namespaceId")?;
    node.propose(Op::DeleteNamespace { namespace: id }).await?;
    Ok(())
}

pub(crate) async fn namespaces_post(State(node): State<Node>, params: Input) -> Response {
    let created =
        async { create_namespace(&node, &params?, "customNamespaceId", "namespaceName").await }
            .await;
    match created {
        // Nacos' v1 console answers a namespace that exists with `false`.
        Err(e) if e.code() == ErrorCode::NamespaceAlreadyExist => Json(false).into_response(),
        created => v1_true(created),
    }
}

pub(crate) async fn namespaces_put(State(node): State<Node>, params: Input) -> Response {
    v1_true(
        async { update_namespace(&node, &params?, "namespace", "namespaceShowName").await }.await,
    )
}

pub(crate) async fn namespaces_delete(State(node): State<Node>, params: Input) -> Response {
    v1_true(async { delete_namespace(&node, &params?).await }.await)
}

pub(crate) async fn namespace_get_v2(State(node): State<Node>, params: Input) -> Response {
    let result = params.and_then(|p| match p.get("namespaceId") {
        None => Ok(json!(namespace_list(&node))),
        Some(raw) => {
            let id = NamespaceId::parse(raw)
                .map_err(|e| ApiError::invalid("namespaceId", e.to_string()))?;
            namespace_json(&node, &id)
                .map(|ns| json!(ns))
                .ok_or_else(|| {
                    ApiError::not_found(
                        understudy_proto::nacos::ErrorCode::NamespaceNotExist,
                        "namespace does not exist",
                    )
                })
        }
    });
    result.map_or_else(ApiError::v2, |data| {
        Json(NacosResult::success(data)).into_response()
    })
}

pub(crate) async fn namespace_post_v2(State(node): State<Node>, params: Input) -> Response {
    v2_true(async { create_namespace(&node, &params?, "namespaceId", "namespaceName").await }.await)
}

pub(crate) async fn namespace_put_v2(State(node): State<Node>, params: Input) -> Response {
    v2_true(async { update_namespace(&node, &params?, "namespaceId", "namespaceName").await }.await)
}

pub(crate) async fn namespace_delete_v2(State(node): State<Node>, params: Input) -> Response {
    v2_true(async { delete_namespace(&node, &params?).await }.await)
}

// ---- native probes and metrics -------------------------------------------

pub(crate) async fn health() -> Response {
    Json(json!({"status": "UP"})).into_response()
}

/// Ready once the node applies writes: a single node always does while it
/// runs; the raft layer will add "has a leader and has caught up".
pub(crate) async fn ready(State(node): State<Node>) -> Response {
    let revision = node.registry().revision();
    Json(json!({"status": "UP", "appliedRevision": revision})).into_response()
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        super::scrape::render(&state.node, &state.metrics),
    )
        .into_response()
}
