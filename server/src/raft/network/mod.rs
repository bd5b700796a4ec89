//! The raft transport: openraft's RPCs and followers' forwarded writes over
//! the `understudy.raft.v1` gRPC service, on the raft port only. It owns
//! the client side ([`Network`], a [`RaftNetworkFactory`], and its
//! per-target [`Peer`]), the server side ([`service`]), the cluster secret
//! ([`ClusterSecret`]) and the injected link faults ([`LinkFaults`]) that
//! make partitions, latency and loss act on real raft traffic. Payloads are
//! openraft's own types through [`codec`], so the proto never mirrors them.
//! It decides nothing about raft: transport failures become
//! [`RPCError::Unreachable`] (openraft then backs off) and a remote raft
//! error travels back as a value and becomes [`RPCError::RemoteError`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{RPCTypes, RaftNetwork, RaftNetworkFactory};
use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use understudy_proto::peer::{self, peer_client::PeerClient};
use understudy_proto::raft::raft_client::RaftClient;
use understudy_proto::raft::RaftRequest;

use understudy_core::{BeatOutcome, LiveKey};

use super::{codec, Batch, Member, NodeId, TypeConfig};
use crate::faults::{LinkDown, LinkFaults};

mod admin;
mod contacts;
mod convert;
mod secret;
mod service;
#[cfg(test)]
mod tests;

pub use contacts::Contacts;
pub(crate) use secret::secret_matches;
pub use secret::{ClusterSecret, InvalidSecret};
pub use service::{service, RaftService};

/// The request metadata key that carries the cluster secret.
pub const SECRET_METADATA: &str = "x-understudy-secret";

/// The largest raft message either side sends or accepts. Far above
/// tonic's 4 MiB default because one append can carry many batches; an
/// append that would exceed it is split by openraft (see
/// [`RPCError::PayloadTooLarge`]).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------
// The client side

/// How a node talks to its peers.
#[derive(Debug, Clone)]
pub struct NetworkOptions {
    /// Sent with every call; peers with a secret refuse calls without it.
    pub secret: Option<ClusterSecret>,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// How long a forwarded batch may take to be committed by the leader,
    /// link delays included.
    pub forward_timeout: Duration,
    /// How long openraft waits before retrying an unreachable peer.
    pub backoff: Duration,
    /// TLS to the peers' raft ports, if the nodes speak it.
    pub tls: Option<crate::config::TlsConfig>,
}

impl Default for NetworkOptions {
    /// No secret, 1 s to connect, 5 s to forward, 500 ms backoff
    /// (openraft's own default).
    fn default() -> Self {
        Self {
            secret: None,
            connect_timeout: Duration::from_secs(1),
            forward_timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(500),
            tls: None,
        }
    }
}

/// A node's raft transport: the factory openraft asks for per-peer clients,
/// and the handle followers forward writes with. Cheap to clone; clones
/// share connections and faults.
#[derive(Clone, Debug)]
pub struct Network {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    node_id: NodeId,
    faults: LinkFaults,
    options: NetworkOptions,
    /// One lazily connected channel per peer, shared by openraft's clients
    /// and forwarding; replaced when the peer's address changes.
    channels: Mutex<HashMap<NodeId, (String, Channel)>>,
    contacts: Contacts,
    beats: Beats,
    admin: Admin,
    joins: Joins,
}

/// The handler of forwarded batches, once the node has set it.
#[derive(Clone, Default)]
struct Joins(Arc<std::sync::OnceLock<JoinHandler>>);

impl fmt::Debug for Joins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Joins(..)")
    }
}

/// The admin handler, once the node has set it.
#[derive(Clone, Default)]
struct Admin(Arc<std::sync::OnceLock<AdminHandler>>);

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Admin(..)")
    }
}

/// Why a forwarded batch was not committed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ForwardError {
    /// The leader could not be reached or did not answer in time. The
    /// outcome is unknown: the batch may still be committed, and then it is
    /// recognised by its `(origin, seq)` when it is applied.
    #[error("leader {leader} is unreachable: {reason}")]
    Unreachable {
        /// The node asked.
        leader: NodeId,
        /// What failed.
        reason: String,
    },
    /// The node asked is not the leader; the batch was not proposed.
    #[error("node {asked} is not the leader (it knows leader {leader:?})")]
    NotLeader {
        /// The node asked.
        asked: NodeId,
        /// The leader it knows of, if any.
        leader: Option<NodeId>,
    },
    /// The leader refused the batch (wrong secret, another codec format,
    /// a raft API error); retrying the same call will not help.
    #[error("leader {leader} rejected the batch: {reason}")]
    Rejected {
        /// The node asked.
        leader: NodeId,
        /// Why.
        reason: String,
    },
}

