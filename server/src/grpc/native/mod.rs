//! understudy's native API on the gRPC port, by service: watches that
//! never miss, reorder or duplicate a change (`watch.rs`), provider
//! sessions (`session.rs`) and listings (`listings.rs`). This module is the
//! service itself: authorization, admission, per-call metrics, and the one
//! mapping of registry errors to gRPC statuses.

use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_proto::native::registry_server::Registry as RegistryApi;
use understudy_proto::native::{
    self, GetServiceRequest, GetServiceResponse, ListNamespacesRequest, ListNamespacesResponse,
    ListServicesRequest, ListServicesResponse, WatchEvent, WatchRequest,
};

use crate::auth::Identity;
use crate::node::Node;
use understudy_core::access::Action;

mod listings;
mod session;
mod watch;

pub(crate) use session::session_op;
pub(crate) use watch::Scope;

pub(crate) struct NativeApi {
    pub(crate) node: Node,
    /// Owns the watch and session tasks, so shutdown waits for them and
    /// `understudy_tasks_alive` counts them.
    pub(crate) tasks: TaskTracker,
    /// Fires when the node stops or is killed: watches and sessions end
    /// then, and a session's instances stay (the node is going away, not
    /// the client, which re-registers where it reconnects).
    pub(crate) stop: CancellationToken,
}

type WatchStream = ReceiverStream<Result<WatchEvent, tonic::Status>>;
type SessionStream = ReceiverStream<Result<native::SessionResponse, tonic::Status>>;

/// Counts and times one native call by method and outcome.
async fn observed<T>(
    method: &'static str,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    let started = std::time::Instant::now();
    let result = call.await;
    let code = match &result {
        Ok(_) => "Ok".to_owned(),
        Err(status) => format!("{:?}", status.code()),
    };
    metrics::counter!("understudy_native_requests_total", "method" => method, "code" => code)
        .increment(1);
    metrics::histogram!("understudy_native_request_seconds", "method" => method)
        .record(started.elapsed().as_secs_f64());
    result
}

#[tonic::async_trait]
impl RegistryApi for NativeApi {
    type WatchStream = WatchStream;
    type SessionStream = SessionStream;

    async fn session(
        &self,
        request: tonic::Request<tonic::Streaming<native::SessionRequest>>,
    ) -> Result<tonic::Response<SessionStream>, tonic::Status> {
        observed("Session", async {
            let identity = self.authorize(&request)?;
            self.open_session(request, identity).await
        })
        .await
    }

    async fn watch(
        &self,
        request: tonic::Request<WatchRequest>,
    ) -> Result<tonic::Response<WatchStream>, tonic::Status> {
        observed("Watch", async {
            let identity = self.authorize(&request)?;
            let _slot = self.enter().await?;
            self.open_watch(request, identity).await
        })
        .await
    }

    async fn list_namespaces(
        &self,
        request: tonic::Request<ListNamespacesRequest>,
    ) -> Result<tonic::Response<ListNamespacesResponse>, tonic::Status> {
        observed("ListNamespaces", async {
            self.authorize(&request)?;
            let _slot = self.enter().await?;
            self.namespaces(request).await
        })
        .await
    }

    async fn list_groups(
        &self,
        request: tonic::Request<native::ListGroupsRequest>,
    ) -> Result<tonic::Response<native::ListGroupsResponse>, tonic::Status> {
        observed("ListGroups", async {
            let identity = self.authorize(&request)?;
            let _slot = self.enter().await?;
            self.groups(request, identity.as_ref()).await
        })
        .await
    }

    async fn list_services(
        &self,
        request: tonic::Request<ListServicesRequest>,
    ) -> Result<tonic::Response<ListServicesResponse>, tonic::Status> {
        observed("ListServices", async {
            let identity = self.authorize(&request)?;
            let _slot = self.enter().await?;
            self.services(request, identity.as_ref()).await
        })
        .await
    }

