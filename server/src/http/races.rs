//! The client-race endpoints of the chaos admin API (see
//! [`crate::races`]). They act on the node asked: a connection lives on
//! one node, so a hold is set, and acknowledgements are read, where the
//! client is connected.
//!
//! - `POST /understudy/v1/chaos/hold?serviceName=S[&groupName][&namespaceId]
//!   [&connectionId=C][&timeout=10s][&ip&port[&clusterName]&enabled|weight|metadata]`:
//!   hold the next request of the first connection (or of `C`) that
//!   subscribes to S, until the instance update given by `ip`… (or,
//!   without one, the next change of S) has been pushed to it and
//!   acknowledged.
//! - `POST /understudy/v1/chaos/unhold`: clear every hold that has not
//!   fired; a request being held goes on.
//! - `GET /understudy/v1/chaos/holds`: every hold and where it is.
//! - `POST /understudy/v1/chaos/trace?serviceName=S…`: trace S.
//! - `GET /understudy/v1/chaos/events[?serviceName=S…][&connectionId=C]`:
//!   the traced events in the order this node saw them.
//! - `GET /understudy/v1/chaos/acks?serviceName=S…[&connectionId=C][&wait=5s]`:
//!   the revision of S and, per subscribed connection, the revision of
//!   the newest push of S it acknowledged; with `wait`, answered once
//!   every one (or C) has acknowledged the revision S had when asked, or
//!   409 when `wait` ran out first.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use understudy_core::InstancePatch;
use understudy_proto::nacos::ErrorCode;

use super::error::ApiError;
use super::params::{Api, Params};
use crate::faults::parse_duration;
use crate::races::{HoldAction, HoldSpec};
use crate::Node;

type Input = Result<Params, ApiError>;

/// How long a hold holds at most unless told.
const HOLD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest `timeout` or `wait` accepted.
const LONGEST: Duration = Duration::from_secs(300);

fn duration(p: &Params, field: &'static str, default: Duration) -> Result<Duration, ApiError> {
    let Some(text) = p.get(field) else {
        return Ok(default);
    };
    let value = parse_duration(text).map_err(|e| ApiError::invalid(field, e.to_string()))?;
    if value > LONGEST {
        return Err(ApiError::invalid(
            field,
            format!(
                "{text} is longer than the longest allowed, {}s",
                LONGEST.as_secs()
            ),
        ));
    }
    Ok(value)
}

/// The `POST /understudy/v1/chaos/{action}` actions served here.
pub(crate) const ACTIONS: [&str; 3] = ["hold", "unhold", "trace"];

/// `POST /understudy/v1/chaos/{hold,unhold,trace}`.
pub(crate) fn act(node: &Node, action: &str, params: Input) -> Response {
    let answer = match action {
        "hold" => params.and_then(|p| hold(node, &p)),
        "unhold" => Ok(json!({"cleared": node.races().clear_holds()})),
        "trace" => params.and_then(|p| {
            let key = p.service_key(Api::V2)?;
            node.races().trace(key.clone());
            Ok(json!({"traced": {"namespaceId": key.namespace.to_string(), "service": key.grouped_name()}}))
        }),
        other => Err(ApiError::not_found(
            ErrorCode::ResourceNotFound,
            format!("no client-race action '{other}': {}", ACTIONS.join(", ")),
        )),
    };
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.v2(),
    }
}

fn hold(node: &Node, p: &Params) -> Result<serde_json::Value, ApiError> {
    let service = p.service_key(Api::V2)?;
    let action = match p.get("ip") {
        None => None,
        Some(_) => {
            let key = super::naming::instance_key(p)?;
            let patch = super::naming::patch_from(p)?;
            if patch == InstancePatch::default() {
                return Err(ApiError::invalid(
                    "enabled",
                    "an action (ip and port given) must change something: give enabled, weight or metadata",
                ));
            }
            Some(HoldAction { key, patch })
        }
    };
    let spec = HoldSpec {
        service,
        connection: p.get("connectionId").map(str::to_owned),
        action,
        timeout: duration(p, "timeout", HOLD_TIMEOUT)?,
    };
    Ok(serde_json::to_value(node.races().add_hold(spec)).expect("a hold serializes"))
}

/// `GET /understudy/v1/chaos/holds`.
pub(crate) async fn holds(State(node): State<Node>) -> Response {
    Json(json!({"holds": node.races().holds()})).into_response()
}

/// `GET /understudy/v1/chaos/events`.
pub(crate) async fn events(State(node): State<Node>, params: Input) -> Response {
    let answer = params.and_then(|p| {
        let key = match p.get("serviceName") {
            Some(_) => Some(p.service_key(Api::V2)?),
            None => None,
        };
        Ok(node.races().events(key.as_ref(), p.get("connectionId")))
    });
    match answer {
        Ok(events) => Json(json!({"events": events})).into_response(),
        Err(e) => e.v2(),
    }
}

/// `GET /understudy/v1/chaos/acks`.
pub(crate) async fn acks(State(node): State<Node>, params: Input) -> Response {
    let answer = match params {
        Ok(p) => acknowledged(&node, &p).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.v2(),
    }
}

async fn acknowledged(node: &Node, p: &Params) -> Result<serde_json::Value, ApiError> {
    let key = p.service_key(Api::V2)?;
    let connection = p.get("connectionId").map(str::to_owned);
    let wait = duration(p, "wait", Duration::ZERO)?;
    let revision = node.registry().service(&key).map_or(0, |s| s.revision());
    let Some(clients) = node.clients() else {
        return Err(ApiError::unavailable(
            "this node serves no gRPC clients yet",
        ));
    };
    let read = || {
        let mut all = clients.acknowledged(&key);
        if let Some(id) = &connection {
            all.retain(|(info, _)| info.id == *id);
        }
        all
    };
    if let Some(id) = &connection {
        if read().is_empty() {
            return Err(ApiError::not_found(
                ErrorCode::ResourceNotFound,
                format!(
                    "connection {id} does not subscribe to {} on this node",
                    key.grouped_name()
                ),
            ));
        }
    }
    let caught_up =
        |all: &[(crate::clients::ClientInfo, u64)]| all.iter().all(|(_, acked)| *acked >= revision);
    if !wait.is_zero() {
        let done = node.races().wait_for(wait, || caught_up(&read())).await;
        if !done {
            let behind: Vec<String> = read()
                .iter()
                .filter(|(_, acked)| *acked < revision)
                .map(|(info, acked)| format!("{} at {acked}", info.id))
                .collect();
            return Err(ApiError::conflict(
                "wait",
                format!(
                    "not every subscriber of {} acknowledged revision {revision} within {} ms: {}",
                    key.grouped_name(),
                    wait.as_millis(),
                    behind.join(", ")
                ),
            ));
        }
    }
    let all = read();
    Ok(json!({
        "namespaceId": key.namespace.to_string(),
        "service": key.grouped_name(),
        "revision": revision,
        "caughtUp": caught_up(&all),
        "connections": all.iter().map(|(info, acked)| json!({
            "connectionId": info.id,
            "clientIp": info.ip,
            "appName": info.app_name,
            "ackedRevision": acked,
            "caughtUp": *acked >= revision,
        })).collect::<Vec<_>>(),
    }))
}