#[derive(Debug, Clone, Copy)]
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

/// An administrative request between nodes, each a call of the peer
/// service: out of band (not subject to the link faults, so an operator can
/// see and heal a partitioned node), except the ping.
#[derive(Debug, Clone, PartialEq)]
pub enum AdminRequest {
    /// The receiver's status.
    Status,
    /// Replace the receiver's fault model.
    SetFaults(crate::faults::FaultState),
    /// Are you there? The one admin request that travels through the
    /// link faults: it measures reachability (see [`super::gate`]).
    Ping,
    /// The leader is stopping: start elections until you lead.
    TakeOver,
    /// The receiver's Nacos gRPC connections that subscribe to a service
    /// or listen to a config.
    Clients(ClientsQuery),
}

/// Whose connections [`AdminRequest::Clients`] asks for, as the caller
/// gave them (the receiver validates them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientsQuery {
    /// Namespace.
    pub namespace: String,
    /// Group.
    pub group: String,
    /// The service's name, or the config's data id.
    pub name: String,
    /// Listeners of a config rather than subscribers of a service.
    pub config: bool,
}

/// One Nacos gRPC connection, as [`AdminReply::Clients`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectedClient {
    /// Its connection id.
    pub id: String,
    /// Its address.
    pub ip: String,
    /// Its port.
    pub port: u16,
    /// The SDK and version it announced.
    pub version: String,
    /// The application it named.
    pub app_name: String,
    /// When it last sent anything, epoch ms.
    pub last_active_ms: u64,
    /// The md5 it holds of the config (listeners only).
    pub md5: String,
}

impl From<&ConnectedClient> for understudy_proto::peer::ConnectedClient {
    fn from(c: &ConnectedClient) -> Self {
        Self {
            id: c.id.clone(),
            ip: c.ip.clone(),
            port: u32::from(c.port),
            version: c.version.clone(),
            app_name: c.app_name.clone(),
            last_active_ms: c.last_active_ms,
            md5: c.md5.clone(),
        }
    }
}

impl From<understudy_proto::peer::ConnectedClient> for ConnectedClient {
    fn from(c: understudy_proto::peer::ConnectedClient) -> Self {
        Self {
            id: c.id,
            ip: c.ip,
            port: u16::try_from(c.port).unwrap_or(0),
            version: c.version,
            app_name: c.app_name,
            last_active_ms: c.last_active_ms,
            md5: c.md5,
        }
    }
}

/// The answer to an [`AdminRequest`].
#[derive(Debug, Clone, PartialEq)]
pub enum AdminReply {
    /// The receiver's status.
    Status(Box<super::NodeStatus>),
    /// The fault model now in force at the receiver.
    Faults(crate::faults::FaultState),
    /// The request was refused, and why.
    Refused(String),
    /// The answer to a ping.
    Pong,
    /// The receiver is running for leader.
    TakingOver,
    /// The receiver's connections a [`ClientsQuery`] asked for.
    Clients(Vec<ConnectedClient>),
}

/// Answers admin requests sent to this node.
pub type AdminHandler = Arc<dyn Fn(AdminRequest) -> AdminReply + Send + Sync>;

/// Joins a batch a follower forwarded into this node's next entry and
/// answers that entry's index once it is applied (or why not).
pub type JoinHandler =
    Arc<dyn Fn(Batch) -> crate::write::BoxFuture<'static, Result<u64, String>> + Send + Sync>;

/// Answers beats forwarded to this node.
pub type BeatHandler = Arc<dyn Fn(&LiveKey) -> BeatOutcome + Send + Sync>;

/// The beat handler, once the node has set it.
#[derive(Clone, Default)]
struct Beats(Arc<std::sync::OnceLock<BeatHandler>>);

impl fmt::Debug for Beats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Beats(set)"
        } else {
            "Beats(unset)"
        })
    }
}

