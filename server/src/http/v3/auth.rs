//! `/nacos/v3/auth`: users, roles and permissions, as Nacos' default auth
//! plugin serves them (login is in `ops.rs`). They are replicated state:
//! a change is proposed like any write and every node enforces it once it
//! has applied it. The config file's users are bootstrap accounts: they
//! log in and act everywhere, and the API neither changes nor deletes
//! them (nor creates a user of the same name). Passwords are hashed here,
//! off the async threads; the replicated state holds only hashes, and no
//! answer carries one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde::Serialize;
use understudy_core::access::{Action, Permission, ADMIN_ROLE};
use understudy_core::Op;
use understudy_proto::nacos::NacosResult;
use understudy_proto::nacos3::Page;

use super::super::error::ApiError;
use super::super::params::Params;
use super::{page, reply, Route};
use crate::auth::Identity;
use crate::node::Node;

type Input = Result<Params, ApiError>;

/// Nacos' bcrypt strength for the users it creates.
const COST: u32 = 10;

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            "/nacos/v3/auth/user",
            post(user_create).put(user_password).delete(user_delete),
        ),
        ("/nacos/v3/auth/user/admin", post(initial_admin)),
        ("/nacos/v3/auth/user/list", get(user_list)),
        ("/nacos/v3/auth/user/search", get(user_search)),
        ("/nacos/v3/auth/role", post(role_bind).delete(role_unbind)),
        ("/nacos/v3/auth/role/list", get(role_list)),
        ("/nacos/v3/auth/role/search", get(role_search)),
        (
            "/nacos/v3/auth/permission",
            post(permission_grant)
                .delete(permission_revoke)
                .get(permission_exists),
        ),
        ("/nacos/v3/auth/permission/list", get(permission_list)),
    ]
}

async fn hash(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || crate::auth::hash_password(&password, COST))
        .await
        .map_err(|e| ApiError::unavailable(format!("the password could not be hashed: {e}")))?
        .map_err(|e| ApiError::invalid("password", e.to_string()))
}

fn not_bootstrap(node: &Node, name: &str) -> Result<(), ApiError> {
    if node.auth().is_bootstrap(name) {
        return Err(ApiError::conflict(
            "username",
            format!("user '{name}' is a bootstrap account of the config file: change it there"),
        ));
    }
    Ok(())
}

/// `POST /user?username=&password=`.
async fn user_create(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let p = params?;
            let name = p.required("username")?.trim().to_owned();
            not_bootstrap(&node, &name)?;
            let password_hash = hash(p.required("password")?.to_owned()).await?;
            node.propose(Op::CreateUser {
                name,
                password_hash,
            })
            .await?;
            Ok("create user ok!")
        }
        .await,
    )
}

/// `PUT /user?username=&newPassword=`: an admin's, or the user's own.
async fn user_password(
    State(node): State<Node>,
    identity: Option<axum::Extension<Identity>>,
    params: Input,
) -> Response {
    reply(
        async {
            let p = params?;
            let name = p.required("username")?.trim().to_owned();
            if let Some(axum::Extension(who)) = identity {
                if !who.admin && who.user != name {
                    return Err(ApiError::denied(format!(
                        "authorization failed! user '{}' may not change the password of '{name}'",
                        who.user
                    )));
                }
            }
            not_bootstrap(&node, &name)?;
            let password_hash = hash(p.required("newPassword")?.to_owned()).await?;
            node.propose(Op::SetPassword {
                name,
                password_hash,
            })
            .await?;
            Ok("update user ok!")
        }
        .await,
    )
}

/// `DELETE /user?username=`: its tokens stop working on each node as it
/// applies the deletion.
async fn user_delete(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let name = params?.required("username")?.trim().to_owned();
            not_bootstrap(&node, &name)?;
            node.propose(Op::DeleteUser { name }).await?;
            Ok("delete user ok!")
        }
        .await,
    )
}

/// `POST /user/admin?password=`: the first admin, `nacos`, while there is
/// none (a config-file admin counts). With an admin already, Nacos
/// answers HTTP 200 with code 409.
async fn initial_admin(State(node): State<Node>, params: Input) -> Response {
    let answer = async {
        let p = params?;
        let has_admin = node.config().auth.users.iter().any(|u| u.admin)
            || node
                .registry()
                .role_bindings()
                .iter()
                .any(|(role, _)| role == ADMIN_ROLE);
        if has_admin {
            return Ok(None);
        }
        let password = match p.get("password") {
            Some(password) => password.to_owned(),
            None => format!("{:016x}", crate::clock::restart_nonce()),
        };
        let password_hash = hash(password.clone()).await?;
        node.propose(Op::CreateInitialAdmin {
            name: "nacos".to_owned(),
            password_hash,
        })
        .await?;
        Ok::<_, ApiError>(Some(password))
    }
    .await;
    match answer {
        Err(e) => e.v2(),
        Ok(Some(password)) => reply(Ok(
            serde_json::json!({"username": "nacos", "password": password}),
        )),
        Ok(None) => (
            StatusCode::OK,
            Json(NacosResult {
                code: 409,
                message: "have admin user cannot use it.".to_owned(),
                data: serde_json::Value::Null,
            }),
        )
            .into_response(),
    }
}

/// `search=accurate` (the default) compares exactly, `blur` reads `*` as
/// any run of characters; a blank filter takes everything.
fn filter(p: &Params, field: &'static str) -> Result<impl Fn(&str) -> bool, ApiError> {
    let blur = p.blur(false)?;
    let wanted = p.get(field).unwrap_or("").trim().to_owned();
    Ok(move |value: &str| {
        wanted.is_empty()
            || if blur {
                understudy_core::access::glob(&wanted, value)
            } else {
                value == wanted
            }
    })
}

