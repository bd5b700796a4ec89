//! Who may call which HTTP endpoint. Every request passes here before its
//! handler:
//! - open: login, probes (Nacos 3's `/v3/admin/core/state*` too),
//!   metrics, the console's page, script and style (its data needs a
//!   login when auth is on);
//! - user: the Nacos naming, config and console data, and the read-only
//!   cluster status, when auth is on (any valid token);
//! - manage: namespace writes, switch changes and the Nacos 3 core
//!   plane's writes, when auth is on (an admin's token);
//! - admin: membership, chaos, export, import, compaction: an admin's
//!   token when auth is on; open with auth off, unless a cluster secret
//!   is set.
//!
//! The cluster secret header (what `ctl` and scripts may send), when a
//! secret is set, opens every endpoint.
//!
//! The token is read as Nacos reads it: the `accessToken` query or form
//! parameter, the `accessToken` header, or `Authorization: Bearer`; a
//! call without one may carry `username` and `password` instead (headers
//! or parameters), checked as a login is and remembered briefly.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use understudy_core::access::Action;

use super::error::{plain, ApiError};
use super::params::Params;
use crate::raft::network::SECRET_METADATA;
use crate::Node;

/// What an endpoint asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Open,
    User,
    Manage,
    Admin,
}

fn access(method: &Method, path: &str) -> Access {
    let read = method == Method::GET || method == Method::HEAD;
    let logging_in = matches!(
        path,
        "/nacos/v3/auth/user/login"
            | "/nacos/v3/auth/user/admin"
            | "/nacos/v1/auth/login"
            | "/nacos/v1/auth/users/login"
    );
    if (path.starts_with("/nacos/v3/auth/") || path.starts_with("/nacos/v1/auth/")) && !logging_in {
        // Users, roles and permissions are an admin's, but a user may
        // change its own password (the handler checks whose).
        let own_password = matches!(path, "/nacos/v3/auth/user" | "/nacos/v1/auth/users");
        return if method == Method::PUT && own_password {
            Access::User
        } else {
            Access::Admin
        };
    }
    let open = logging_in
        || matches!(
            path,
            "/" | "/nacos"
                | "/nacos/"
                | "/console/app.js"
                | "/console/style.css"
                | "/health"
                | "/ready"
                | "/metrics"
                | "/nacos/actuator/prometheus"
                | "/nacos/v1/console/server/state"
                | "/nacos/v1/console/health/liveness"
                | "/nacos/v1/console/health/readiness"
                | "/nacos/v1/core/cluster/health"
                | "/nacos/v1/ns/operator/metrics"
                | "/nacos/v1/ns/ops/metrics"
                | "/nacos/v2/ns/operator/metrics"
                | "/nacos/v3/admin/core/state"
                | "/nacos/v3/admin/core/state/liveness"
                | "/nacos/v3/admin/core/state/readiness"
        );
    if open {
        return Access::Open;
    }
    let admin_only = path == "/understudy/v1/cluster/members"
        || path.starts_with("/understudy/v1/chaos")
        || matches!(
            path,
            "/understudy/v1/raft/compact" | "/understudy/v1/export" | "/understudy/v1/import"
        );
    if admin_only {
        return Access::Admin;
    }
    let managed = path.starts_with("/nacos/v1/console/namespaces")
        || path.starts_with("/nacos/v2/console/namespace")
        || path.starts_with("/nacos/v3/admin/core/")
        || path.ends_with("/operator/switches")
        || path.ends_with("/ops/switches");
    if managed && !read {
        return Access::Manage;
    }
    Access::User
}

