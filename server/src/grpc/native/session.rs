//! Native sessions: a provider's bidirectional stream. Its instances are
//! owned by the session, which keeps them while it hears from the client
//! (three missed keepalive periods end it) and removes them when it ends;
//! a session cut by the node's own stop keeps them.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use understudy_core::ServiceKey;
use understudy_proto::native;

use super::{NativeApi, SessionStream};
use crate::auth::Identity;
use crate::node::Node;

impl NativeApi {
    pub(super) async fn open_session(
        &self,
        request: tonic::Request<tonic::Streaming<native::SessionRequest>>,
        identity: Option<Identity>,
    ) -> Result<tonic::Response<SessionStream>, tonic::Status> {
        let (tx, rx) = mpsc::channel(64);
        self.tasks.spawn(Self::run_session(
            self.node.clone(),
            request.into_inner(),
            identity,
            tx,
            self.stop.clone(),
        ));
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}

/// Misses this many keepalive periods and the session is over.
const KEEPALIVE_MISSES: u32 = 3;

fn session_error(request_id: u64, field: &str, message: String) -> native::SessionResponse {
    native::SessionResponse {
        request_id,
        kind: Some(native::session_response::Kind::Error(
            native::SessionError {
                field: field.to_owned(),
                message,
            },
        )),
    }
}

fn spec_of(
    wire: native::InstanceSpec,
) -> Result<understudy_core::InstanceSpec, understudy_core::Error> {
    let port = u16::try_from(wire.port).map_err(|_| understudy_core::Error::Invalid {
        field: "port",
        reason: format!("must be between 0 and 65535, got {}", wire.port),
    })?;
    let mut spec = understudy_core::InstanceSpec::new(wire.ip, port);
    if wire.weight != 0.0 {
        spec.weight = wire.weight;
    }
    spec.enabled = !wire.disabled;
    spec.cluster = understudy_core::ClusterName::parse(&wire.cluster)?;
    spec.metadata = wire.metadata.into_iter().collect();
    Ok(spec)
}

/// The command a session request asks for, `None` for hellos and
/// keepalives, or the error to answer with. Decoding only: nothing is
/// proposed here.
pub(crate) fn session_op(
    owner: &understudy_core::Owner,
    request: native::SessionRequest,
) -> Result<Option<understudy_core::Op>, native::SessionResponse> {
    use native::session_request::Kind;
    let id = request.request_id;
    let service_of =
        |service: Option<native::ServiceRef>| -> Result<ServiceKey, native::SessionResponse> {
            let service =
                service.ok_or_else(|| session_error(id, "service", "is required".into()))?;
            ServiceKey::try_from(&service).map_err(|e| session_error(id, e.field, e.to_string()))
        };
    let Some(kind) = request.kind else {
        return Ok(None);
    };
    Ok(Some(match kind {
        Kind::Keepalive(_) | Kind::Hello(_) => return Ok(None),
        Kind::Register(register) => {
            let service = service_of(register.service)?;
            let instances = register
                .instances
                .into_iter()
                .map(spec_of)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| match e {
                    understudy_core::Error::Invalid { field, reason } => {
                        session_error(id, field, format!("invalid {field}: {reason}"))
                    }
                    e => session_error(id, "", e.to_string()),
                })?;
            understudy_core::Op::Register {
                service,
                owner: owner.clone(),
                instances,
            }
        }
        Kind::Deregister(deregister) => understudy_core::Op::Deregister {
            service: service_of(deregister.service)?,
            owner: owner.clone(),
        },
    }))
}

/// Handles one session request; `None` for keepalives (no answer).
async fn session_request(
    node: &Node,
    owner: &understudy_core::Owner,
    identity: Option<&Identity>,
    request: native::SessionRequest,
) -> Option<native::SessionResponse> {
    let id = request.request_id;
    let op = match session_op(owner, request) {
        Ok(Some(op)) => op,
        Ok(None) => return None,
        Err(refused) => return Some(refused),
    };
    // Registering and deregistering write the service: the caller's
    // roles must allow it (looked up now, so a revocation counts).
    let service = match &op {
        understudy_core::Op::Register { service, .. }
        | understudy_core::Op::Deregister { service, .. } => Some(service),
        _ => None,
    };
    if let (Some(identity), Some(service)) = (identity, service) {
        let resource = understudy_core::access::service_resource(service);
        let write = understudy_core::access::Action::Write;
        if let Err(denied) = node.auth().permit(identity, resource, write) {
            return Some(session_error(id, "service", denied.to_string()));
        }
    }
    Some(match node.propose(op).await {
        Ok(applied) => native::SessionResponse {
            request_id: id,
            kind: Some(native::session_response::Kind::Ack(native::Ack {
                revision: applied
                    .changes
                    .last()
                    .map_or_else(|| node.registry().revision(), |c| c.revision),
            })),
        },
        Err(crate::node::ProposeError::Rejected(understudy_core::Error::Invalid {
            field,
            reason,
        })) => session_error(id, field, format!("invalid {field}: {reason}")),
        Err(crate::node::ProposeError::Rejected(
            e @ understudy_core::Error::OverLimit { setting, .. },
        )) => session_error(id, setting, e.to_string()),
        Err(e) => session_error(id, "", e.to_string()),
    })
}

