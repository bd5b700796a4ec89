//! The provider side: instances a client registers live on a native
//! session. One background task keeps the session open, sends keepalives,
//! and after every reconnect registers everything again, so a server
//! restart or failover loses nothing the client still wants.

use std::collections::{BTreeMap, HashMap};
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use understudy_core::ServiceKey;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{
    self, session_request, session_response, Hello, Keepalive, SessionRequest,
};

use crate::client::{connect, Endpoint, Inner, Reconnect};
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

    fn wire(&self) -> native::InstanceSpec {
        native::InstanceSpec {
            ip: self.ip.clone(),
            port: u32::from(self.port),
            weight: self.weight,
            disabled: false,
            cluster: self.cluster.clone(),
            metadata: self
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
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

fn register_request(id: u64, key: &ServiceKey, instances: &[InstanceSpec]) -> SessionRequest {
    SessionRequest {
        request_id: id,
        kind: Some(session_request::Kind::Register(native::Register {
            service: Some(service_ref(key)),
            instances: instances.iter().map(InstanceSpec::wire).collect(),
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

/// Runs the provider session until the client goes away.
pub(crate) async fn run(
    inner: Weak<Inner>,
    cancel: CancellationToken,
    mut requests: mpsc::Receiver<Request>,
    keepalive: Duration,
) {
    let mut desired: BTreeMap<ServiceKey, Vec<InstanceSpec>> = BTreeMap::new();
    let mut reconnect = Reconnect::default();
    loop {
        let Some(client) = inner.upgrade() else {
            return;
        };
        let endpoint = reconnect.endpoint(&client);
        let timeout = client.connect_timeout;
        drop(client);
        let outcome = tokio::select! {
            () = cancel.cancelled() => return,
            outcome = session_once(&inner, &endpoint, timeout, keepalive, &mut desired, &mut requests, &mut reconnect) => outcome,
        };
        match outcome {
            Ok(()) => return, // the client went away
            Err(reason) => {
                tracing::debug!(endpoint = %endpoint.uri, %reason, "session interrupted; reconnecting")
            }
        }
        let Some(client) = inner.upgrade() else {
            return;
        };
        let delay = reconnect.failed(&client);
        drop(client);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One session connection. `Ok` when the client is gone, `Err` to reconnect.
async fn session_once(
    inner: &Weak<Inner>,
    endpoint: &Endpoint,
    timeout: Duration,
    keepalive: Duration,
    desired: &mut BTreeMap<ServiceKey, Vec<InstanceSpec>>,
    requests: &mut mpsc::Receiver<Request>,
    reconnect: &mut Reconnect,
) -> Result<(), String> {
    let channel = connect(endpoint, timeout).await?;
    let (tx, outgoing) = mpsc::channel::<SessionRequest>(64);
    let outgoing = tokio_stream::wrappers::ReceiverStream::new(outgoing);
    let Some(client) = inner.upgrade() else {
        return Ok(());
    };
    let request = client.request(&channel, outgoing).await?;
    let mut answers = match RegistryClient::new(channel).session(request).await {
        Ok(answers) => answers.into_inner(),
        Err(status) => return Err(client.refused(status).await),
    };
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
    for (key, instances) in desired.iter() {
        send(register_request(next_id, key, instances)).await?;
        next_id += 1;
    }
    let mut pending: Pending = HashMap::new();
    let mut ticker = tokio::time::interval(keepalive);
    loop {
        tokio::select! {
            request = requests.recv() => {
                let Some(request) = request else { return Ok(()) };
                let id = next_id;
                next_id += 1;
                let (message, reply, desire) = match request {
                    Request::Register(key, instances, reply) => {
                        let message = register_request(id, &key, &instances);
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
        }
    }
}
