//! The provider side: instances a client registers live on a native
//! session. One background task keeps the session open, sends keepalives,
//! and after every reconnect registers everything again, so a server
//! restart or failover loses nothing the client still wants.

use std::collections::{BTreeMap, HashMap};
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};
use understudy_core::ServiceKey;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{
    self, session_request, session_response, Hello, Keepalive, SessionRequest,
};

use crate::connection::{connect, Endpoint, Inner, Reconnect};
use crate::ClientError;

/// An instance a provider registers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceSpec {
    /// Ip or host name.
    pub ip: String,
    /// Port.
    pub port: u16,
    /// Weight (0 means 1).
    pub weight: f64,
    /// Cluster (empty means `DEFAULT`).
    pub cluster: String,
    /// Metadata (`zone` sets the zone).
    pub metadata: BTreeMap<String, String>,
    /// Listed but out of rotation: consumers do not choose it (what a
    /// draining provider registers).
    pub disabled: bool,
}

impl InstanceSpec {
    /// An instance at `ip:port` with default weight and cluster.
    pub fn new(ip: impl Into<String>, port: u16) -> Self {
        Self {
            ip: ip.into(),
            port,
            ..Self::default()
        }
    }

    /// The instance on the wire; its metadata gets the provider's start
    /// time (`timestamp`, epoch ms, as Dubbo sets it) unless it has one,
    /// so consumers warm it up from when it started.
    fn wire(&self, started_ms: u64) -> native::InstanceSpec {
        let mut metadata: std::collections::HashMap<String, String> = self
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        metadata
            .entry(crate::metadata::START_TIMESTAMP.to_owned())
            .or_insert_with(|| started_ms.to_string());
        native::InstanceSpec {
            ip: self.ip.clone(),
            port: u32::from(self.port),
            weight: self.weight,
            disabled: self.disabled,
            cluster: self.cluster.clone(),
            metadata,
        }
    }
}

/// What the caller asks the session task to do.
#[derive(Debug)]
pub(crate) enum Request {
    Register(
        ServiceKey,
        Vec<InstanceSpec>,
        oneshot::Sender<Result<(), ClientError>>,
    ),
    Deregister(ServiceKey, oneshot::Sender<Result<(), ClientError>>),
}

fn service_ref(key: &ServiceKey) -> native::ServiceRef {
    native::ServiceRef::from(key)
}

fn register_request(
    id: u64,
    key: &ServiceKey,
    instances: &[InstanceSpec],
    started_ms: u64,
) -> SessionRequest {
    SessionRequest {
        request_id: id,
        kind: Some(session_request::Kind::Register(native::Register {
            service: Some(service_ref(key)),
            instances: instances.iter().map(|i| i.wire(started_ms)).collect(),
        })),
    }
}

/// What an acknowledged request changes in the wanted registrations.
#[derive(Debug)]
enum Desire {
    Register(ServiceKey, Vec<InstanceSpec>),
    Deregister(ServiceKey),
}

/// Requests awaiting the server's answer; only an acknowledged one
/// changes what is registered again after a reconnect.
type Pending = HashMap<u64, (oneshot::Sender<Result<(), ClientError>>, Desire)>;

/// A session kept open while its successor registers: a task keeps
/// sending its keepalives (so the server does not end it for silence while
/// the successor waits on a node that is not ready) and reads its answers.
/// Dropping it ends that session.
struct Held {
    _stop: DropGuard,
}

