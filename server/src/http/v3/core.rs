//! `/nacos/v3/admin/core`: the server's state and probes, the cluster's
//! members, and namespaces.

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde_json::{json, Value};
use understudy_core::NamespaceId;
use understudy_proto::nacos::ErrorCode;
use understudy_proto::nacos3::NamespaceV3;

use super::super::error::ApiError;
use super::super::ops;
use super::super::params::Params;
use super::{done, reply, Route};
use crate::node::Node;

type Input = Result<Params, ApiError>;

pub(super) fn routes() -> Vec<Route> {
    vec![
        ("/nacos/v3/admin/core/state", get(state)),
        ("/nacos/v3/admin/core/state/liveness", get(probe)),
        ("/nacos/v3/admin/core/state/readiness", get(probe)),
        ("/nacos/v3/admin/core/cluster/node/self", get(node_self)),
        (
            "/nacos/v3/admin/core/cluster/node/list",
            get(node_list).put(|| async {
                ApiError::not_implemented(
                    "understudy's members are its raft membership: change them with POST/DELETE /understudy/v1/cluster/members",
                )
                .v2()
            }),
        ),
        (
            "/nacos/v3/admin/core/namespace",
            get(namespace_get)
                .post(namespace_create)
                .put(namespace_update)
                .delete(namespace_delete),
        ),
        ("/nacos/v3/admin/core/namespace/list", get(namespace_list)),
        ("/nacos/v3/admin/core/namespace/check", get(namespace_check)),
    ]
}

/// `GET /core/state`: what the server is and runs with.
async fn state(State(node): State<Node>) -> Response {
    reply(Ok(ops::server_state_map(&node)))
}

async fn probe() -> Response {
    reply(Ok("ok"))
}

/// Nacos' `Member` fields around `extendInfo`.
fn member_json(ip: &str, port: u16, address: &str, extend_info: Value) -> Value {
    json!({
        "ip": ip,
        "port": port,
        "state": "UP",
        "address": address,
        "failAccessCnt": 0,
        "extendInfo": extend_info,
        "abilities": {},
    })
}

/// A member as Nacos' `Member`: understudy knows its peers by their raft
/// address, so `address` is that; `extendInfo` carries the node id, DC
/// and raft role.
fn member(node: &Node) -> Vec<Value> {
    let status = node.cluster_status();
    let mut members: Vec<Value> = status
        .members
        .iter()
        .map(|m| {
            let me = m.id == status.node_id;
            let (ip, port) = m
                .raft_addr
                .rsplit_once(':')
                .map(|(h, p)| (h.to_owned(), p.parse::<u16>().unwrap_or(0)))
                .unwrap_or_else(|| (m.raft_addr.clone(), 0));
            let (ip, port, address) = if me {
                let address = node.http_address();
                (
                    address.ip().to_string(),
                    address.port(),
                    address.to_string(),
                )
            } else {
                (ip, port, m.raft_addr.clone())
            };
            let role = if status.leader == Some(m.id) {
                "leader"
            } else if m.voter {
                "follower"
            } else {
                "learner"
            };
            member_json(
                &ip,
                port,
                &address,
                json!({
                    "nodeId": m.id,
                    "dc": m.dc,
                    "raftAddr": m.raft_addr,
                    "raftRole": role,
                    "self": me,
                    "version": env!("CARGO_PKG_VERSION"),
                }),
            )
        })
        .collect();
    if members.is_empty() {
        // A node outside any membership still reports itself.
        let config = node.config();
        let address = node.http_address();
        members.push(member_json(
            &address.ip().to_string(),
            address.port(),
            &address.to_string(),
            json!({"nodeId": config.node_id, "dc": config.dc, "self": true,
                "version": env!("CARGO_PKG_VERSION")}),
        ));
    }
    members
}

async fn node_self(State(node): State<Node>) -> Response {
    let me = member(&node)
        .into_iter()
        .find(|m| m["extendInfo"]["self"] == json!(true));
    reply(Ok(me.unwrap_or(Value::Null)))
}

/// Nacos' node states.
const NODE_STATES: [&str; 5] = ["STARTING", "UP", "SUSPICIOUS", "DOWN", "ISOLATION"];

/// `GET /core/cluster/node/list?address=&state=`: `address` keeps the
/// members whose address starts with it, `state` (one of Nacos' node
/// states) those in that state.
async fn node_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let address = p.get("address").unwrap_or("");
        let state = p.get("state").map(str::trim).filter(|s| !s.is_empty());
        if let Some(state) = state.filter(|s| !NODE_STATES.contains(s)) {
            return Err(ApiError::invalid(
                "state",
                format!("'{state}' is none of {}", NODE_STATES.join(", ")),
            ));
        }
        Ok(member(&node)
            .into_iter()
            .filter(|m| m["address"].as_str().unwrap_or("").starts_with(address))
            .filter(|m| state.is_none_or(|s| m["state"].as_str() == Some(s)))
            .collect::<Vec<_>>())
    }))
}

// ---- namespaces ----------------------------------------------------------

fn namespaces(node: &Node) -> Vec<NamespaceV3> {
    let registry = node.registry();
    registry
        .namespaces()
        .iter()
        .map(|n| NamespaceV3::new(n, registry.config_count(&n.id)))
        .collect()
}

fn namespace_of(p: &Params) -> Result<NamespaceId, ApiError> {
    ops::namespace_id(p, "namespaceId")
}

async fn namespace_list(State(node): State<Node>) -> Response {
    reply(Ok(namespaces(&node)))
}

async fn namespace_get(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let id = namespace_of(&p)?;
        namespaces(&node)
            .into_iter()
            .find(|n| n.namespace == id.as_str())
            .ok_or_else(|| {
                ApiError::not_found(
                    ErrorCode::NamespaceNotExist,
                    format!("namespaceId [ {id} ] not exist"),
                )
            })
    }))
}

/// `GET /core/namespace/check`: 1 if a namespace with this id was
/// created, else 0 (the default namespace was not: 0, as Nacos).
async fn namespace_check(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let id = namespace_of(&p)?;
        let exists = node
            .registry()
            .namespaces()
            .iter()
            .any(|n| n.id == id && n.explicit && !id.is_public());
        Ok(u8::from(exists))
    }))
}

async fn namespace_create(State(node): State<Node>, params: Input) -> Response {
    done(
        async { ops::create_namespace(&node, &params?, "namespaceId", "namespaceName").await }
            .await,
    )
}

async fn namespace_update(State(node): State<Node>, params: Input) -> Response {
    done(
        async { ops::update_namespace(&node, &params?, "namespaceId", "namespaceName").await }
            .await,
    )
}

async fn namespace_delete(State(node): State<Node>, params: Input) -> Response {
    done(async { ops::delete_namespace(&node, &params?).await }.await)
}