/// Why a call to a peer got no usable answer.
#[derive(Debug, Error)]
pub enum CallError {
    /// The link model dropped or cut the call.
    #[error(transparent)]
    Link(#[from] LinkDown),
    /// The peer's raft address is not one to call.
    #[error("bad raft address {addr:?}: {reason}")]
    Address {
        /// The address.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The peer did not answer in time.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The peer answered with an error status.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(Status),
    /// The answer lacks a part it must have.
    #[error("an answer without {0}")]
    Incomplete(&'static str),
    /// The answer names a value this node does not know (the peer runs
    /// another version).
    #[error("an answer with an unknown {what} {value}")]
    Unknown {
        /// What kind of value.
        what: &'static str,
        /// Its number on the wire.
        value: i32,
    },
}

impl Network {
    /// The transport of node `node_id`, subject to `faults`.
    pub fn new(node_id: NodeId, faults: LinkFaults, options: NetworkOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                node_id,
                faults,
                options,
                channels: Mutex::new(HashMap::new()),
                contacts: Contacts::default(),
                beats: Beats::default(),
                joins: Joins::default(),
                admin: Admin::default(),
            }),
        }
    }

    /// Sets how this node takes the batches followers forward to it
    /// (once; until then each becomes an entry of its own).
    pub fn on_forward(&self, handler: JoinHandler) {
        let _ = self.shared.joins.0.set(handler);
    }

    /// Sets how this node answers beats forwarded to it (once; the node
    /// does it when its state exists).
    pub fn on_beat(&self, handler: BeatHandler) {
        let _ = self.shared.beats.0.set(handler);
    }

    /// Hands a v1 beat to `target` (at `member`), the node responsible for
    /// the instance, and answers what it found there.
    pub async fn beat(
        &self,
        target: NodeId,
        member: &Member,
        key: &LiveKey,
        timeout: Duration,
    ) -> Result<BeatOutcome, CallError> {
        let request = self.request(
            peer::BeatRequest::of(self.shared.node_id, target, key),
            timeout,
        );
        let reply = self
            .carry(target, member, timeout, true, |mut peer| async move {
                peer.beat(request).await
            })
            .await?;
        let unknown = || CallError::Unknown {
            what: "beat outcome",
            value: reply.outcome,
        };
        let outcome = peer::BeatOutcome::try_from(reply.outcome).map_err(|_| unknown())?;
        BeatOutcome::try_from(outcome).map_err(|_| unknown())
    }

    /// Sets how this node answers admin requests (once).
    pub fn on_admin(&self, handler: AdminHandler) {
        let _ = self.shared.admin.0.set(handler);
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.shared.node_id
    }

    /// When each peer was last heard from.
    pub fn contacts(&self) -> &Contacts {
        &self.shared.contacts
    }

    /// The faults this transport obeys.
    pub fn faults(&self) -> &LinkFaults {
        &self.shared.faults
    }

    /// Asks `leader` (at `member`) to propose `batch`, and answers the log
    /// index it was committed at. The caller then waits until its own
    /// state machine applies that index to take the results.
    pub async fn forward(
        &self,
        leader: NodeId,
        member: &Member,
        batch: &Batch,
    ) -> Result<u64, ForwardError> {
        let unreachable = |reason: String| ForwardError::Unreachable { leader, reason };
        let rejected = |reason: String| ForwardError::Rejected { leader, reason };
        let batch = codec::encode(batch).map_err(|e| rejected(e.to_string()))?;
        let timeout = self.shared.options.forward_timeout;
        let request = self.request(
            peer::ForwardRequest {
                route: Some(peer::Route {
                    from: self.shared.node_id,
                    to: leader,
                }),
                batch,
            },
            timeout,
        );
        let reply = match self
            .carry(leader, member, timeout, true, |mut peer| async move {
                peer.forward(request).await
            })
            .await
        {
            Ok(reply) => reply,
            Err(CallError::Status(status)) if refused(&status) => {
                return Err(rejected(status.message().to_owned()))
            }
            Err(e) => return Err(unreachable(e.to_string())),
        };
        match reply.outcome {
            Some(peer::forward_reply::Outcome::CommittedIndex(index)) => Ok(index),
            Some(peer::forward_reply::Outcome::NotLeader(known)) => Err(ForwardError::NotLeader {
                asked: leader,
                leader: known.leader,
            }),
            Some(peer::forward_reply::Outcome::Rejected(reason)) => Err(rejected(reason)),
            // The batch may have been committed; only its answer is unreadable.
            None => Err(unreachable("an answer without an outcome".into())),
        }
    }

