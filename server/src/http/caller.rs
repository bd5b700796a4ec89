//! Who a request comes from, as Nacos records it: the client's address
//! (the first `X-Forwarded-For` entry, else `X-Real-IP`, else the peer
//! of the connection) and, with auth on, the user of its token.

use std::convert::Infallible;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

use crate::auth::Identity;

/// The caller of one request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    /// The client's address, as text.
    pub(crate) ip: String,
    /// The token's user, when auth checked one.
    pub(crate) user: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        let forwarded = header("x-forwarded-for")
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty());
        let ip = forwarded
            .or_else(|| header("x-real-ip"))
            .map(str::to_owned)
            .or_else(|| {
                parts
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|ConnectInfo(addr)| addr.ip().to_string())
            })
            .unwrap_or_default();
        let user = parts.extensions.get::<Identity>().map(|i| i.user.clone());
        Ok(Self { ip, user })
    }
}

impl Caller {
    /// The origin of a config change: this caller, named by its token's
    /// user, else by the `srcUser` (or `src_user`) it gives.
    pub(crate) fn source(&self, p: &super::params::Params) -> understudy_core::ConfigSource {
        let user = self
            .user
            .clone()
            .or_else(|| p.get_any(&["srcUser", "src_user"]).map(str::to_owned))
            .unwrap_or_default();
        understudy_core::ConfigSource {
            ip: self.ip.clone(),
            user,
        }
    }
}