static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// When this process started, epoch ms (for ids only).
static STARTED: std::sync::LazyLock<u64> =
    std::sync::LazyLock::new(|| crate::clock::restart_nonce() / 1_000_000);

impl NativeApi {
    /// Runs a session until the client ends it or goes silent, then
    /// removes what it registered.
    async fn run_session(
        node: Node,
        mut inbound: tonic::Streaming<native::SessionRequest>,
        identity: Option<Identity>,
        tx: mpsc::Sender<Result<native::SessionResponse, tonic::Status>>,
        stop: CancellationToken,
    ) {
        // The start time tells this run's sessions from an earlier run's,
        // whose instances may still be in the registry.
        let session_id = format!(
            "native-{}-{}-{}",
            node.config().node_id,
            *STARTED,
            SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let _held = node.hold(&session_id);
        let owner = understudy_core::Owner::Connection {
            node: node.config().node_id,
            id: session_id.as_str().into(),
        };
        let default_keepalive = u32::try_from((node.config().grpc.connection_idle / 4).as_millis())
            .unwrap_or(5_000)
            .max(100);
        let mut keepalive = default_keepalive;
        let mut welcomed = false;
        let mut ticker =
            tokio::time::interval(std::time::Duration::from_millis(u64::from(keepalive)));
        let mut last_heard = tokio::time::Instant::now();
        loop {
            let silence = std::time::Duration::from_millis(
                u64::from(keepalive) * u64::from(KEEPALIVE_MISSES),
            );
            tokio::select! {
                // The node stops or is killed: the session ends without
                // removing its instances.
                () = stop.cancelled() => return,
                message = inbound.next() => {
                    let Some(Ok(request)) = message else { break };
                    last_heard = tokio::time::Instant::now();
                    if let Some(native::session_request::Kind::Hello(hello)) = &request.kind {
                        if hello.keepalive_ms > 0 {
                            keepalive = hello.keepalive_ms.max(50);
                            ticker = tokio::time::interval(std::time::Duration::from_millis(u64::from(keepalive)));
                        }
                        welcomed = true;
                        let welcome = native::SessionResponse {
                            request_id: request.request_id,
                            kind: Some(native::session_response::Kind::Welcome(native::Welcome {
                                session_id: session_id.clone(),
                                keepalive_ms: keepalive,
                                cluster_id: node.state().cluster_id().to_string(),
                            })),
                        };
                        if tx.send(Ok(welcome)).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    if !welcomed {
                        let refused = session_error(request.request_id, "hello", "a session starts with a hello".into());
                        if tx.send(Ok(refused)).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    if let Some(answer) = session_request(&node, &owner, identity.as_ref(), request).await {
                        if tx.send(Ok(answer)).await.is_err() {
                            break;
                        }
                    }
                }
                // Three periods without a word end it then, not at the
                // next tick: a pause just longer than that is always seen.
                () = tokio::time::sleep_until(last_heard + silence) => {
                    tracing::debug!(session = %session_id, "session went silent");
                    break;
                }
                _ = ticker.tick() => {
                    let beat = native::SessionResponse {
                        request_id: 0,
                        kind: Some(native::session_response::Kind::Keepalive(native::Keepalive {})),
                    };
                    if tx.try_send(Ok(beat)).is_err() && tx.is_closed() {
                        break;
                    }
                }
                () = tx.closed() => break,
            }
        }
        // A stream cut by the node's own stop is no client going away.
        if stop.is_cancelled() {
            return;
        }
        let op = understudy_core::Op::RemoveOwner {
            owner,
            cause: understudy_core::RemovalCause::ConnectionClosed,
        };
        if let Err(e) = node.propose(op).await {
            tracing::warn!(session = %session_id, error = %e, "instances of an ended session not removed");
        }
    }
}
