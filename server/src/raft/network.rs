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
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
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

use super::{codec, Batch, Member, NodeId, TypeConfig};

/// The request metadata key that carries the cluster secret.
pub const SECRET_METADATA: &str = "x-understudy-secret";

/// The largest raft message either side sends or accepts. Far above
/// tonic's 4 MiB default because one append can carry many batches; an
/// append that would exceed it is split by openraft (see
/// [`RPCError::PayloadTooLarge`]).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------
// Link faults

/// The faults of one directed link, from one node to another. The default
/// is a perfect link.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Link {
    /// Partitioned: a message on this link fails as unreachable at once.
    pub cut: bool,
    /// One-way latency added to every message on this link.
    pub delay: Duration,
    /// Probability in `[0, 1]` that an RPC sent over this link is lost; a
    /// lost RPC fails as unreachable after its delay.
    pub loss: f64,
}

impl Link {
    fn is_perfect(&self) -> bool {
        *self == Self::default()
    }
}

/// A link setting that cannot be applied.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum InvalidLink {
    /// The loss is not a probability.
    #[error("loss {loss} on link {from}->{to} is not a probability between 0 and 1")]
    Loss {
        /// The link's sender.
        from: NodeId,
        /// The link's receiver.
        to: NodeId,
        /// The value given.
        loss: f64,
    },
}

/// Why a message did not get through a link.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LinkDown {
    /// The link is cut.
    #[error("link {from}->{to} is cut")]
    Cut {
        /// The sender.
        from: NodeId,
        /// The receiver.
        to: NodeId,
    },
    /// The message was lost.
    #[error("an RPC on link {from}->{to} was lost")]
    Lost {
        /// The sender.
        from: NodeId,
        /// The receiver.
        to: NodeId,
    },
}

/// The injected faults of every directed link, shared by all clones and
/// changeable at run time (the admin API and chaos scenarios change them
/// while raft runs).
///
/// An RPC from `a` to `b` travels the link `a->b` and its answer travels
/// `b->a`: the request fails at once if `a->b` is cut, waits the delay of
/// `a->b`, is lost with the loss probability of `a->b` (one draw per RPC),
/// and, once answered, waits the delay of `b->a` and is lost if `b->a` is
/// cut by then. The helpers that act on a pair of nodes set both
/// directions, so a symmetric link with delay `d` gives a round trip of
/// `2 d`.
///
/// Loss draws are reproducible: each directed link has its own RNG seeded
/// from the seed given to [`LinkFaults::new`] and the link, so the n-th
/// lossy RPC on a link is lost or not whatever happens on other links.
#[derive(Clone)]
pub struct LinkFaults {
    shared: Arc<Mutex<Faults>>,
}

struct Faults {
    seed: u64,
    /// Only imperfect links are stored.
    links: HashMap<(NodeId, NodeId), Link>,
    /// Kept when a link is cleared, so a replay that sets and clears links
    /// in the same order draws the same losses.
    rngs: HashMap<(NodeId, NodeId), StdRng>,
}

impl fmt::Debug for LinkFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkFaults")
            .field("seed", &self.lock().seed)
            .field("links", &self.links())
            .finish()
    }
}