/// A user as listed: Nacos lists its hash; understudy never does.
#[derive(Debug, Serialize)]
struct User {
    username: String,
    password: &'static str,
}

fn all_users(node: &Node) -> Vec<String> {
    let mut names: Vec<String> = node
        .config()
        .auth
        .users
        .iter()
        .map(|u| u.name.clone())
        .chain(node.registry().user_names().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

async fn user_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (page_no, page_size) = page(&p)?;
        let wanted = filter(&p, "username")?;
        let users = all_users(&node)
            .into_iter()
            .filter(|u| wanted(u))
            .map(|username| User {
                username,
                password: "",
            });
        Ok(Page::slice(users, page_no, page_size))
    }))
}

async fn user_search(State(node): State<Node>, params: Input) -> Response {
    reply(params.map(|p| {
        let part = p.get("username").unwrap_or("").to_owned();
        all_users(&node)
            .into_iter()
            .filter(|u| u.contains(&part))
            .collect::<Vec<_>>()
    }))
}

/// `POST /role?role=&username=`: the user must exist.
async fn role_bind(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let p = params?;
            let role = p.required("role")?.trim().to_owned();
            let user = p.required("username")?.trim().to_owned();
            if !node.auth().knows(&user) {
                return Err(ApiError::from(understudy_core::Error::NotFound {
                    what: "user",
                    name: user,
                }));
            }
            node.propose(Op::BindRole { role, user }).await?;
            Ok("add role ok!")
        }
        .await,
    )
}

/// `DELETE /role?role=&username=`: from one user, or (no `username`)
/// from everyone.
async fn role_unbind(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let p = params?;
            let role = p.required("role")?.trim().to_owned();
            let user = p.get("username").map(|u| u.trim().to_owned());
            let said = format!("delete role of user {} ok!", user.as_deref().unwrap_or(""));
            node.propose(Op::UnbindRole { role, user }).await?;
            Ok(said)
        }
        .await,
    )
}

/// A role binding as Nacos' `RoleInfo`.
#[derive(Debug, Serialize)]
struct RoleInfo {
    role: String,
    username: String,
}

/// The config file's admins hold `ROLE_ADMIN` too.
fn all_bindings(node: &Node) -> Vec<(String, String)> {
    let mut bindings: Vec<(String, String)> = node
        .config()
        .auth
        .users
        .iter()
        .filter(|u| u.admin)
        .map(|u| (ADMIN_ROLE.to_owned(), u.name.clone()))
        .chain(node.registry().role_bindings().iter().cloned())
        .collect();
    bindings.sort();
    bindings.dedup();
    bindings
}

async fn role_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (page_no, page_size) = page(&p)?;
        let role_ok = filter(&p, "role")?;
        let user_ok = filter(&p, "username")?;
        let roles = all_bindings(&node)
            .into_iter()
            .filter(|(role, user)| role_ok(role) && user_ok(user))
            .map(|(role, username)| RoleInfo { role, username });
        Ok(Page::slice(roles, page_no, page_size))
    }))
}

async fn role_search(State(node): State<Node>, params: Input) -> Response {
    reply(params.map(|p| {
        let part = p.get("role").unwrap_or("").to_owned();
        let mut roles: Vec<String> = all_bindings(&node)
            .into_iter()
            .map(|(role, _)| role)
            .filter(|r| r.contains(&part))
            .collect();
        roles.dedup();
        roles
    }))
}

fn permission(p: &Params) -> Result<Permission, ApiError> {
    Ok(Permission {
        role: p.required("role")?.trim().to_owned(),
        resource: p.required("resource")?.trim().to_owned(),
        action: Action::parse(p.required("action")?)?,
    })
}

/// `POST /permission?role=&resource=&action=`: the role must be bound to
/// someone.
async fn permission_grant(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let permission = permission(&params?)?;
            node.propose(Op::Grant { permission }).await?;
            Ok("add permission ok!")
        }
        .await,
    )
}

async fn permission_revoke(State(node): State<Node>, params: Input) -> Response {
    reply(
        async {
            let permission = permission(&params?)?;
            node.propose(Op::Revoke { permission }).await?;
            Ok("delete permission ok!")
        }
        .await,
    )
}

/// `GET /permission?role=&resource=&action=`: whether the role already
/// holds it (or `rw` on the resource), as Nacos' duplicate check.
async fn permission_exists(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let wanted = permission(&p)?;
        Ok(node.registry().permissions().iter().any(|held| {
            held.role == wanted.role
                && held.resource == wanted.resource
                && (held.action == wanted.action || held.action == Action::ReadWrite)
        }))
    }))
}

/// A permission as Nacos' `PermissionInfo`.
#[derive(Debug, Serialize)]
struct PermissionInfo {
    role: String,
    resource: String,
    action: &'static str,
}

async fn permission_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (page_no, page_size) = page(&p)?;
        let role_ok = filter(&p, "role")?;
        let registry = node.registry();
        let items: Vec<PermissionInfo> = registry
            .permissions()
            .iter()
            .filter(|held| role_ok(&held.role))
            .map(|held| PermissionInfo {
                role: held.role.clone(),
                resource: held.resource.clone(),
                action: held.action.as_str(),
            })
            .collect();
        Ok(Page::slice(items, page_no, page_size))
    }))
}
