//! The Nacos 3 HTTP API on the main port: the client plane
//! (`/nacos/v3/client/**`) and the admin plane (`/nacos/v3/admin/**`).
//! Every answer is the `Result` envelope (`{"code":0,"message":"success",
//! "data":…}`); an error answers with its HTTP status and
//! `{"code":<detail code>,"message":…,"data":<what is wrong>}`, as Nacos 3
//! does. Handlers reuse the v1/v2 handlers' parsing and the core's rules:
//! `naming` (instances, services, clusters, health, clients, operators),
//! `config` (configs and listeners), `core` (server state, members,
//! namespaces). Endpoints that exist for Nacos' own storage and loaders
//! answer 501 naming what understudy does instead ([`unserved`]).

mod ai;
mod auth;
mod clients;
mod config;
mod core;
mod naming;
mod transfer;

use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::{Json, Router};
use serde::Serialize;
use understudy_proto::nacos::NacosResult;

use super::error::ApiError;
use super::AppState;

/// The v3 routes.
pub(super) fn routes() -> Router<AppState> {
    let mut router = Router::new();
    for (path, route) in naming::routes()
        .into_iter()
        .chain(ai::routes())
        .chain(auth::routes())
        .chain(auth::v1_routes())
        .chain(clients::routes())
        .chain(config::routes())
        .chain(transfer::routes())
        .chain(core::routes())
    {
        router = router.route(path, route);
    }
    for &(path, instead) in UNSERVED {
        router = router.route(path, unserved(instead));
    }
    router
}

/// A v3 route: its path and its methods.
type Route = (&'static str, MethodRouter<AppState>);

/// Endpoints for Nacos' own storage, loaders and logs, and what
/// understudy does instead; each answers 501 on every method.
const UNSERVED: &[(&str, &str)] = &[
    (
        "/nacos/v3/admin/cs/capacity",
        "understudy has no per-namespace capacity table: the limits max_config_bytes and max_configs apply to every namespace (docs/configuration.md)",
    ),
    (
        "/nacos/v3/admin/cs/ops/derby",
        "understudy keeps configs in its replicated registry state, not in Derby: read them with GET /nacos/v3/admin/cs/config/list or /understudy/v1/export",
    ),
    (
        "/nacos/v3/admin/cs/ops/derby/import",
        "understudy keeps configs in its replicated registry state, not in Derby: load them with POST /nacos/v3/admin/cs/config/import or /understudy/v1/import",
    ),
    (
        "/nacos/v3/admin/cs/ops/localCache",
        "understudy has no config dump cache: every node answers from its applied state",
    ),
    (
        "/nacos/v3/admin/cs/metrics/cluster",
        "understudy reports config metrics at /metrics",
    ),
    (
        "/nacos/v3/admin/cs/metrics/ip",
        "understudy reports config metrics at /metrics",
    ),
    (
        "/nacos/v3/admin/cs/ops/log",
        "understudy's log levels are set with RUST_LOG at start",
    ),
    (
        "/nacos/v3/admin/ns/ops/log",
        "understudy's log levels are set with RUST_LOG at start",
    ),
    (
        "/nacos/v3/admin/core/ops/log",
        "understudy's log levels are set with RUST_LOG at start",
    ),
    (
        "/nacos/v3/admin/core/ops/raft",
        "understudy's raft is openraft, not JRaft: see GET /understudy/v1/cluster and POST /understudy/v1/raft/compact",
    ),
    (
        "/nacos/v3/admin/core/ops/ids",
        "understudy has no id generators: configs and history entries take their ids from the replicated log",
    ),
    (
        "/nacos/v3/admin/core/loader/current",
        "understudy does not rebalance client connections between nodes: clients choose their node",
    ),
    (
        "/nacos/v3/admin/core/loader/cluster",
        "understudy does not rebalance client connections between nodes: clients choose their node",
    ),
    (
        "/nacos/v3/admin/core/loader/reloadCurrent",
        "understudy does not rebalance client connections between nodes: clients choose their node",
    ),
    (
        "/nacos/v3/admin/core/loader/reloadClient",
        "understudy does not rebalance client connections between nodes: clients choose their node",
    ),
    (
        "/nacos/v3/admin/core/loader/smartReloadCluster",
        "understudy does not rebalance client connections between nodes: clients choose their node",
    ),
    (
        "/nacos/v3/admin/core/cluster/lookup",
        "understudy's members are its raft membership: change them with POST/DELETE /understudy/v1/cluster/members",
    ),
    (
        "/nacos/v3/admin/ns/cluster",
        "understudy keeps no per-cluster health checker or metadata: ephemeral instances are checked by beats and connections, persistent ones by understudy's probes (docs/configuration.md)",
    ),
    (
        "/nacos/v3/admin/ns/client/distro",
        "understudy does not shard clients with Distro: every client's registrations are replicated by raft to every node",
    ),
];

fn unserved(instead: &'static str) -> MethodRouter<AppState> {
    axum::routing::any(move || async move { ApiError::not_implemented(instead).v2() })
}

/// The envelope around `data`, or the error's answer.
pub(super) fn reply<T: Serialize>(result: Result<T, ApiError>) -> Response {
    result.map_or_else(ApiError::v2, |data| {
        Json(NacosResult::success(data)).into_response()
    })
}

/// The envelope around `"ok"`.
pub(super) fn ok(result: Result<(), ApiError>) -> Response {
    reply(result.map(|()| "ok"))
}

/// The envelope around `true`.
pub(super) fn done(result: Result<(), ApiError>) -> Response {
    reply(result.map(|()| true))
}

/// A page request: `pageNo` (from 1, default 1) and `pageSize` (default
/// 100, at most 500), as Nacos' `PageForm`.
pub(super) fn page(p: &super::params::Params) -> Result<(u64, u64), ApiError> {
    let page_no = p.number::<u64>("pageNo")?.unwrap_or(1);
    let page_size = p.number::<u64>("pageSize")?.unwrap_or(100);
    if page_no == 0 {
        return Err(ApiError::invalid("pageNo", "counts from 1"));
    }
    if page_size == 0 || page_size > 500 {
        return Err(ApiError::invalid("pageSize", "must be between 1 and 500"));
    }
    Ok((page_no, page_size))
}