/// Refuses a call its caller may not make, in the shape of its API.
pub(crate) async fn guard(State(node): State<Node>, request: Request, next: Next) -> Response {
    let auth = node.auth();
    let secret = node.config().cluster.secret.as_deref();
    // Neither auth nor a secret (the default): nothing to check, and the
    // beat path pays nothing for it.
    if !auth.enabled() && secret.is_none() {
        return next.run(request).await;
    }
    let path = request.uri().path().to_owned();
    let secret_given = secret.is_some_and(|secret| {
        request.headers().get(SECRET_METADATA).is_some_and(|given| {
            crate::raft::network::secret_matches(secret.as_bytes(), given.as_bytes())
        })
    });
    let refusal = match access(request.method(), &path) {
        // The cluster secret is the cluster's own key: it opens everything.
        _ if secret_given => return next.run(request).await,
        Access::Open => return next.run(request).await,
        Access::Admin if !auth.enabled() => match secret {
            None => return next.run(request).await,
            Some(_) => format!("header {SECRET_METADATA} must carry the cluster secret"),
        },
        _ if !auth.enabled() => return next.run(request).await,
        needed => {
            let limit = node.config().http.max_body_bytes;
            let (mut request, given) = match credentials(request, limit).await {
                Ok(found) => found,
                Err(refused) => return refused,
            };
            match identify(&node, given).await {
                Ok(identity) if needed != Access::User && !identity.admin => {
                    crate::auth::Denied::NotAdmin(identity.user).to_string()
                }
                Ok(identity) if !identity.bootstrap && !identity.admin => {
                    // A user created through the API: its roles'
                    // permissions decide, per namespace.
                    let method = request.method().clone();
                    let (restored, params) = match params(request, limit).await {
                        Ok(found) => found,
                        Err(refused) => return refused,
                    };
                    request = restored;
                    let refused =
                        resource(&method, &path, &params).and_then(|(touched, action)| {
                            auth.permit(&identity, touched, action).err()
                        });
                    match refused {
                        Some(denied) => denied.to_string(),
                        None => {
                            request.extensions_mut().insert(identity);
                            return next.run(request).await;
                        }
                    }
                }
                Ok(identity) => {
                    // Handlers read who called (a config's history names
                    // its publisher).
                    request.extensions_mut().insert(identity);
                    return next.run(request).await;
                }
                Err(denied) => denied.to_string(),
            }
        }
    };
    let enveloped = ["/nacos/v2/", "/nacos/v3/", "/understudy/"];
    if enveloped.iter().any(|prefix| path.starts_with(prefix)) {
        ApiError::denied(refusal).v2()
    } else {
        (StatusCode::FORBIDDEN, plain(refusal)).into_response()
    }
}

/// What a caller proves itself with.
enum Given {
    Token(String),
    Password { user: String, password: String },
    Nothing,
}

/// Who `given` proves the caller to be.
async fn identify(node: &Node, given: Given) -> Result<crate::auth::Identity, crate::auth::Denied> {
    let auth = node.auth();
    let now = node.now();
    match given {
        Given::Token(token) => auth.verify(Some(&token), now),
        Given::Nothing => auth.verify(None, now),
        Given::Password { user, password } => auth.sign_in(user, password, now).await,
    }
}

/// The request's token, as Nacos looks for it: `Authorization: Bearer`,
/// the `accessToken` header, query or form parameter; without one, a
/// `username` and `password` (headers, then query, then form). The form
/// body is read, up to `limit` bytes, and put back.
async fn credentials(request: Request, limit: usize) -> Result<(Request, Given), Response> {
    let headers = request.headers();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = header(AUTHORIZATION.as_str()).and_then(|v| v.strip_prefix("Bearer "));
    if let Some(token) = bearer.or(header("accessToken")) {
        let token = token.to_owned();
        return Ok((request, Given::Token(token)));
    }
    let from_headers = match (header("username"), header("password")) {
        (Some(user), Some(password)) => Some(Given::Password {
            user: user.to_owned(),
            password: password.to_owned(),
        }),
        _ => None,
    };
    let query = request.uri().query().unwrap_or_default().to_owned();
    if let Some(token) = find(query.as_bytes(), "accessToken") {
        return Ok((request, Given::Token(token)));
    }
    let form = header(CONTENT_TYPE.as_str())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let (request, body) = if form {
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
            let message = format!("the request body is unreadable or larger than {limit} bytes");
            return Err((StatusCode::PAYLOAD_TOO_LARGE, plain(message)).into_response());
        };
        (Request::from_parts(parts, Body::from(bytes.clone())), bytes)
    } else {
        (request, axum::body::Bytes::new())
    };
    if let Some(token) = find(&body, "accessToken") {
        return Ok((request, Given::Token(token)));
    }
    if let Some(given) = from_headers {
        return Ok((request, given));
    }
    let password = |encoded: &[u8]| {
        Some(Given::Password {
            user: find(encoded, "username")?,
            password: find(encoded, "password")?,
        })
    };
    let given = password(query.as_bytes())
        .or_else(|| password(&body))
        .unwrap_or(Given::Nothing);
    Ok((request, given))
}

