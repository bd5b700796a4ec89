//! The server side of the raft port: the raft service, which admits a
//! peer's call (secret, addressee, link) and hands raft's RPCs to
//! openraft; and the peer service, node-to-node control with typed
//! messages: forwarded batches and beats, status, faults, take-over and
//! pings.

use std::fmt;
use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::service::Routes;
use tonic::Status;
use understudy_proto::peer;
use understudy_proto::peer::peer_server::{Peer as PeerRpc, PeerServer};
use understudy_proto::raft::raft_server::{Raft as RaftRpc, RaftServer};
use understudy_proto::raft::{RaftReply, RaftRequest};

use super::super::{codec, Batch, NodeId, TypeConfig};
use super::{
    Admin, AdminReply, AdminRequest, Beats, ClusterSecret, Contacts, Joins, Network,
    MAX_MESSAGE_BYTES, SECRET_METADATA,
};
use crate::faults::LinkFaults;

/// The raft gRPC service of one node: hands peers' raft RPCs (append,
/// vote, snapshot chunks) to its raft. Built by [`service`].
pub struct RaftService {
    pub(super) raft: super::super::Raft,
    pub(super) node_id: NodeId,
    pub(super) faults: LinkFaults,
    pub(super) secret: Option<ClusterSecret>,
    pub(super) contacts: Contacts,
}

impl fmt::Debug for RaftService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftService")
            .field("node_id", &self.node_id)
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

