//! `nacos_api_compat = nacos3`: the HTTP port answers as a stock Nacos
//! 3.0/3.1 does, which switches its legacy API off: every `/nacos/v2/**`
//! endpoint and the v1 admin and console endpoints answer HTTP 410 with
//! code 40000, naming the v3 API to use instead; the v1 client endpoints
//! (instances, beats, instance and service lists, configs, the config
//! listener, metrics, login) stay served. A team switches it on to check
//! that its tools no longer call what Nacos 3 has retired.

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::config::ApiCompat;
use crate::Node;

/// Answers a retired endpoint with 410, or passes the request on.
pub(crate) async fn retire(State(node): State<Node>, request: Request, next: Next) -> Response {
    if node.config().http.compat == ApiCompat::Superset {
        return next.run(request).await;
    }
    let path = request.uri().path();
    let query = request.uri().query().unwrap_or("");
    let Some(instead) = retired(request.method(), path, query) else {
        return next.run(request).await;
    };
    let message = format!(
        "Current API will be deprecated, please use API(s) `{instead}` instead, or set `nacos_api_compat=superset` to serve it."
    );
    (
        StatusCode::GONE,
        Json(json!({"code": 40000, "message": message, "data": null})),
    )
        .into_response()
}

/// The v3 API that replaces a retired endpoint, or `None` if the endpoint
/// is still served by Nacos 3.
fn retired(method: &Method, path: &str, query: &str) -> Option<&'static str> {
    let path = path.trim_end_matches('/');
    let legacy = path.starts_with("/nacos/v2/") || path.starts_with("/nacos/v1/");
    if !legacy || (path.starts_with("/nacos/v1/") && client_endpoint(method, path, query)) {
        return None;
    }
    let module = path.split('/').nth(3).unwrap_or("");
    Some(match module {
        "ns" | "catalog" => "/nacos/v3/admin/ns",
        "cs" => "/nacos/v3/admin/cs",
        "auth" => "/nacos/v3/auth",
        _ => "/nacos/v3/admin/core",
    })
}

/// The v1 endpoints Nacos 3 keeps serving (its `OPEN_API` ones).
fn client_endpoint(method: &Method, path: &str, query: &str) -> bool {
    match path {
        // A config search is the console's: retired.
        "/nacos/v1/cs/configs" if method == Method::GET => !has_param(query, "search"),
        "/nacos/v1/cs/configs" => matches!(*method, Method::POST | Method::DELETE),
        "/nacos/v1/cs/configs/listener" => method == Method::POST,
        "/nacos/v1/ns/instance" => matches!(*method, Method::POST | Method::DELETE),
        "/nacos/v1/ns/instance/beat" => method == Method::PUT,
        "/nacos/v1/ns/instance/list"
        | "/nacos/v1/ns/service/list"
        | "/nacos/v1/ns/operator/metrics"
        | "/nacos/v1/ns/ops/metrics" => method == Method::GET,
        "/nacos/v1/auth/login" | "/nacos/v1/auth/users/login" => method == Method::POST,
        _ => false,
    }
}

fn has_param(query: &str, name: &str) -> bool {
    query
        .split('&')
        .any(|pair| pair.split('=').next() == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nacos3_keeps_the_v1_client_endpoints_and_retires_the_rest() {
        let served = [
            (Method::POST, "/nacos/v1/ns/instance", ""),
            (Method::PUT, "/nacos/v1/ns/instance/beat", ""),
            (Method::GET, "/nacos/v1/ns/instance/list", ""),
            (Method::GET, "/nacos/v1/ns/service/list", ""),
            (Method::GET, "/nacos/v1/cs/configs", "dataId=a&group=b"),
            (Method::POST, "/nacos/v1/cs/configs/listener", ""),
            (Method::POST, "/nacos/v1/auth/users/login", ""),
            (Method::GET, "/nacos/v3/admin/ns/service/list", ""),
            (Method::GET, "/metrics", ""),
        ];
        for (method, path, query) in served {
            assert_eq!(retired(&method, path, query), None, "{method} {path}");
        }
        let gone = [
            (
                Method::GET,
                "/nacos/v2/ns/instance/list",
                "",
                "/nacos/v3/admin/ns",
            ),
            (
                Method::POST,
                "/nacos/v2/cs/config",
                "",
                "/nacos/v3/admin/cs",
            ),
            (
                Method::GET,
                "/nacos/v1/ns/service",
                "",
                "/nacos/v3/admin/ns",
            ),
            (
                Method::PUT,
                "/nacos/v1/ns/instance",
                "",
                "/nacos/v3/admin/ns",
            ),
            (
                Method::GET,
                "/nacos/v1/cs/configs",
                "search=blur&dataId=",
                "/nacos/v3/admin/cs",
            ),
            (
                Method::GET,
                "/nacos/v1/cs/history",
                "",
                "/nacos/v3/admin/cs",
            ),
            (
                Method::GET,
                "/nacos/v1/console/namespaces",
                "",
                "/nacos/v3/admin/core",
            ),
            (
                Method::GET,
                "/nacos/v1/core/cluster/nodes",
                "",
                "/nacos/v3/admin/core",
            ),
        ];
        for (method, path, query, instead) in gone {
            assert_eq!(
                retired(&method, path, query),
                Some(instead),
                "{method} {path}"
            );
        }
    }
}