impl Held {
    fn keep(
        inner: &Inner,
        tx: mpsc::Sender<SessionRequest>,
        mut answers: tonic::Streaming<native::SessionResponse>,
        keepalive: Duration,
    ) -> Self {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        inner.tasks.spawn(async move {
            let mut ticker = tokio::time::interval(keepalive);
            loop {
                tokio::select! {
                    () = stopped.cancelled() => return,
                    answer = answers.message() => {
                        if !matches!(answer, Ok(Some(_))) {
                            return;
                        }
                    }
                    _ = ticker.tick() => {
                        let beat = SessionRequest {
                            request_id: 0,
                            kind: Some(session_request::Kind::Keepalive(Keepalive {})),
                        };
                        if tx.send(beat).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Self {
            _stop: stop.drop_guard(),
        }
    }
}

/// How a session connection ended.
enum Ended {
    /// The client went away.
    ClientGone,
    /// It failed or the server ended it.
    Failed(String),
    /// Home answers again: register there, then let this one go.
    Home(usize, Held),
}

/// Runs the provider session until the client goes away.
pub(crate) async fn run(
    inner: Weak<Inner>,
    cancel: CancellationToken,
    mut requests: mpsc::Receiver<Request>,
    keepalive: Duration,
) {
    let mut desired: BTreeMap<ServiceKey, Vec<InstanceSpec>> = BTreeMap::new();
    let mut reconnect = Reconnect::default();
    let mut previous: Option<Held> = None;
    loop {
        let Some(client) = inner.upgrade() else {
            return;
        };
        let endpoint = reconnect.endpoint(&client);
        let timeout = client.connect_timeout;
        drop(client);
        let once = Once {
            inner: &inner,
            endpoint: &endpoint,
            timeout,
            keepalive,
        };
        let ended = tokio::select! {
            () = cancel.cancelled() => return,
            ended = once.run(&mut desired, &mut requests, &mut reconnect, &mut previous) => ended,
        };
        let Some(client) = inner.upgrade() else {
            return;
        };
        let delay = match ended {
            Ended::ClientGone => return,
            Ended::Failed(reason) => {
                tracing::debug!(endpoint = %endpoint.uri, %reason, "session interrupted; reconnecting");
                reconnect.failed(&client)
            }
            Ended::Home(index, held) => {
                tracing::info!(from = %endpoint.uri, to = %client.endpoints[index].uri,
                    "the local DC answers again; the session moves back");
                previous = Some(held);
                reconnect.go_home(index);
                Duration::ZERO
            }
        };
        drop(client);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One session connection's settings.
struct Once<'a> {
    inner: &'a Weak<Inner>,
    endpoint: &'a Endpoint,
    timeout: Duration,
    keepalive: Duration,
}

impl Once<'_> {
    /// Runs one session connection. `previous`, the session this one
    /// replaces, is kept open until everything wanted is registered here
    /// (across failed attempts too), so a move between nodes never leaves
    /// the instances unowned.
    async fn run(
        &self,
        desired: &mut BTreeMap<ServiceKey, Vec<InstanceSpec>>,
        requests: &mut mpsc::Receiver<Request>,
        reconnect: &mut Reconnect,
        previous: &mut Option<Held>,
    ) -> Ended {
        match session_once(self, desired, requests, reconnect, previous).await {
            Ok(ended) => ended,
            Err(reason) => Ended::Failed(reason),
        }
    }
}

/// One session connection; `Err` to reconnect.
async fn session_once(
    once: &Once<'_>,
    desired: &mut BTreeMap<ServiceKey, Vec<InstanceSpec>>,
    requests: &mut mpsc::Receiver<Request>,
    reconnect: &mut Reconnect,
    previous: &mut Option<Held>,
) -> Result<Ended, String> {
    let (inner, keepalive) = (once.inner, once.keepalive);
    let channel = connect(once.endpoint, once.timeout).await?;
    let (tx, outgoing) = mpsc::channel::<SessionRequest>(64);
    let outgoing = tokio_stream::wrappers::ReceiverStream::new(outgoing);
    let Some(client) = inner.upgrade() else {
        return Ok(Ended::ClientGone);
    };
    let request = client.request(&channel, outgoing).await?;
    let mut answers = match RegistryClient::new(channel).session(request).await {
        Ok(answers) => answers.into_inner(),
        Err(status) => return Err(client.refused(status).await),
    };
    let (started_ms, away) = (client.started_ms, reconnect.away(&client));
    drop(client);
    let mut next_id: u64 = 1;
    let send = |request: SessionRequest| {
        let tx = tx.clone();
        async move {
            tx.send(request)
                .await
                .map_err(|_| "the session closed".to_owned())
        }
    };
    let keepalive_ms = u32::try_from(keepalive.as_millis()).unwrap_or(u32::MAX);
    send(SessionRequest {
        request_id: 0,
        kind: Some(session_request::Kind::Hello(Hello {
            client_name: "understudy-client".into(),
            keepalive_ms,
        })),
    })
    .await?;
    // Everything still wanted is registered again on every new session.
    let mut registering = std::collections::HashSet::new();
    for (key, instances) in desired.iter() {
        send(register_request(next_id, key, instances, started_ms)).await?;
        registering.insert(next_id);
        next_id += 1;
    }
    if registering.is_empty() {
        drop(previous.take());
    }
    let mut pending: Pending = HashMap::new();
    let mut ticker = tokio::time::interval(keepalive);
    let home = async {
        if away {
            crate::connection::home_answers(inner).await
        } else {
            std::future::pending().await
        }
    };
    tokio::pin!(home);
    loop {
        tokio::select! {
            request = requests.recv() => {
                let Some(request) = request else { return Ok(Ended::ClientGone) };
                let id = next_id;
                next_id += 1;
                let (message, reply, desire) = match request {
                    Request::Register(key, instances, reply) => {
                        let message = register_request(id, &key, &instances, started_ms);
                        (message, reply, Desire::Register(key, instances))
                    }
                    Request::Deregister(key, reply) => {
                        let message = SessionRequest {
                            request_id: id,
                            kind: Some(session_request::Kind::Deregister(native::Deregister {
                                service: Some(service_ref(&key)),
                            })),
                        };
                        (message, reply, Desire::Deregister(key))
                    }
                };
                pending.insert(id, (reply, desire));
                send(message).await?;
            }
            answer = answers.message() => {
                let answer = answer.map_err(|s| s.message().to_owned())?.ok_or("the session ended")?;
                reconnect.succeeded();
                if registering.remove(&answer.request_id) {
                    if let Some(session_response::Kind::Error(e)) = &answer.kind {
                        // No field at fault: the node could not carry it out
                        // (no leader yet, cut off). Not registered here, so
                        // the session this one replaces must stay: try again.
                        if e.field.is_empty() {
                            return Err(format!("registering again failed: {}", e.message));
                        }
                        tracing::warn!(field = %e.field, message = %e.message,
                            "a registration was refused when registered again; it is not registered");
                    }
                    if registering.is_empty() {
                        // Registered here: the session this one replaces may go.
                        drop(previous.take());
                    }
                }
                let Some((reply, desire)) = pending.remove(&answer.request_id) else { continue };
                let outcome = match answer.kind {
                    Some(session_response::Kind::Error(e)) => Err(ClientError::Invalid { message: e.message }),
                    _ => {
                        match desire {
                            Desire::Register(key, instances) => {
                                desired.insert(key, instances);
                            }
                            Desire::Deregister(key) => {
                                desired.remove(&key);
                            }
                        }
                        Ok(())
                    }
                };
                let _ = reply.send(outcome);
            }
            _ = ticker.tick() => {
                send(SessionRequest {
                    request_id: 0,
                    kind: Some(session_request::Kind::Keepalive(Keepalive {})),
                })
                .await?;
            }
            // Moves only with nothing in flight, so no caller loses its answer.
            index = &mut home, if pending.is_empty() && registering.is_empty() => {
                let Some(client) = inner.upgrade() else { return Ok(Ended::ClientGone) };
                let held = Held::keep(&client, tx.clone(), answers, keepalive);
                return Ok(Ended::Home(index, held));
            }
        }
    }
}
