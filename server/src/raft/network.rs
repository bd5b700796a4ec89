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
    ClientWriteError, InstallSnapshotError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{RPCTypes, RaftNetwork, RaftNetworkFactory};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use understudy_proto::raft::raft_client::RaftClient;
use understudy_proto::raft::raft_server::{Raft as RaftRpc, RaftServer};
use understudy_proto::raft::{RaftReply, RaftRequest};

use understudy_core::{BeatOutcome, LiveKey};

pub use super::links::{InvalidLink, Link, LinkDown, LinkFaults};
use super::{codec, Batch, Member, NodeId, TypeConfig};

/// The request metadata key that carries the cluster secret.
pub const SECRET_METADATA: &str = "x-understudy-secret";

/// The largest raft message either side sends or accepts. Far above
/// tonic's 4 MiB default because one append can carry many batches; an
/// append that would exceed it is split by openraft (see
/// [`RPCError::PayloadTooLarge`]).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------
// The cluster secret

/// The shared secret every raft call carries; its `Debug` never shows it.
#[derive(Clone)]
pub struct ClusterSecret(AsciiMetadataValue);

/// A secret that cannot travel as gRPC metadata.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the cluster secret must be non-empty visible ASCII (it travels as gRPC metadata)")]
pub struct InvalidSecret;

impl ClusterSecret {
    /// Checks that `secret` can travel as metadata.
    pub fn new(secret: &str) -> Result<Self, InvalidSecret> {
        if secret.is_empty() || !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InvalidSecret);
        }
        AsciiMetadataValue::try_from(secret)
            .map(Self)
            .map_err(|_| InvalidSecret)
    }

    /// Whether `metadata` carries this secret. Compares in time independent
    /// of where the bytes differ, so a peer cannot guess it byte by byte.
    fn is_in(&self, metadata: &MetadataMap) -> bool {
        let Some(given) = metadata.get(SECRET_METADATA) else {
            return false;
        };
        let (want, given) = (self.0.as_bytes(), given.as_bytes());
        want.len() == given.len()
            && want
                .iter()
                .zip(given)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

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

/// When this node last heard from each peer: an answer to a call it made,
/// or a call a peer made to it. The leader judges from it that a member is
/// gone; a follower, that it has lost its leader. Clones share the record.
#[derive(Debug, Clone, Default)]
pub struct Contacts(Arc<Mutex<HashMap<NodeId, tokio::time::Instant>>>);

impl Contacts {
    fn heard(&self, peer: NodeId) {
        // Only whole values are inserted, so a poisoned map is intact.
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        last.insert(peer, tokio::time::Instant::now());
    }

    /// When `peer` was last heard from, if ever.
    pub fn last(&self, peer: NodeId) -> Option<tokio::time::Instant> {
        let last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        last.get(&peer).copied()
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

/// The forward answer as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ForwardAnswer {
    Committed { index: u64 },
    NotLeader { leader: Option<NodeId> },
    Rejected { reason: String },
}

#[derive(Debug, Clone, Copy)]
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
    Forward,
    Beat,
    Admin,
}

/// An out-of-band administrative request between nodes: not subject to
/// the link faults, so an operator can see and heal a partitioned node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// The receiver's status.
    Status,
    /// Replace the receiver's fault model.
    SetFaults(super::links::FaultState),
    /// Are you there? The one admin request that travels through the
    /// link faults: it measures reachability (see [`super::gate`]).
    Ping,
    /// The leader is stopping: start elections until you lead.
    TakeOver,
}

/// The answer to an [`AdminRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AdminReply {
    /// The receiver's status.
    Status(Box<super::NodeStatus>),
    /// The fault model now in force at the receiver.
    Faults(super::links::FaultState),
    /// The request was refused, and why.
    Refused(String),
    /// The answer to a ping.
    Pong,
    /// The receiver is running for leader.
    TakingOver,
}

