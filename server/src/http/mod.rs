//! The HTTP adapter on the main port: the Nacos naming and config Open API
//! (v1, v2), the Nacos 3 client and admin planes (`v3`), console and
//! operator endpoints, native probes and `/metrics`. It owns routing, the
//! body limit, request metrics and the fallbacks; handlers live in
//! `naming`, `config`, `ops` and `v3`, errors are rendered in `error`.

mod backup;
mod caller;
mod chaos;
mod compat;
pub(crate) mod config;
mod console;
pub(crate) mod error;
mod guard;
mod history;
pub(crate) mod naming;
pub(crate) mod ops;
pub(crate) mod params;
mod races;
mod scrape;
mod v3;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, FromRef, MatchedPath, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::Value;

use crate::node::Node;

/// The router's state.
#[derive(Clone)]
pub(crate) struct AppState {
    node: Node,
    metrics: PrometheusHandle,
    /// Switch values set through `PUT /operator/switches` on this node.
    switches: Arc<Mutex<BTreeMap<String, Value>>>,
}

impl FromRef<AppState> for Node {
    fn from_ref(state: &AppState) -> Node {
        state.node.clone()
    }
}

/// Builds the HTTP router for a node.
pub fn router(node: Node) -> Router {
    let max_body = node.config().http.max_body_bytes;
    let node_for_guard = node.clone();
    let node_for_shed = node.clone();
    let node_for_compat = node.clone();
    let state = AppState {
        node,
        metrics: crate::metrics::handle(),
        switches: Arc::default(),
    };
    let ns = "/nacos/v1/ns";
    let ns2 = "/nacos/v2/ns";
    let mut router = Router::new()
        // v1 instances
        .route(
            &format!("{ns}/instance"),
            post(naming::register_v1)
                .delete(naming::deregister_v1)
                .put(naming::update_v1)
                .patch(naming::patch_v1)
                .get(naming::detail_v1),
        )
        .route(&format!("{ns}/instance/list"), get(naming::list_v1))
        .route(&format!("{ns}/instance/beat"), put(naming::beat_v1))
        // v1 services
        .route(
            &format!("{ns}/service"),
            post(naming::create_service_v1)
                .delete(naming::delete_service_v1)
                .put(naming::update_service_v1)
                .get(naming::service_detail_v1),
        )
        .route(&format!("{ns}/service/list"), get(naming::service_list_v1))
        .route(&format!("{ns}/health/instance"), put(naming::health_v1))
        .route(&format!("{ns}/health"), put(naming::health_v1))
        .route(&format!("{ns}/health/server"), get(ops::health_server))
        // v2 instances and services
        .route(
            &format!("{ns2}/instance"),
            post(naming::register_v2)
                .delete(naming::deregister_v2)
                .put(naming::update_v2)
                .get(naming::detail_v2),
        )
        .route(&format!("{ns2}/instance/list"), get(naming::list_v2))
        .route(&format!("{ns2}/instance/beat"), put(naming::beat_v2))
        .route(
            &format!("{ns2}/service"),
            post(naming::create_service_v2)
                .delete(naming::delete_service_v2)
                .put(naming::update_service_v2)
                .get(naming::service_detail_v2),
        )
        .route(&format!("{ns2}/service/list"), get(naming::service_list_v2))
        .route(&format!("{ns2}/health/instance"), put(naming::health_v2))
        .route(
            &format!("{ns2}/operator/metrics"),
            get(ops::operator_metrics_v2),
        )
        .route(
            &format!("{ns2}/operator/switches"),
            get(ops::get_switches_v2).put(ops::put_switches_v2),
        );
    // The operator endpoints also answer under `/ops`, as in Nacos.
    for prefix in ["operator", "ops"] {
        router = router
            .route(
                &format!("{ns}/{prefix}/metrics"),
                get(ops::operator_metrics),
            )
            .route(
                &format!("{ns}/{prefix}/switches"),
                get(ops::get_switches).put(ops::put_switches),
            );
    }
    for path in [
        "/nacos/v1/auth/login",
        "/nacos/v1/auth/users/login",
        "/nacos/v3/auth/user/login",
    ] {
        router = router.route(path, post(ops::login));
    }
    router
        .route(
            "/nacos/v1/console/namespaces",
            get(ops::namespaces_get)
                .post(ops::namespaces_post)
                .put(ops::namespaces_put)
                .delete(ops::namespaces_delete),
        )
        .route(
            "/nacos/v2/console/namespace",
            get(ops::namespace_get_v2)
                .post(ops::namespace_post_v2)
                .put(ops::namespace_put_v2)
                .delete(ops::namespace_delete_v2),
        )
        .route(
            "/nacos/v2/console/namespace/list",
            get(ops::namespace_get_v2),
        )
        .route(
            "/nacos/v1/cs/configs",
            get(config::get_v1)
                .post(config::publish_v1)
                .delete(config::remove_v1),
        )
        .route("/nacos/v1/cs/configs/listener", post(config::listen))
        .route("/nacos/v1/cs/history", get(history::v1))
        .route("/nacos/v1/cs/history/previous", get(history::v1_previous))
        .route("/nacos/v1/cs/history/configs", get(history::v1_configs))
        .route(
            "/nacos/v2/cs/config",
            get(config::get_v2)
                .post(config::publish_v2)
                .delete(config::remove_v2),
        )
        .route("/nacos/v1/console/server/state", get(ops::server_state))
        .route("/nacos/v1/console/health/liveness", get(ops::ok_text))
        .route("/nacos/v1/console/health/readiness", get(ops::ok_text))
        .route("/nacos/v1/core/cluster/nodes", get(ops::cluster_nodes))
        .route("/nacos/v1/core/cluster/health", get(ops::cluster_health))
        .route("/understudy/v1/cluster", get(ops::cluster_status))
        .route(
            "/understudy/v1/cluster/members",
            post(ops::add_member).delete(ops::remove_member),
        )
        .route("/understudy/v1/cluster/nodes", get(chaos::nodes))
        .route("/understudy/v1/raft/compact", post(ops::compact))
        .route("/understudy/v1/chaos", get(chaos::show).put(chaos::replace))
        .route("/understudy/v1/chaos/{action}", post(chaos::act))
        .route("/understudy/v1/chaos/holds", get(races::holds))
        .route("/understudy/v1/chaos/events", get(races::events))
        .route("/understudy/v1/chaos/acks", get(races::acks))
        .route("/understudy/v1/export", get(backup::export))
        .route("/understudy/v1/import", post(backup::import))
        .route("/", get(console::index))
        .route("/nacos", get(console::index))
        .route("/nacos/", get(console::index))
        .route("/console/app.js", get(console::script))
        .route("/console/style.css", get(console::style))
        .route("/understudy/v1/registry", get(console::registry))
        .route("/understudy/v1/registry/service", get(console::service))
        .route(
            "/understudy/v1/registry/subscribers",
            get(console::subscribers),
        )
        .route("/understudy/v1/registry/listeners", get(console::listeners))
        .route("/understudy/v1/events", get(console::events))
        .route("/health", get(ops::health))
        .route("/ready", get(ops::ready))
        .route("/metrics", get(ops::metrics))
        .route("/nacos/actuator/prometheus", get(ops::metrics))
        .merge(v3::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(node_for_shed, shed))
        .layer(middleware::from_fn_with_state(node_for_guard, guard::guard))
        // Retired endpoints answer 410 before any other check, as Nacos 3.
        .layer(middleware::from_fn_with_state(
            node_for_compat,
            compat::retire,
        ))
        .layer(middleware::from_fn(record))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

async fn not_found(request: Request) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {}", request.uri().path()),
    )
        .into_response()
}