impl LinkFaults {
    /// A perfect network whose future loss draws follow `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            shared: Arc::new(Mutex::new(Faults {
                seed,
                links: HashMap::new(),
                rngs: HashMap::new(),
            })),
        }
    }

    /// The seed the loss draws follow (print it when a test fails).
    pub fn seed(&self) -> u64 {
        self.lock().seed
    }

    /// Sets the faults of the link `from->to`.
    pub fn set(&self, from: NodeId, to: NodeId, link: Link) -> Result<(), InvalidLink> {
        if !(0.0..=1.0).contains(&link.loss) {
            return Err(InvalidLink::Loss {
                from,
                to,
                loss: link.loss,
            });
        }
        let mut faults = self.lock();
        if link.is_perfect() {
            faults.links.remove(&(from, to));
        } else {
            faults.links.insert((from, to), link);
        }
        Ok(())
    }

    /// Sets the same faults on `a->b` and `b->a`.
    pub fn set_both(&self, a: NodeId, b: NodeId, link: Link) -> Result<(), InvalidLink> {
        self.set(a, b, link)?;
        self.set(b, a, link)
    }

    /// Makes the link `from->to` perfect.
    pub fn clear(&self, from: NodeId, to: NodeId) {
        self.lock().links.remove(&(from, to));
    }

    /// The faults of the link `from->to`.
    pub fn link(&self, from: NodeId, to: NodeId) -> Link {
        self.lock().link(from, to)
    }

    /// Every imperfect link as `(from, to, faults)`, sorted by link.
    pub fn links(&self) -> Vec<(NodeId, NodeId, Link)> {
        let mut links: Vec<_> = self
            .lock()
            .links
            .iter()
            .map(|(&(from, to), &link)| (from, to, link))
            .collect();
        links.sort_by_key(|&(from, to, _)| (from, to));
        links
    }

    /// Partitions `a` and `b` in both directions, keeping their delay and
    /// loss for when the cut heals.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        let mut faults = self.lock();
        for link in [(a, b), (b, a)] {
            faults.links.entry(link).or_default().cut = true;
        }
    }

    /// Removes the cut between `a` and `b` in both directions; their delay
    /// and loss stay.
    pub fn heal(&self, a: NodeId, b: NodeId) {
        let mut faults = self.lock();
        for link in [(a, b), (b, a)] {
            faults.uncut(link);
        }
    }

    /// Removes every cut; delays and losses stay.
    pub fn heal_all(&self) {
        let mut faults = self.lock();
        let cut: Vec<_> = faults.links.keys().copied().collect();
        for link in cut {
            faults.uncut(link);
        }
    }

    /// Makes every link perfect.
    pub fn clear_all(&self) {
        self.lock().links.clear();
    }

    /// Carries one RPC from `from` to `to` through the faults (see the
    /// type's documentation): `call` is the RPC itself and is not started
    /// unless the request gets through.
    pub async fn carry<F: Future>(
        &self,
        from: NodeId,
        to: NodeId,
        call: F,
    ) -> Result<F::Output, LinkDown> {
        let (delay, lost) = self.lock().send(from, to)?;
        sleep(delay).await;
        if lost {
            return Err(LinkDown::Lost { from, to });
        }
        // A cut made while the request was in flight drops it too.
        self.admits(from, to)?;
        let answer = call.await;
        sleep(self.link(to, from).delay).await;
        self.admits(to, from)?;
        Ok(answer)
    }

    /// Whether a message on `from->to` may be received now: only the cut
    /// counts, so a receiver can refuse a partitioned peer without
    /// charging the delay and loss the sender already applied.
    pub fn admits(&self, from: NodeId, to: NodeId) -> Result<(), LinkDown> {
        if self.link(from, to).cut {
            Err(LinkDown::Cut { from, to })
        } else {
            Ok(())
        }
    }

    fn lock(&self) -> MutexGuard<'_, Faults> {
        // The guard is never held across a panic point that leaves the
        // maps half-changed, so a poisoned lock still holds valid faults.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Faults {
    fn link(&self, from: NodeId, to: NodeId) -> Link {
        self.links.get(&(from, to)).copied().unwrap_or_default()
    }

    fn uncut(&mut self, link: (NodeId, NodeId)) {
        if let Some(faults) = self.links.get_mut(&link) {
            faults.cut = false;
            if faults.is_perfect() {
                self.links.remove(&link);
            }
        }
    }

    /// The request leg: refused at once if cut, else its delay and whether
    /// it is lost. Draws only on lossy links, so a perfect link never
    /// consumes randomness.
    fn send(&mut self, from: NodeId, to: NodeId) -> Result<(Duration, bool), LinkDown> {
        let link = self.link(from, to);
        if link.cut {
            return Err(LinkDown::Cut { from, to });
        }
        let lost = link.loss > 0.0 && {
            let seed = self.seed;
            let rng = self
                .rngs
                .entry((from, to))
                .or_insert_with(|| StdRng::seed_from_u64(link_seed(seed, from, to)));
            rng.random::<f64>() < link.loss
        };
        Ok((link.delay, lost))
    }
}

