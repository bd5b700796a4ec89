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
            post(user_create::<V3>)
                .put(user_password::<V3>)
                .delete(user_delete::<V3>),
        ),
        ("/nacos/v3/auth/user/admin", post(initial_admin)),
        ("/nacos/v3/auth/user/list", get(user_list::<V3>)),
        ("/nacos/v3/auth/user/search", get(user_search::<V3>)),
        (
            "/nacos/v3/auth/role",
            post(role_bind::<V3>).delete(role_unbind::<V3>),
        ),
        ("/nacos/v3/auth/role/list", get(role_list::<V3>)),
        ("/nacos/v3/auth/role/search", get(role_search::<V3>)),
        (
            "/nacos/v3/auth/permission",
            post(permission_grant::<V3>)
                .delete(permission_revoke::<V3>)
                .get(permission_exists),
        ),
        ("/nacos/v3/auth/permission/list", get(permission_list::<V3>)),
    ]
}

/// The same users, roles and permissions at Nacos 2.x's v1 paths (which
/// `nacos_api_compat = nacos3` retires, as Nacos 3 does): a list is the
/// bare page, a search the bare list, a change `{"code":200,"data":"…"}`.
pub(super) fn v1_routes() -> Vec<Route> {
    vec![
        (
            "/nacos/v1/auth/users",
            post(user_create::<V1>)
                .put(user_password::<V1>)
                .delete(user_delete::<V1>)
                .get(user_list::<V1>),
        ),
        ("/nacos/v1/auth/users/search", get(user_search::<V1>)),
        (
            "/nacos/v1/auth/roles",
            post(role_bind::<V1>)
                .delete(role_unbind::<V1>)
                .get(role_list::<V1>),
        ),
        ("/nacos/v1/auth/roles/search", get(role_search::<V1>)),
        (
            "/nacos/v1/auth/permissions",
            post(permission_grant::<V1>)
                .delete(permission_revoke::<V1>)
                .get(permissions_v1),
        ),
    ]
}

/// How a plane renders its answers.
trait Plane {
    /// A change's acknowledgement (`"create user ok!"`, …).
    fn done(result: Result<String, ApiError>) -> Response;
    /// A read's data.
    fn data<T: Serialize>(result: Result<T, ApiError>) -> Response;
}

/// Nacos 3: the envelope, the acknowledgement as its data.
struct V3;

impl Plane for V3 {
    fn done(result: Result<String, ApiError>) -> Response {
        reply(result)
    }

    fn data<T: Serialize>(result: Result<T, ApiError>) -> Response {
        reply(result)
    }
}

/// Nacos 2.x's v1: `RestResult` acknowledgements, bare data, v1 errors.
struct V1;

impl Plane for V1 {
    fn done(result: Result<String, ApiError>) -> Response {
        result.map_or_else(ApiError::v1, |said| {
            Json(serde_json::json!({"code": 200, "message": null, "data": said})).into_response()
        })
    }

    fn data<T: Serialize>(result: Result<T, ApiError>) -> Response {
        result.map_or_else(ApiError::v1, |data| Json(data).into_response())
    }
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
async fn user_create<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::done(
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
            Ok("create user ok!".to_owned())
        }
        .await,
    )
}

/// `PUT /user?username=&newPassword=`: an admin's, or the user's own.
async fn user_password<P: Plane>(
    State(node): State<Node>,
    identity: Option<axum::Extension<Identity>>,
    params: Input,
) -> Response {
    P::done(
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
            Ok("update user ok!".to_owned())
        }
        .await,
    )
}

/// `DELETE /user?username=`: its tokens stop working on each node as it
/// applies the deletion.
async fn user_delete<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::done(
        async {
            let name = params?.required("username")?.trim().to_owned();
            not_bootstrap(&node, &name)?;
            node.propose(Op::DeleteUser { name }).await?;
            Ok("delete user ok!".to_owned())
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

async fn user_list<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::data(params.and_then(|p| {
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

async fn user_search<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::data(params.map(|p| {
        let part = p.get("username").unwrap_or("").to_owned();
        all_users(&node)
            .into_iter()
            .filter(|u| u.contains(&part))
            .collect::<Vec<_>>()
    }))
}

/// `POST /role?role=&username=`: the user must exist.
async fn role_bind<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::done(
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
            Ok("add role ok!".to_owned())
        }
        .await,
    )
}

/// `DELETE /role?role=&username=`: from one user, or (no `username`)
/// from everyone.
async fn role_unbind<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::done(
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

async fn role_list<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::data(params.and_then(|p| {
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

async fn role_search<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::data(params.map(|p| {
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
async fn permission_grant<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::done(
        async {
            let permission = permission(&params?)?;
            node.propose(Op::Grant { permission }).await?;
            Ok("add permission ok!".to_owned())
        }
        .await,
    )
}

async fn permission_revoke<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::done(
        async {
            let permission = permission(&params?)?;
            node.propose(Op::Revoke { permission }).await?;
            Ok("delete permission ok!".to_owned())
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

/// v1's `GET /permissions`: with a `resource`, whether the role holds
/// it (in the `Result` envelope, as Nacos answers it); else the list.
async fn permissions_v1(node: State<Node>, params: Input) -> Response {
    match &params {
        Ok(p) if p.get("resource").is_some() => permission_exists(node, params).await,
        _ => permission_list::<V1>(node, params).await,
    }
}

/// A permission as Nacos' `PermissionInfo`.
#[derive(Debug, Serialize)]
struct PermissionInfo {
    role: String,
    resource: String,
    action: &'static str,
}

async fn permission_list<P: Plane>(State(node): State<Node>, params: Input) -> Response {
    P::data(params.and_then(|p| {
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