/// Answers admin requests sent to this node.
pub type AdminHandler = Arc<dyn Fn(AdminRequest) -> AdminReply + Send + Sync>;

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

/// Why a call got no answer payload.
#[derive(Debug, Error)]
enum CallError {
    #[error(transparent)]
    Link(#[from] LinkDown),
    #[error("bad raft address {addr:?}: {reason}")]
    Address { addr: String, reason: String },
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error("{}: {}", .0.code(), .0.message())]
    Status(Status),
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
                admin: Admin::default(),
            }),
        }
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
    ) -> Result<BeatOutcome, String> {
        let payload = codec::encode(key).map_err(|e| e.to_string())?;
        let reply = self
            .call(target, member, Rpc::Beat, payload, timeout)
            .await
            .map_err(|e| e.to_string())?;
        codec::decode(&reply).map_err(|e| e.to_string())
    }

    /// Sets how this node answers admin requests (once).
    pub fn on_admin(&self, handler: AdminHandler) {
        let _ = self.shared.admin.0.set(handler);
    }

    /// Sends `request` to `target` (at `member`) out of band.
    pub async fn admin(
        &self,
        target: NodeId,
        member: &Member,
        request: &AdminRequest,
        timeout: Duration,
    ) -> Result<AdminReply, String> {
        self.admin_call(target, member, request, timeout, false)
            .await
    }

    async fn admin_call(
        &self,
        target: NodeId,
        member: &Member,
        request: &AdminRequest,
        timeout: Duration,
        through_faults: bool,
    ) -> Result<AdminReply, String> {
        let payload = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let reply = self
            .exchange(target, member, Rpc::Admin, payload, timeout, through_faults)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::from_slice(&reply).map_err(|e| e.to_string())
    }

    /// Pings `target` through the link faults; an answer counts as
    /// contact.
    pub async fn ping(
        &self,
        target: NodeId,
        member: &Member,
        timeout: Duration,
    ) -> Result<AdminReply, String> {
        self.admin_call(target, member, &AdminRequest::Ping, timeout, true)
            .await
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
        let payload = codec::encode(batch).map_err(|e| rejected(e.to_string()))?;
        let timeout = self.shared.options.forward_timeout;
        let reply = match self
            .call(leader, member, Rpc::Forward, payload, timeout)
            .await
        {
            Ok(reply) => reply,
            Err(CallError::Status(status)) if refused(&status) => {
                return Err(rejected(status.message().to_owned()))
            }
            Err(e) => return Err(unreachable(e.to_string())),
        };
        match codec::decode(&reply) {
            Ok(ForwardAnswer::Committed { index }) => Ok(index),
            Ok(ForwardAnswer::NotLeader { leader: known }) => Err(ForwardError::NotLeader {
                asked: leader,
                leader: known,
            }),
            Ok(ForwardAnswer::Rejected { reason }) => Err(rejected(reason)),
            // The batch may have been committed; only its answer is unreadable.
            Err(e) => Err(unreachable(format!("unreadable answer: {e}"))),
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

    /// One RPC through the link faults, within `timeout` (delays included).
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
        let from = self.shared.node_id;
        let channel = self.channel(target, member)?;
        let mut request = tonic::Request::new(RaftRequest {
            from,
            to: target,
            payload,
        });
        // The receiver stops working on a call its sender gave up on.
        request.set_timeout(timeout);
        if let Some(secret) = &self.shared.options.secret {
            request
                .metadata_mut()
                .insert(SECRET_METADATA, secret.0.clone());
        }
        let mut client = RaftClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let send = async move {
            match rpc {
                Rpc::AppendEntries => client.append_entries(request).await,
                Rpc::Vote => client.vote(request).await,
                Rpc::InstallSnapshot => client.install_snapshot(request).await,
                Rpc::Forward => client.forward(request).await,
                Rpc::Beat => client.beat(request).await,
                Rpc::Admin => client.admin(request).await,
            }
        };
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
                Ok(reply.into_inner().payload)
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

// ---------------------------------------------------------------------------
// The server side

/// The raft gRPC service of one node: hands peers' RPCs to its raft and
/// proposes forwarded batches. Built by [`service`].
pub struct RaftService {
    raft: super::Raft,
    node_id: NodeId,
    faults: LinkFaults,
    secret: Option<ClusterSecret>,
    contacts: Contacts,
    beats: Beats,
    admin: Admin,
}

impl fmt::Debug for RaftService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftService")
            .field("node_id", &self.node_id)
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

/// The raft service of the node whose transport is `network`, ready to add
/// to a tonic `Server` on the raft port. With a secret in the network's
/// options, calls without it are refused as `Unauthenticated`; calls from
/// a peer whose link to this node is cut in the network's faults are
/// refused as `Unavailable`. Admitted calls count as contact with their
/// sender.
pub fn service(raft: super::Raft, network: &Network) -> RaftServer<RaftService> {
    let shared = &network.shared;
    RaftServer::new(RaftService {
        raft,
        node_id: shared.node_id,
        faults: shared.faults.clone(),
        secret: shared.options.secret.clone(),
        contacts: shared.contacts.clone(),
        beats: shared.beats.clone(),
        admin: shared.admin.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

type Answer = Result<tonic::Response<RaftReply>, Status>;

impl RaftService {
    /// Checks the secret, the link and the addressee, in that order, and
    /// hands back the request.
    fn admit(&self, request: tonic::Request<RaftRequest>) -> Result<RaftRequest, Status> {
        let request = self.admit_out_of_band(request)?;
        self.faults
            .admits(request.from, self.node_id)
            .map_err(|e| Status::unavailable(e.to_string()))?;
        self.contacts.heard(request.from);
        Ok(request)
    }

    /// Checks the secret and the addressee, not the link.
    fn admit_out_of_band(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<RaftRequest, Status> {
        if let Some(secret) = &self.secret {
            if !secret.is_in(request.metadata()) {
                return Err(Status::unauthenticated(format!(
                    "missing or wrong {SECRET_METADATA}"
                )));
            }
        }
        let request = request.into_inner();
        if request.to != self.node_id {
            // A stale address: the sender must not mistake us for its target.
            return Err(Status::failed_precondition(format!(
                "this is node {}, not node {}",
                self.node_id, request.to
            )));
        }
        Ok(request)
    }
}

/// Decodes a payload, naming what failed in the `InvalidArgument` status.
fn decode<T: DeserializeOwned>(payload: &[u8], what: &str) -> Result<T, Status> {
    codec::decode(payload).map_err(|e| Status::invalid_argument(format!("{what}: {e}")))
}

fn reply<T: Serialize>(value: &T) -> Answer {
    codec::encode(value)
        .map(|payload| tonic::Response::new(RaftReply { payload }))
        .map_err(|e| Status::internal(format!("could not encode the answer: {e}")))
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(&self, request: tonic::Request<RaftRequest>) -> Answer {
        let request = self.admit(request)?;
        let rpc: AppendEntriesRequest<TypeConfig> =
            decode(&request.payload, "append-entries request")?;
        reply(&self.raft.append_entries(rpc).await)
    }

    async fn vote(&self, request: tonic::Request<RaftRequest>) -> Answer {
        let request = self.admit(request)?;
        let rpc: VoteRequest<NodeId> = decode(&request.payload, "vote request")?;
        reply(&self.raft.vote(rpc).await)
    }

    async fn install_snapshot(&self, request: tonic::Request<RaftRequest>) -> Answer {
        let request = self.admit(request)?;
        let rpc: InstallSnapshotRequest<TypeConfig> =
            decode(&request.payload, "install-snapshot request")?;
        // A snapshot comes in chunks: say where it stands.
        let received = rpc.offset + rpc.data.len() as u64;
        let (leader, index) = (rpc.vote.leader_id().voted_for(), rpc.meta.last_log_id);
        if rpc.offset == 0 || rpc.done {
            tracing::info!(
                from = ?leader,
                snapshot = %rpc.meta.snapshot_id,
                up_to = ?index.map(|l| l.index),
                received_bytes = received,
                done = rpc.done,
                "receiving a snapshot"
            );
        } else {
            tracing::debug!(received_bytes = received, "receiving a snapshot");
        }
        reply(&self.raft.install_snapshot(rpc).await)
    }

    async fn beat(&self, request: tonic::Request<RaftRequest>) -> Answer {
        let request = self.admit(request)?;
        let key: LiveKey = decode(&request.payload, "beat")?;
        let handler = self
            .beats
            .0
            .get()
            .ok_or_else(|| Status::unavailable("this node is not serving beats yet"))?;
        reply(&handler(&key))
    }

    async fn admin(&self, request: tonic::Request<RaftRequest>) -> Answer {
        let request = self.admit_out_of_band(request)?;
        let admin: AdminRequest = serde_json::from_slice(&request.payload)
            .map_err(|e| Status::invalid_argument(format!("admin request: {e}")))?;
        if admin == AdminRequest::Ping {
            self.faults
                .admits(request.from, self.node_id)
                .map_err(|e| Status::unavailable(e.to_string()))?;
            self.contacts.heard(request.from);
            let pong = serde_json::to_vec(&AdminReply::Pong)
                .map_err(|e| Status::internal(format!("could not encode the answer: {e}")))?;
            return Ok(tonic::Response::new(RaftReply { payload: pong }));
        }
        let handler =
            self.admin.0.get().ok_or_else(|| {
                Status::unavailable("this node is not serving admin requests yet")
            })?;
        let answer = serde_json::to_vec(&handler(admin))
            .map_err(|e| Status::internal(format!("could not encode the answer: {e}")))?;
        Ok(tonic::Response::new(RaftReply { payload: answer }))
    }

    async fn forward(&self, request: tonic::Request<RaftRequest>) -> Answer {
        let request = self.admit(request)?;
        let batch: Batch = decode(&request.payload, "forwarded batch")?;
        let answer = match self.raft.client_write(Arc::new(batch)).await {
            Ok(written) => ForwardAnswer::Committed {
                index: written.log_id.index,
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                ForwardAnswer::NotLeader {
                    leader: to.leader_id,
                }
            }
            Err(RaftError::APIError(e)) => ForwardAnswer::Rejected {
                reason: e.to_string(),
            },
            // This node's raft is stopping or broken: to the sender it is
            // as good as unreachable, and it should retry elsewhere.
            Err(RaftError::Fatal(e)) => return Err(Status::unavailable(e.to_string())),
        };
        reply(&answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeMap;

    use openraft::{Config, Vote};
    use tokio::time::Instant;

    #[test]
    fn a_secret_must_be_visible_ascii_and_never_prints() {
        assert_eq!(ClusterSecret::new("").unwrap_err(), InvalidSecret);
        assert_eq!(ClusterSecret::new("a b").unwrap_err(), InvalidSecret);
        assert_eq!(ClusterSecret::new("pä").unwrap_err(), InvalidSecret);
        let secret = ClusterSecret::new("s3cret").unwrap();
        assert!(!format!("{secret:?}").contains("s3cret"));
    }

    /// A minimal in-memory log and state machine, enough to run a real
    /// `openraft::Raft` behind the service. Its snapshot is
    /// [`SNAPSHOT_BYTES`] filler bytes, so sending one takes several chunks.
    mod mem {
        use std::fmt::Debug;
        use std::io::Cursor;
        use std::ops::RangeBounds;

        use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine, Snapshot};
        use openraft::{
            Entry, EntryPayload, LogId, LogState, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta,
            StorageError, StoredMembership, Vote,
        };

        use super::super::super::BatchApplied;
        use super::*;

        pub(super) const SNAPSHOT_BYTES: usize = 10_000;

        #[derive(Default)]
        struct LogInner {
            vote: Option<Vote<NodeId>>,
            purged: Option<LogId<NodeId>>,
            log: BTreeMap<u64, Entry<TypeConfig>>,
        }

        #[derive(Clone, Default)]
        pub(super) struct Log(Arc<Mutex<LogInner>>);

        impl RaftLogReader<TypeConfig> for Log {
            async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
                &mut self,
                range: RB,
            ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
                let inner = self.0.lock().unwrap();
                Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
            }
        }

        impl RaftLogStorage<TypeConfig> for Log {
            type LogReader = Self;

            async fn get_log_state(
                &mut self,
            ) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
                let inner = self.0.lock().unwrap();
                let last = inner.log.values().next_back().map(|e| e.log_id);
                Ok(LogState {
                    last_purged_log_id: inner.purged,
                    last_log_id: last.or(inner.purged),
                })
            }

            async fn get_log_reader(&mut self) -> Self {
                self.clone()
            }

            async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
                self.0.lock().unwrap().vote = Some(*vote);
                Ok(())
            }

            async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
                Ok(self.0.lock().unwrap().vote)
            }

            async fn append<I>(
                &mut self,
                entries: I,
                callback: LogFlushed<TypeConfig>,
            ) -> Result<(), StorageError<NodeId>>
            where
                I: IntoIterator<Item = Entry<TypeConfig>> + Send,
                I::IntoIter: Send,
            {
                let mut inner = self.0.lock().unwrap();
                for entry in entries {
                    inner.log.insert(entry.log_id.index, entry);
                }
                callback.log_io_completed(Ok(()));
                Ok(())
            }

            async fn truncate(
                &mut self,
                log_id: LogId<NodeId>,
            ) -> Result<(), StorageError<NodeId>> {
                self.0.lock().unwrap().log.split_off(&log_id.index);
                Ok(())
            }

            async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
                let mut inner = self.0.lock().unwrap();
                inner.log = inner.log.split_off(&(log_id.index + 1));
                inner.purged = Some(log_id);
                Ok(())
            }
        }

        #[derive(Default)]
        struct MachineInner {
            applied: Option<LogId<NodeId>>,
            membership: StoredMembership<NodeId, Member>,
            snapshot: Option<(SnapshotMeta<NodeId, Member>, Vec<u8>)>,
        }

        #[derive(Clone, Default)]
        pub(super) struct Machine(Arc<Mutex<MachineInner>>);

        impl Machine {
            /// The size of the snapshot last installed or built, if any.
            pub(super) fn snapshot_len(&self) -> Option<usize> {
                let inner = self.0.lock().unwrap();
                inner.snapshot.as_ref().map(|(_, data)| data.len())
            }
        }

        impl RaftSnapshotBuilder<TypeConfig> for Machine {
            async fn build_snapshot(
                &mut self,
            ) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
                let mut inner = self.0.lock().unwrap();
                let meta = SnapshotMeta {
                    last_log_id: inner.applied,
                    last_membership: inner.membership.clone(),
                    snapshot_id: format!("{:?}", inner.applied),
                };
                let data = vec![7; SNAPSHOT_BYTES];
                inner.snapshot = Some((meta.clone(), data.clone()));
                Ok(Snapshot {
                    meta,
                    snapshot: Box::new(Cursor::new(data)),
                })
            }
        }

        impl RaftStateMachine<TypeConfig> for Machine {
            type SnapshotBuilder = Self;

            async fn applied_state(
                &mut self,
            ) -> Result<
                (Option<LogId<NodeId>>, StoredMembership<NodeId, Member>),
                StorageError<NodeId>,
            > {
                let inner = self.0.lock().unwrap();
                Ok((inner.applied, inner.membership.clone()))
            }

            async fn apply<I>(
                &mut self,
                entries: I,
            ) -> Result<Vec<BatchApplied>, StorageError<NodeId>>
            where
                I: IntoIterator<Item = Entry<TypeConfig>> + Send,
                I::IntoIter: Send,
            {
                let mut inner = self.0.lock().unwrap();
                let mut applied = Vec::new();
                for entry in entries {
                    inner.applied = Some(entry.log_id);
                    let commands = match entry.payload {
                        EntryPayload::Normal(batch) => batch.commands.len(),
                        EntryPayload::Membership(m) => {
                            inner.membership = StoredMembership::new(Some(entry.log_id), m);
                            0
                        }
                        EntryPayload::Blank => 0,
                    };
                    applied.push(BatchApplied { commands });
                }
                Ok(applied)
            }

            async fn get_snapshot_builder(&mut self) -> Self {
                self.clone()
            }

            async fn begin_receiving_snapshot(
                &mut self,
            ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
                Ok(Box::new(Cursor::new(Vec::new())))
            }

            async fn install_snapshot(
                &mut self,
                meta: &SnapshotMeta<NodeId, Member>,
                snapshot: Box<Cursor<Vec<u8>>>,
            ) -> Result<(), StorageError<NodeId>> {
                let mut inner = self.0.lock().unwrap();
                inner.applied = meta.last_log_id;
                inner.membership = meta.last_membership.clone();
                inner.snapshot = Some((meta.clone(), snapshot.into_inner()));
                Ok(())
            }

            async fn get_current_snapshot(
                &mut self,
            ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
                let inner = self.0.lock().unwrap();
                Ok(inner.snapshot.clone().map(|(meta, data)| Snapshot {
                    meta,
                    snapshot: Box::new(Cursor::new(data)),
                }))
            }
        }
    }

    const WAIT: Duration = Duration::from_secs(10);

    /// A real raft for node `id`; with `member`, a one-node cluster that
    /// has elected itself. Snapshots travel in 1 KiB chunks and leave no
    /// log behind, so a late learner needs one.
    async fn raft_with(id: NodeId, member: Option<Member>) -> (super::super::Raft, mem::Machine) {
        let config = Config {
            heartbeat_interval: 50,
            election_timeout_min: 150,
            election_timeout_max: 300,
            snapshot_max_chunk_size: 1024,
            max_in_snapshot_log_to_keep: 0,
            ..Config::default()
        }
        .validate()
        .unwrap();
        let network = Network::new(id, LinkFaults::new(0), NetworkOptions::default());
        let machine = mem::Machine::default();
        let raft = openraft::Raft::new(
            id,
            Arc::new(config),
            network,
            mem::Log::default(),
            machine.clone(),
        )
        .await
        .unwrap();
        if let Some(member) = member {
            raft.initialize(BTreeMap::from([(id, member)]))
                .await
                .unwrap();
            raft.wait(Some(WAIT))
                .current_leader(id, "elects itself")
                .await
                .unwrap();
        }
        (raft, machine)
    }

    async fn raft(id: NodeId, member: Option<Member>) -> super::super::Raft {
        raft_with(id, member).await.0
    }

    fn batch() -> Batch {
        Batch {
            origin: 2,
            seq: 1,
            commands: Vec::new(),
            stamp_ms: 0,
        }
    }

    fn vote_payload() -> Vec<u8> {
        codec::encode(&VoteRequest::<NodeId>::new(Vote::new(1, 2), None)).unwrap()
    }

    fn request(
        from: NodeId,
        to: NodeId,
        payload: Vec<u8>,
        secret: Option<&str>,
    ) -> tonic::Request<RaftRequest> {
        let mut request = tonic::Request::new(RaftRequest { from, to, payload });
        if let Some(secret) = secret {
            request
                .metadata_mut()
                .insert(SECRET_METADATA, secret.parse().unwrap());
        }
        request
    }

    #[tokio::test]
    async fn the_service_refuses_a_missing_or_wrong_secret_a_cut_peer_and_a_stale_address() {
        let faults = LinkFaults::new(0);
        let secret = ClusterSecret::new("right").unwrap();
        let svc = RaftService {
            raft: raft(1, None).await,
            node_id: 1,
            faults: faults.clone(),
            secret: Some(secret),
            contacts: Contacts::default(),
            beats: Beats::default(),
            admin: Admin::default(),
        };
        for wrong in [None, Some("wrong"), Some("righ")] {
            let status = svc
                .vote(request(2, 1, vote_payload(), wrong))
                .await
                .unwrap_err();
            assert_eq!(status.code(), Code::Unauthenticated, "{wrong:?}");
        }
        let answer = svc
            .vote(request(2, 1, vote_payload(), Some("right")))
            .await
            .unwrap();
        let decoded: Result<VoteResponse<NodeId>, RaftError<NodeId>> =
            codec::decode(&answer.into_inner().payload).unwrap();
        assert!(decoded.is_ok());

        let status = svc
            .vote(request(2, 3, vote_payload(), Some("right")))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition);

        faults.cut(1, 2);
        let status = svc
            .vote(request(2, 1, vote_payload(), Some("right")))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert!(svc
            .vote(request(3, 1, vote_payload(), Some("right")))
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn a_garbage_payload_is_an_invalid_argument_naming_what_failed() {
        let svc = RaftService {
            raft: raft(1, None).await,
            node_id: 1,
            faults: LinkFaults::new(0),
            secret: None,
            contacts: Contacts::default(),
            beats: Beats::default(),
            admin: Admin::default(),
        };
        let garbage = || vec![codec::FORMAT, 0xff, 0xff, 0xff];
        let answers = [
            (
                "append-entries request",
                svc.append_entries(request(2, 1, garbage(), None)).await,
            ),
            (
                "vote request",
                svc.vote(request(2, 1, garbage(), None)).await,
            ),
            (
                "install-snapshot request",
                svc.install_snapshot(request(2, 1, garbage(), None)).await,
            ),
            (
                "forwarded batch",
                svc.forward(request(2, 1, garbage(), None)).await,
            ),
            (
                "vote request",
                svc.vote(request(2, 1, Vec::new(), None)).await,
            ),
            (
                "vote request",
                svc.vote(request(2, 1, vec![codec::FORMAT + 1], None)).await,
            ),
        ];
        for (what, answer) in answers {
            let status = answer.unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(status.message().starts_with(what), "{}", status.message());
        }
    }

    /// Serves `raft` as node `id` on a fresh port until the test ends.
    async fn serve(raft: super::super::Raft, id: NodeId, secret: Option<&str>) -> Member {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = service(raft, &network(id, secret));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        Member {
            raft_addr: addr.to_string(),
            dc: "test".into(),
        }
    }

    fn network(id: NodeId, secret: Option<&str>) -> Network {
        Network::new(
            id,
            LinkFaults::new(0),
            NetworkOptions {
                secret: secret.map(|s| ClusterSecret::new(s).unwrap()),
                connect_timeout: Duration::from_millis(500),
                forward_timeout: Duration::from_secs(5),
                ..NetworkOptions::default()
            },
        )
    }

    #[tokio::test]
    async fn over_loopback_a_follower_forwards_to_the_leader_and_raft_rpcs_travel() {
        let placeholder = Member {
            raft_addr: "127.0.0.1:1".into(),
            dc: "test".into(),
        };
        let leader = serve(raft(1, Some(placeholder)).await, 1, Some("s")).await;
        let follower = network(2, Some("s"));

        let first = follower.forward(1, &leader, &batch()).await.unwrap();
        let second = follower.forward(1, &leader, &batch()).await.unwrap();
        assert!(second > first, "{first} then {second}");

        let mut peer = follower.clone().new_client(1, &leader).await;
        let vote = VoteRequest::<NodeId>::new(Vote::new(0, 2), None);
        let answer = peer.vote(vote, RPCOption::new(WAIT)).await.unwrap();
        assert!(!answer.vote_granted, "an older term gets no vote");

        let intruder = network(3, Some("guess"));
        assert!(matches!(
            intruder.forward(1, &leader, &batch()).await,
            Err(ForwardError::Rejected { leader: 1, .. })
        ));
        let mut peer = intruder.clone().new_client(1, &leader).await;
        let vote = VoteRequest::<NodeId>::new(Vote::new(0, 3), None);
        assert!(matches!(
            peer.vote(vote, RPCOption::new(WAIT)).await,
            Err(RPCError::Unreachable(_))
        ));

        follower.faults().cut(2, 1);
        let started = Instant::now();
        assert!(matches!(
            follower.forward(1, &leader, &batch()).await,
            Err(ForwardError::Unreachable { leader: 1, .. })
        ));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a cut fails at once"
        );
    }

    #[tokio::test]
    async fn over_loopback_a_node_that_is_not_leader_or_not_listening_says_so() {
        let lone = serve(raft(5, None).await, 5, None).await;
        let follower = network(2, None);
        assert_eq!(
            follower.forward(5, &lone, &batch()).await,
            Err(ForwardError::NotLeader {
                asked: 5,
                leader: None
            })
        );

        let closed = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap()
        };
        let nobody = Member {
            raft_addr: closed.to_string(),
            dc: "test".into(),
        };
        assert!(matches!(
            follower.forward(6, &nobody, &batch()).await,
            Err(ForwardError::Unreachable { leader: 6, .. })
        ));
        let mut peer = follower.clone().new_client(6, &nobody).await;
        let vote = VoteRequest::<NodeId>::new(Vote::new(1, 2), None);
        assert!(matches!(
            peer.vote(vote, RPCOption::new(WAIT)).await,
            Err(RPCError::Unreachable(_))
        ));
    }

    #[tokio::test]
    async fn over_loopback_learners_catch_up_by_entries_and_by_a_chunked_snapshot() {
        let placeholder = Member {
            raft_addr: "127.0.0.1:1".into(),
            dc: "test".into(),
        };
        let leader = raft(1, Some(placeholder)).await;
        let leader_addr = serve(leader.clone(), 1, None).await;
        let (second, _) = raft_with(2, None).await;
        let second_addr = serve(second.clone(), 2, None).await;

        // Entries: append-entries over the wire.
        leader.add_learner(2, second_addr, true).await.unwrap();
        let index = network(2, None)
            .forward(1, &leader_addr, &batch())
            .await
            .unwrap();
        second
            .wait(Some(WAIT))
            .applied_index_at_least(Some(index), "learner 2 applies the batch")
            .await
            .unwrap();

        // A snapshot: the leader keeps no log behind it, so a new learner
        // can only catch up through install-snapshot chunks.
        leader.trigger().snapshot().await.unwrap();
        leader
            .wait(Some(WAIT))
            .metrics(
                |m| m.snapshot.map(|s| s.index) >= Some(index),
                "snapshot built",
            )
            .await
            .unwrap();
        leader.trigger().purge_log(index).await.unwrap();
        leader
            .wait(Some(WAIT))
            .metrics(|m| m.purged.map(|p| p.index) >= Some(index), "log purged")
            .await
            .unwrap();
        let (third, third_machine) = raft_with(3, None).await;
        let third_addr = serve(third.clone(), 3, None).await;
        leader.add_learner(3, third_addr, true).await.unwrap();
        third
            .wait(Some(WAIT))
            .metrics(
                |m| m.snapshot.map(|s| s.index) >= Some(index),
                "snapshot installed",
            )
            .await
            .unwrap();
        assert_eq!(third_machine.snapshot_len(), Some(mem::SNAPSHOT_BYTES));
    }
}