    fn channel(&self, target: NodeId, member: &Member) -> Result<Channel, CallError> {
        let mut channels = self
            .shared
            .channels
            .lock()
            // Only whole entries are inserted, so a poisoned map is intact.
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((addr, channel)) = channels.get(&target) {
            if *addr == member.raft_addr {
                return Ok(channel.clone());
            }
        }
        let bad = |reason: String| CallError::Address {
            addr: member.raft_addr.clone(),
            reason,
        };
        let tls = self.shared.options.tls.as_ref();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", member.raft_addr))
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(self.shared.options.connect_timeout);
        if let Some(tls) = tls {
            let host = member
                .raft_addr
                .rsplit_once(':')
                .map_or(member.raft_addr.as_str(), |(host, _)| host)
                .trim_start_matches('[')
                .trim_end_matches(']');
            endpoint = endpoint
                .tls_config(crate::tls::raft_client_config(tls, host))
                .map_err(|e| bad(e.to_string()))?;
        }
        let channel = endpoint.connect_lazy();
        channels.insert(target, (member.raft_addr.clone(), channel.clone()));
        Ok(channel)
    }

    /// One raft RPC through the link faults, within `timeout` (delays
    /// included).
    async fn call(
        &self,
        target: NodeId,
        member: &Member,
        rpc: Rpc,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        self.exchange(target, member, rpc, payload, timeout, true)
            .await
    }

    /// Delivers an append the relay ([`super::relay`]) has already carried
    /// through the link's delay and loss, and ignores the answer: the
    /// leader's own replication stays the only one that counts.
    pub(crate) async fn deliver_append(
        &self,
        target: NodeId,
        member: &Member,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), String> {
        self.exchange(target, member, Rpc::AppendEntries, payload, timeout, false)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn exchange(
        &self,
        target: NodeId,
        member: &Member,
        rpc: Rpc,
        payload: Vec<u8>,
        timeout: Duration,
        through_faults: bool,
    ) -> Result<Vec<u8>, CallError> {
        let request = self.request(
            RaftRequest {
                from: self.shared.node_id,
                to: target,
                payload,
            },
            timeout,
        );
        let channel = self.channel(target, member)?;
        let mut client = RaftClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let send = async move {
            match rpc {
                Rpc::AppendEntries => client.append_entries(request).await,
                Rpc::Vote => client.vote(request).await,
                Rpc::InstallSnapshot => client.install_snapshot(request).await,
            }
        };
        let reply = self.deliver(target, timeout, through_faults, send).await?;
        Ok(reply.payload)
    }

    /// A request carrying the cluster secret and the sender's deadline (the
    /// receiver stops working on a call its sender gave up on).
    fn request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        if let Some(secret) = &self.shared.options.secret {
            request
                .metadata_mut()
                .insert(SECRET_METADATA, secret.0.clone());
        }
        request
    }