async fn method_not_allowed(request: Request) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "method {} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
        .into_response()
}

/// Gives an ordinary request a slot or answers busy (see
/// [`crate::admission`]), with `Retry-After` as HTTP asks of a 503.
async fn shed(
    axum::extract::State(node): axum::extract::State<Node>,
    request: Request,
    next: Next,
) -> Response {
    if !takes_a_slot(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    match node.admission().enter("http").await {
        Ok(_slot) => next.run(request).await,
        Err(busy) => {
            let error = error::ApiError::unavailable(busy.to_string());
            let path = request.uri().path();
            let mut response = if path.starts_with("/nacos/v2/") || path.starts_with("/nacos/v3/") {
                error.v2()
            } else {
                error.v1()
            };
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
            response
        }
    }
}

/// Whether a request takes a slot: the naming and config APIs do, but
/// for heartbeats and deregistrations (which keep the registry true under
/// load) and the config long poll (which is held open by design).
fn takes_a_slot(method: &axum::http::Method, path: &str) -> bool {
    let api = [
        "/nacos/v1/ns/",
        "/nacos/v2/ns/",
        "/nacos/v1/cs/",
        "/nacos/v2/cs/",
        "/nacos/v3/client/",
        "/nacos/v3/admin/ns/",
        "/nacos/v3/admin/cs/",
    ]
    .iter()
    .any(|prefix| path.starts_with(prefix));
    let path = path.trim_end_matches('/');
    let beat = path.ends_with("/instance/beat");
    let deregister = method == axum::http::Method::DELETE && path.ends_with("/instance");
    let long_poll = path.ends_with("/configs/listener");
    api && !beat && !deregister && !long_poll
}

/// Counts requests and times them per route.
async fn record(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = status_label(response.status());
    metrics::counter!("understudy_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!("understudy_http_request_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// The method as a label, without an allocation for the usual ones.
fn method_label(method: &axum::http::Method) -> std::borrow::Cow<'static, str> {
    use axum::http::Method;
    match *method {
        Method::GET => "GET".into(),
        Method::POST => "POST".into(),
        Method::PUT => "PUT".into(),
        Method::DELETE => "DELETE".into(),
        Method::PATCH => "PATCH".into(),
        _ => method.as_str().to_owned().into(),
    }
}

/// The status as a label, without an allocation for the usual ones.
fn status_label(status: StatusCode) -> std::borrow::Cow<'static, str> {
    match status.as_u16() {
        200 => "200".into(),
        400 => "400".into(),
        403 => "403".into(),
        404 => "404".into(),
        500 => "500".into(),
        503 => "503".into(),
        other => other.to_string().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::takes_a_slot;
    use axum::http::Method;

    #[test]
    fn beats_deregistrations_probes_and_long_polls_take_no_slot() {
        let ordinary = [
            (Method::POST, "/nacos/v1/ns/instance"),
            (Method::GET, "/nacos/v1/ns/instance/list"),
            (Method::POST, "/nacos/v2/ns/instance"),
            (Method::POST, "/nacos/v1/cs/configs"),
            (Method::GET, "/nacos/v2/cs/config"),
        ];
        for (method, path) in ordinary {
            assert!(takes_a_slot(&method, path), "{method} {path}");
        }
        let priority = [
            (Method::PUT, "/nacos/v1/ns/instance/beat"),
            (Method::PUT, "/nacos/v2/ns/instance/beat"),
            (Method::DELETE, "/nacos/v1/ns/instance"),
            (Method::DELETE, "/nacos/v2/ns/instance/"),
            (Method::POST, "/nacos/v1/cs/configs/listener"),
            (Method::GET, "/nacos/v1/console/health/readiness"),
            (Method::GET, "/metrics"),
            (Method::GET, "/nacos/v1/core/cluster/nodes"),
        ];
        for (method, path) in priority {
            assert!(!takes_a_slot(&method, path), "{method} {path}");
        }
    }
}