/// The raft and peer services of the node whose transport is `network`,
/// ready to add to a tonic `Server` on the raft port. With a secret in the
/// network's options, calls without it are refused as `Unauthenticated`;
/// calls from a peer whose link to this node is cut in the network's
/// faults are refused as `Unavailable` (the out-of-band peer calls
/// excepted). Admitted calls count as contact with their sender.
pub fn service(raft: super::super::Raft, network: &Network) -> Routes {
    let shared = &network.shared;
    let gate = Gate {
        node_id: shared.node_id,
        faults: shared.faults.clone(),
        secret: shared.options.secret.clone(),
        contacts: shared.contacts.clone(),
    };
    let raft_service = RaftServer::new(RaftService {
        raft: raft.clone(),
        node_id: shared.node_id,
        faults: shared.faults.clone(),
        secret: shared.options.secret.clone(),
        contacts: shared.contacts.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let peer_service = PeerServer::new(PeerService {
        raft,
        gate,
        beats: shared.beats.clone(),
        admin: shared.admin.clone(),
        joins: shared.joins.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    Routes::new(raft_service).add_service(peer_service)
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
}

/// What every peer call passes: the secret, the addressee and (unless out
/// of band) the link.
#[derive(Debug)]
struct Gate {
    node_id: NodeId,
    faults: LinkFaults,
    secret: Option<ClusterSecret>,
    contacts: Contacts,
}

impl Gate {
    #[allow(clippy::result_large_err)] // tonic's error type
    fn admit<T>(
        &self,
        request: tonic::Request<T>,
        route: impl Fn(&T) -> Option<peer::Route>,
        through_faults: bool,
    ) -> Result<T, Status> {
        if let Some(secret) = &self.secret {
            if !secret.is_in(request.metadata()) {
                return Err(Status::unauthenticated(format!(
                    "missing or wrong {SECRET_METADATA}"
                )));
            }
        }
        let request = request.into_inner();
        let peer::Route { from, to } =
            route(&request).ok_or_else(|| Status::invalid_argument("route: is required"))?;
        if to != self.node_id {
            return Err(Status::failed_precondition(format!(
                "this is node {}, not node {to}",
                self.node_id
            )));
        }
        if through_faults {
            self.faults
                .admits(from, self.node_id)
                .map_err(|e| Status::unavailable(e.to_string()))?;
            self.contacts.heard(from);
        }
        Ok(request)
    }
}

/// Node-to-node control: forwarded batches and beats, status, faults,
/// take-over and pings.
struct PeerService {
    raft: super::super::Raft,
    gate: Gate,
    beats: Beats,
    admin: Admin,
    joins: Joins,
}

impl fmt::Debug for PeerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerService")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl PeerService {
    /// Hands `request` to the node's admin handler.
    #[allow(clippy::result_large_err)] // tonic's error type
    fn ask(&self, request: AdminRequest) -> Result<AdminReply, Status> {
        let handler =
            self.admin.0.get().ok_or_else(|| {
                Status::unavailable("this node is not serving admin requests yet")
            })?;
        Ok(handler(request))
    }
}

/// An answer the handler should not have given to `request`.
fn unexpected(reply: &AdminReply, request: &str) -> Status {
    Status::internal(format!("{request}: the node answered {reply:?}"))
}

#[tonic::async_trait]
impl PeerRpc for PeerService {
    async fn forward(
        &self,
        request: tonic::Request<peer::ForwardRequest>,
    ) -> Result<tonic::Response<peer::ForwardReply>, Status> {
        use peer::forward_reply::Outcome;
        let request = self.gate.admit(request, |r| r.route, true)?;
        let batch: Batch = decode(&request.batch, "forwarded batch")?;
        if let Some(join) = self.joins.0.get() {
            // Joined into this node's next entry, with other batches.
            let outcome = match join(batch).await {
                Ok(index) => Outcome::CommittedIndex(index),
                Err(reason) => return Err(Status::unavailable(reason)),
            };
            return Ok(tonic::Response::new(peer::ForwardReply {
                outcome: Some(outcome),
            }));
        }
        let outcome = match self.raft.client_write(Arc::new(batch)).await {
            Ok(written) => Outcome::CommittedIndex(written.log_id.index),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                Outcome::NotLeader(peer::NotLeader {
                    leader: to.leader_id,
                })
            }
            Err(RaftError::APIError(e)) => Outcome::Rejected(e.to_string()),
            // This node's raft is stopping or broken: to the sender it is
            // as good as unreachable, and it should retry elsewhere.
            Err(RaftError::Fatal(e)) => return Err(Status::unavailable(e.to_string())),
        };
        Ok(tonic::Response::new(peer::ForwardReply {
            outcome: Some(outcome),
        }))
    }

    async fn beat(
        &self,
        request: tonic::Request<peer::BeatRequest>,
    ) -> Result<tonic::Response<peer::BeatReply>, Status> {
        let request = self.gate.admit(request, |r| r.route, true)?;
        let key = request
            .key()
            .map_err(|e| Status::invalid_argument(format!("beat: {e}")))?;
        let handler = self
            .beats
            .0
            .get()
            .ok_or_else(|| Status::unavailable("this node is not serving beats yet"))?;
        let outcome = peer::BeatOutcome::from(handler(&key));
        Ok(tonic::Response::new(peer::BeatReply {
            outcome: outcome.into(),
        }))
    }

    async fn status(
        &self,
        request: tonic::Request<peer::StatusRequest>,
    ) -> Result<tonic::Response<peer::StatusReply>, Status> {
        self.gate.admit(request, |r| r.route, false)?;
        match self.ask(AdminRequest::Status)? {
            AdminReply::Status(status) => Ok(tonic::Response::new(peer::StatusReply {
                status: Some(peer::NodeStatus::from(&*status)),
            })),
            other => Err(unexpected(&other, "status")),
        }
    }

    async fn set_faults(
        &self,
        request: tonic::Request<peer::SetFaultsRequest>,
    ) -> Result<tonic::Response<peer::SetFaultsReply>, Status> {
        use peer::set_faults_reply::Outcome;
        let request = self.gate.admit(request, |r| r.route, false)?;
        let state = request
            .faults
            .ok_or_else(|| Status::invalid_argument("faults: is required"))?;
        let outcome = match self.ask(AdminRequest::SetFaults(state.into()))? {
            AdminReply::Faults(now) => Outcome::Faults(peer::FaultState::from(&now)),
            AdminReply::Refused(why) => Outcome::Refused(why),
            other => return Err(unexpected(&other, "set faults")),
        };
        Ok(tonic::Response::new(peer::SetFaultsReply {
            outcome: Some(outcome),
        }))
    }

    async fn take_over(
        &self,
        request: tonic::Request<peer::TakeOverRequest>,
    ) -> Result<tonic::Response<peer::TakeOverReply>, Status> {
        self.gate.admit(request, |r| r.route, false)?;
        let refused = match self.ask(AdminRequest::TakeOver)? {
            AdminReply::TakingOver => String::new(),
            AdminReply::Refused(why) => why,
            other => return Err(unexpected(&other, "take over")),
        };
        Ok(tonic::Response::new(peer::TakeOverReply { refused }))
    }

    async fn ping(
        &self,
        request: tonic::Request<peer::PingRequest>,
    ) -> Result<tonic::Response<peer::PingReply>, Status> {
        self.gate.admit(request, |r| r.route, true)?;
        Ok(tonic::Response::new(peer::PingReply {}))
    }

    async fn clients(
        &self,
        request: tonic::Request<peer::ClientsRequest>,
    ) -> Result<tonic::Response<peer::ClientsReply>, Status> {
        let request = self.gate.admit(request, |r| r.route, false)?;
        let query = super::ClientsQuery {
            namespace: request.namespace,
            group: request.group,
            name: request.name,
            config: request.config,
        };
        match self.ask(AdminRequest::Clients(query))? {
            AdminReply::Clients(clients) => Ok(tonic::Response::new(peer::ClientsReply {
                clients: clients.iter().map(Into::into).collect(),
            })),
            AdminReply::Refused(why) => Err(Status::invalid_argument(why)),
            other => Err(unexpected(&other, "clients")),
        }
    }
}