    /// One call of the peer service to `target` (at `member`).
    async fn carry<T, F, Fut>(
        &self,
        target: NodeId,
        member: &Member,
        timeout: Duration,
        through_faults: bool,
        call: F,
    ) -> Result<T, CallError>
    where
        F: FnOnce(PeerClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let client = PeerClient::new(self.channel(target, member)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        self.deliver(target, timeout, through_faults, call(client))
            .await
    }

    /// Sends a call within `timeout`: through the link faults (whose delay
    /// does not count against it), or out of band. An answer counts as
    /// contact with `target`.
    async fn deliver<T>(
        &self,
        target: NodeId,
        timeout: Duration,
        through_faults: bool,
        send: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, CallError> {
        let from = self.shared.node_id;
        // Injected latency is the network's, not the peer's slowness: it
        // does not count against raft's RPC timeout (openraft times an
        // append by the heartbeat interval, shorter than a slow DC link).
        let timeout = if through_faults {
            let (there, back) = (
                self.shared.faults.link(from, target),
                self.shared.faults.link(target, from),
            );
            timeout + there.delay + there.jitter + back.delay + back.jitter
        } else {
            timeout
        };
        let carried = async {
            if through_faults {
                self.shared.faults.carry(from, target, send).await
            } else {
                Ok(send.await)
            }
        };
        match tokio::time::timeout(timeout, carried).await {
            Err(_) => Err(CallError::TimedOut(timeout)),
            Ok(Err(down)) => Err(CallError::Link(down)),
            Ok(Ok(Err(status))) => Err(CallError::Status(status)),
            Ok(Ok(Ok(reply))) => {
                self.shared.contacts.heard(target);
                Ok(reply.into_inner())
            }
        }
    }
}

/// Whether the receiver refused the call itself (as opposed to being
/// unreachable): retrying will not help.
fn refused(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unauthenticated | Code::InvalidArgument | Code::PermissionDenied
    )
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Peer {
        Peer {
            network: self.clone(),
            target,
            member: node.clone(),
        }
    }
}

/// openraft's client for one peer.
#[derive(Debug)]
pub struct Peer {
    network: Network,
    target: NodeId,
    member: Member,
}

impl Peer {
    /// Sends `request` as `rpc` and decodes the answer, which carries the
    /// remote raft result.
    async fn send<Q, A, E>(
        &self,
        rpc: Rpc,
        action: RPCTypes,
        request: &Q,
        option: &RPCOption,
    ) -> Result<A, RPCError<NodeId, Member, E>>
    where
        Q: Serialize,
        A: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload = codec::encode(request).map_err(|e| rpc_unreachable(&e))?;
        self.send_encoded(rpc, action, payload, option).await
    }

    async fn send_encoded<A, E>(
        &self,
        rpc: Rpc,
        action: RPCTypes,
        payload: Vec<u8>,
        option: &RPCOption,
    ) -> Result<A, RPCError<NodeId, Member, E>>
    where
        A: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let timeout = option.hard_ttl();
        let reply = self
            .network
            .call(self.target, &self.member, rpc, payload, timeout)
            .await
            .map_err(|e| match e {
                CallError::TimedOut(_) => RPCError::Timeout(Timeout {
                    action,
                    id: self.network.shared.node_id,
                    target: self.target,
                    timeout,
                }),
                other => {
                    if matches!(&other, CallError::Status(status) if refused(status)) {
                        // A misconfiguration, not a flaky link: say so loudly.
                        tracing::warn!(
                            target = self.target,
                            error = %other,
                            "raft peer refused the call"
                        );
                    }
                    rpc_unreachable(&other)
                }
            })?;
        let answer: Result<A, E> = codec::decode(&reply).map_err(|e| rpc_unreachable(&e))?;
        answer.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.member.clone(),
                e,
            ))
        })
    }
}

/// Every transport failure is `Unreachable`, the one error after which
/// openraft backs off instead of retrying at once.
fn rpc_unreachable<R, E>(e: &E) -> RPCError<NodeId, Member, R>
where
    R: std::error::Error,
    E: std::error::Error + 'static,
{
    RPCError::Unreachable(Unreachable::new(e))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        let payload = codec::encode(&rpc).map_err(|e| rpc_unreachable(&e))?;
        let entries = rpc.entries.len();
        if payload.len() > MAX_MESSAGE_BYTES && entries > 1 {
            // The receiver would refuse it; openraft splits it and retries
            // at once (a single oversized entry is left to fail remotely).
            let fit = (entries * MAX_MESSAGE_BYTES / payload.len()).max(1);
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(fit as u64),
            ));
        }
        self.send_encoded(
            Rpc::AppendEntries,
            RPCTypes::AppendEntries,
            payload,
            &option,
        )
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Member, RaftError<NodeId, InstallSnapshotError>>,
    > {
        if rpc.offset == 0 || rpc.done {
            tracing::info!(
                to = self.target,
                snapshot = %rpc.meta.snapshot_id,
                sent_bytes = rpc.offset + rpc.data.len() as u64,
                done = rpc.done,
                "sending a snapshot"
            );
        }
        self.send(
            Rpc::InstallSnapshot,
            RPCTypes::InstallSnapshot,
            &rpc,
            &option,
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        self.send(Rpc::Vote, RPCTypes::Vote, &rpc, &option).await
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.network.shared.options.backoff))
    }
}