/// The request's parameters (query and form body, the body put back).
async fn params(request: Request, limit: usize) -> Result<(Request, Params), Response> {
    let form = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let query = request.uri().query().unwrap_or_default().to_owned();
    let (parts, body) = request.into_parts();
    let bytes = if form {
        match axum::body::to_bytes(body, limit).await {
            Ok(bytes) => bytes,
            Err(_) => {
                let message =
                    format!("the request body is unreadable or larger than {limit} bytes");
                return Err((StatusCode::PAYLOAD_TOO_LARGE, plain(message)).into_response());
            }
        }
    } else {
        let request = Request::from_parts(parts, body);
        let params = Params::decode(query.as_bytes(), b"").map_err(ApiError::v2)?;
        return Ok((request, params));
    };
    let params = Params::decode(query.as_bytes(), &bytes).map_err(ApiError::v2)?;
    Ok((Request::from_parts(parts, Body::from(bytes)), params))
}

/// The resource a Nacos naming or config request (or a console view of
/// the registry) touches and what it does to it (`GET` reads; a config
/// long poll reads too), as Nacos' auth plugin names it:
/// `namespace:group:naming/service` or `namespace:group:config/dataId`.
/// The console's event stream spans every namespace. `None` for the other
/// endpoints.
fn resource(method: &Method, path: &str, p: &Params) -> Option<(String, Action)> {
    use understudy_core::access::{naming_resource, resource};
    if path == "/understudy/v1/events" {
        return Some((resource("*", "*", "naming", "*"), Action::Read));
    }
    let console = path.starts_with("/understudy/v1/registry");
    if path.starts_with("/nacos/v3/admin/ai/") {
        // An MCP server or an agent is a resource of its namespace, by
        // name.
        let action = if method == Method::GET || method == Method::HEAD {
            Action::Read
        } else {
            Action::Write
        };
        let namespace = p.get("namespaceId").unwrap_or("");
        let name = p.get_any(&["mcpName", "agentName"]).unwrap_or("");
        return Some((resource(namespace, "", "ai", name), action));
    }
    let kind = if path.contains("/ns/") || console {
        "naming"
    } else if path.contains("/cs/") {
        "config"
    } else {
        return None;
    };
    let listening = path.ends_with("/configs/listener");
    let action = if method == Method::GET || method == Method::HEAD || listening {
        Action::Read
    } else {
        Action::Write
    };
    let namespace = p
        .get_any(&["namespaceId", "tenant", "namespace"])
        .unwrap_or("");
    let namespace = understudy_core::NamespaceId::parse(namespace)
        .map(|ns| ns.to_string())
        .unwrap_or_else(|_| namespace.to_owned());
    let touched = if kind == "naming" {
        naming_resource(
            &namespace,
            p.get_any(&["groupName", "group"]).unwrap_or(""),
            p.get_any(&["serviceName", "service"]).unwrap_or(""),
        )
    } else {
        resource(
            &namespace,
            p.get_any(&["groupName", "group"]).unwrap_or(""),
            "config",
            p.get("dataId").unwrap_or(""),
        )
    };
    Some((touched, action))
}

/// The first non-empty value of `name` in a URL-encoded query or form.
fn find(encoded: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(encoded)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_ask_what_their_kind_needs() {
        let cases = [
            (Method::POST, "/nacos/v1/auth/users/login", Access::Open),
            (Method::GET, "/metrics", Access::Open),
            (Method::GET, "/", Access::Open),
            (Method::GET, "/console/app.js", Access::Open),
            (Method::GET, "/understudy/v1/registry", Access::User),
            (Method::GET, "/understudy/v1/events", Access::User),
            (Method::GET, "/nacos/v1/ns/instance/list", Access::User),
            (Method::POST, "/nacos/v2/cs/config", Access::User),
            (Method::GET, "/nacos/v1/console/namespaces", Access::User),
            (Method::POST, "/nacos/v1/console/namespaces", Access::Manage),
            (
                Method::PUT,
                "/nacos/v1/ns/operator/switches",
                Access::Manage,
            ),
            (Method::GET, "/understudy/v1/cluster", Access::User),
            (Method::GET, "/understudy/v1/chaos", Access::Admin),
            (
                Method::POST,
                "/understudy/v1/chaos/partition",
                Access::Admin,
            ),
            (
                Method::DELETE,
                "/understudy/v1/cluster/members",
                Access::Admin,
            ),
            (Method::GET, "/understudy/v1/export", Access::Admin),
        ];
        for (method, path, want) in cases {
            assert_eq!(access(&method, path), want, "{method} {path}");
        }
    }
}