    async fn get_service(
        &self,
        request: tonic::Request<GetServiceRequest>,
    ) -> Result<tonic::Response<GetServiceResponse>, tonic::Status> {
        observed("GetService", async {
            let identity = self.authorize(&request)?;
            let _slot = self.enter().await?;
            self.service(request, identity.as_ref()).await
        })
        .await
    }

    async fn login(
        &self,
        request: tonic::Request<native::LoginRequest>,
    ) -> Result<tonic::Response<native::LoginResponse>, tonic::Status> {
        observed("Login", self.log_in(request.into_inner())).await
    }
}

impl NativeApi {
    /// The token check, when auth is on: `authorization: Bearer TOKEN`
    /// metadata (or `accesstoken: TOKEN`, as Nacos clients name it). The
    /// caller, when auth is on.
    #[allow(clippy::result_large_err)] // tonic's error type
    fn authorize<T>(&self, request: &tonic::Request<T>) -> Result<Option<Identity>, tonic::Status> {
        if let Some(reason) = super::connection(request.extensions())
            .as_deref()
            .and_then(|conn| conn.refused.as_deref())
        {
            return Err(tonic::Status::resource_exhausted(reason));
        }
        let metadata = request.metadata();
        let bearer = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let token = bearer.or_else(|| metadata.get("accesstoken").and_then(|v| v.to_str().ok()));
        self.node
            .auth()
            .identify(token, self.node.now())
            .map_err(|denied| tonic::Status::unauthenticated(denied.to_string()))
    }

    /// Whether the caller may do `action` on `resource` (always, with
    /// auth off), or `PERMISSION_DENIED` naming both.
    #[allow(clippy::result_large_err)] // tonic's error type
    fn permit(
        &self,
        identity: Option<&Identity>,
        resource: String,
        action: Action,
    ) -> Result<(), tonic::Status> {
        match identity {
            Some(identity) => self
                .node
                .auth()
                .permit(identity, resource, action)
                .map_err(|denied| tonic::Status::permission_denied(denied.to_string())),
            None => Ok(()),
        }
    }

    /// A request slot, or `UNAVAILABLE` when the node is busy.
    async fn enter(&self) -> Result<crate::admission::Slot, tonic::Status> {
        self.node
            .admission()
            .enter("native")
            .await
            .map_err(|busy| tonic::Status::unavailable(busy.to_string()))
    }

    async fn log_in(
        &self,
        request: native::LoginRequest,
    ) -> Result<tonic::Response<native::LoginResponse>, tonic::Status> {
        let auth = self.node.auth().clone();
        let now = self.node.now();
        // A bcrypt check takes milliseconds of CPU: not on the async threads.
        let issued = tokio::task::spawn_blocking(move || {
            auth.login(&request.username, &request.password, now)
        })
        .await
        .map_err(|e| tonic::Status::unavailable(format!("the login could not be checked: {e}")))?
        .map_err(|denied| tonic::Status::unauthenticated(denied.to_string()))?;
        Ok(tonic::Response::new(native::LoginResponse {
            token: issued.token,
            ttl_seconds: issued.ttl_s,
            admin: issued.admin,
        }))
    }
}

/// The one mapping of a registry error to a gRPC status.
fn status(e: understudy_core::Error) -> tonic::Status {
    use understudy_core::Error;
    let message = e.to_string();
    match e {
        Error::Invalid { .. } => tonic::Status::invalid_argument(message),
        Error::OverLimit { .. } => tonic::Status::resource_exhausted(message),
        Error::ServiceNotFound { .. }
        | Error::NotFound { .. }
        | Error::InstanceNotFound { .. }
        | Error::NamespaceNotFound { .. }
        | Error::HistoryCompacted { .. } => tonic::Status::not_found(message),
        Error::ServiceExists { .. } | Error::NamespaceExists { .. } => {
            tonic::Status::already_exists(message)
        }
        Error::ServiceNotEmpty { .. }
        | Error::NamespaceNotEmpty { .. }
        | Error::KindMismatch { .. }
        | Error::CasMismatch { .. }
        | Error::LockHeld { .. }
        | Error::LockNotHeld { .. } => tonic::Status::failed_precondition(message),
    }
}