/// A per-link seed: distinct links get unrelated streams from one seed.
fn link_seed(seed: u64, from: NodeId, to: NodeId) -> u64 {
    seed ^ from.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ to.rotate_left(32).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
}

async fn sleep(delay: Duration) {
    // A zero sleep still registers a timer and yields; perfect links skip it.
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

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
enum ForwardAnswer {
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
}

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
        let channel = Endpoint::from_shared(format!("http://{}", member.raft_addr))
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(self.shared.options.connect_timeout)
            .connect_lazy();
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
            }
        };
        let carried = self.shared.faults.carry(from, target, send);
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
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

type Answer = Result<tonic::Response<RaftReply>, Status>;

impl RaftService {
    /// Checks the secret, the link and the addressee, in that order, and
    /// hands back the request.
    fn admit(&self, request: tonic::Request<RaftRequest>) -> Result<RaftRequest, Status> {
        if let Some(secret) = &self.secret {
            if !secret.is_in(request.metadata()) {
                return Err(Status::unauthenticated(format!(
                    "missing or wrong {SECRET_METADATA}"
                )));
            }
        }
        let request = request.into_inner();
        self.faults
            .admits(request.from, self.node_id)
            .map_err(|e| Status::unavailable(e.to_string()))?;
        if request.to != self.node_id {
            // A stale address: the sender must not mistake us for its target.
            return Err(Status::failed_precondition(format!(
                "this is node {}, not node {}",
                self.node_id, request.to
            )));
        }
        self.contacts.heard(request.from);
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    use openraft::{Config, Vote};
    use tokio::time::Instant;

    const MS: Duration = Duration::from_millis(1);
    /// Far longer than any test step takes.
    const LONG: Duration = Duration::from_secs(5);

    fn delayed(delay: Duration) -> Link {
        Link {
            delay,
            ..Link::default()
        }
    }

    fn lossy(loss: f64) -> Link {
        Link {
            loss,
            ..Link::default()
        }
    }

    // The server crate has no tokio `test-util`, so these run on real time:
    // delays are asserted as lower bounds, and "at once" as far below a
    // delay too long to be mistaken for it.

    #[tokio::test]
    async fn a_cut_fails_both_directions_at_once_without_running_the_call_and_heals() {
        let faults = LinkFaults::new(1);
        faults.set_both(1, 2, delayed(LONG)).unwrap();
        faults.cut(1, 2);
        let runs = AtomicUsize::new(0);
        let start = Instant::now();
        for (from, to) in [(1, 2), (2, 1)] {
            let result = faults
                .carry(from, to, async { runs.fetch_add(1, Ordering::SeqCst) })
                .await;
            assert_eq!(result, Err(LinkDown::Cut { from, to }));
        }
        assert!(start.elapsed() < LONG / 2, "{:?}", start.elapsed());
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        assert!(
            faults.carry(1, 3, async {}).await.is_ok(),
            "other links unaffected"
        );

        faults.heal(2, 1);
        assert_eq!(
            faults.link(1, 2),
            delayed(LONG),
            "the delay outlives the cut"
        );
        assert!(faults.admits(1, 2).is_ok() && faults.admits(2, 1).is_ok());
        faults.clear(1, 2);

        faults.cut(1, 2);
        faults.cut(3, 4);
        faults.heal_all();
        assert_eq!(
            faults.links(),
            vec![(2, 1, delayed(LONG))],
            "cut-only links vanish"
        );
        faults.clear_all();
        assert!(faults.links().is_empty());
    }

    #[tokio::test]
    async fn the_request_waits_its_link_delay_and_the_answer_the_reverse_one() {
        let faults = LinkFaults::new(1);
        faults.set(1, 2, delayed(40 * MS)).unwrap();
        faults.set(2, 1, delayed(10 * MS)).unwrap();
        let start = Instant::now();
        let ran_at = faults.carry(1, 2, async { Instant::now() }).await.unwrap();
        let answered = start.elapsed();
        assert!(ran_at - start >= 40 * MS, "ran after {:?}", ran_at - start);
        assert!(
            answered >= (ran_at - start) + 10 * MS,
            "answered after {answered:?}"
        );
        assert!(answered < LONG, "answered after {answered:?}");
    }

    #[tokio::test]
    async fn a_lost_rpc_fails_after_its_delay_and_a_cut_in_flight_drops_it() {
        let faults = LinkFaults::new(1);
        faults
            .set(
                1,
                2,
                Link {
                    delay: 40 * MS,
                    loss: 1.0,
                    cut: false,
                },
            )
            .unwrap();
        let start = Instant::now();
        let lost = faults.carry(1, 2, async { unreachable!("lost") }).await;
        assert_eq!(lost, Err::<(), _>(LinkDown::Lost { from: 1, to: 2 }));
        assert!(start.elapsed() >= 40 * MS, "{:?}", start.elapsed());

        faults.set(1, 2, delayed(40 * MS)).unwrap();
        let runs = AtomicUsize::new(0);
        // `join` polls in order: the request is in flight when the cut lands.
        let (in_flight, ()) = tokio::join!(
            faults.carry(1, 2, async { runs.fetch_add(1, Ordering::SeqCst) }),
            async { faults.cut(1, 2) }
        );
        assert_eq!(in_flight, Err(LinkDown::Cut { from: 1, to: 2 }));
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_one_way_cut_loses_the_answer_after_the_call_ran() {
        let faults = LinkFaults::new(1);
        faults
            .set(
                2,
                1,
                Link {
                    cut: true,
                    ..Link::default()
                },
            )
            .unwrap();
        let runs = AtomicUsize::new(0);
        let result = faults
            .carry(1, 2, async { runs.fetch_add(1, Ordering::SeqCst) })
            .await;
        assert_eq!(result, Err(LinkDown::Cut { from: 2, to: 1 }));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(faults.admits(1, 2).is_ok());
        assert!(faults.admits(2, 1).is_err());
    }

    async fn losses(faults: &LinkFaults, from: NodeId, to: NodeId, n: usize) -> Vec<bool> {
        let mut lost = Vec::with_capacity(n);
        for _ in 0..n {
            lost.push(faults.carry(from, to, async {}).await.is_err());
        }
        lost
    }

    #[tokio::test]
    async fn seeded_loss_replays_and_does_not_depend_on_other_links() {
        let a = LinkFaults::new(7);
        let b = LinkFaults::new(7);
        for faults in [&a, &b] {
            faults.set(1, 2, lossy(0.3)).unwrap();
            faults.set(1, 3, lossy(0.5)).unwrap();
        }
        let first = losses(&a, 1, 2, 200).await;
        // Traffic on another lossy link in between must not shift the draws.
        let _ = losses(&b, 1, 3, 37).await;
        let again = losses(&b, 1, 2, 200).await;
        assert_eq!(first, again, "seed {}", a.seed());
        let lost = first.iter().filter(|&&l| l).count();
        assert!((30..=90).contains(&lost), "lost {lost} of 200 at 30%");

        let other = LinkFaults::new(8);
        other.set(1, 2, lossy(0.3)).unwrap();
        assert_ne!(losses(&other, 1, 2, 200).await, first);
    }

    #[test]
    fn a_loss_that_is_not_a_probability_is_refused_by_value() {
        let faults = LinkFaults::new(1);
        for loss in [-0.1, 1.5, f64::NAN] {
            assert!(matches!(
                faults.set(1, 2, lossy(loss)),
                Err(InvalidLink::Loss { from: 1, to: 2, .. })
            ));
        }
        assert!(faults.links().is_empty());
    }

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
