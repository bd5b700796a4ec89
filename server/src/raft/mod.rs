//! Replication: the write seam as raft entries (openraft 0.9). A batch of
//! commands is one log entry; the state machine applies committed entries
//! to the node's [`State`](crate::state::State) through the core, so every
//! node computes the same results from the same log. Results never travel
//! over the wire: a proposer (the leader's own writer, or a follower that
//! forwarded the batch) waits until its own state machine applies the
//! entry and takes its results there, which is also what makes a write
//! read-your-writes on the node that answered it.
//!
//! Entries and snapshots are encoded with postcard behind a format version
//! byte ([`codec`]). Raft traffic has its own gRPC service on its own port
//! ([`network`]), never the Nacos dispatch. With a data dir the log, vote,
//! commit point and latest snapshot are also kept in a redb file
//! ([`disk`]); without one, in memory ([`store`]).

pub mod codec;
pub mod disk;
mod flusher;
pub mod gate;
pub mod network;
pub mod relay;
pub mod segments;
mod snapshot;
pub mod store;
pub mod ticks;
pub mod writer;

use std::collections::BTreeMap;
use std::io::Cursor;

use serde::{Deserialize, Serialize};
use understudy_core::Command;

pub use crate::member::{Member, NodeId};

/// One log entry's payload: commands proposed together, with who proposed
/// them so that node (and only it) hands the results back to its callers.
/// The leader joins the batches its followers forward into the entry it
/// proposes next: the first commands are its own (`origin`, `seq`), each
/// [`Joined`] part names the proposer of the commands after them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Batch {
    /// The node whose callers wait for the results of the first commands.
    pub origin: NodeId,
    /// The origin's proposal number.
    pub seq: u64,
    /// The commands, applied in order, each succeeding or failing alone.
    pub commands: Vec<Command>,
    /// The proposer's wall clock when it proposed them, ms since the
    /// epoch: what view lag and register-to-visible delays are measured
    /// from (see [`crate::view`]); for joined batches, the earliest.
    pub stamp_ms: u64,
    /// Batches of other proposers joined into this entry, in the order of
    /// their commands, which end the list (format 7; empty before).
    pub joined: Vec<Joined>,
}

/// A proposer's batch joined into another's entry: the next `count`
/// commands are its.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Joined {
    /// The node whose callers wait for these results.
    pub origin: NodeId,
    /// Its proposal number.
    pub seq: u64,
    /// How many commands are its.
    pub count: u32,
}

impl Batch {
    /// The leader's tick: no commands, only its time.
    pub fn tick(leader: NodeId, stamp_ms: u64) -> Self {
        Self {
            origin: leader,
            seq: 0,
            commands: Vec::new(),
            stamp_ms,
            joined: Vec::new(),
        }
    }

    /// Whether this is a tick (no one waits for its results).
    pub fn is_tick(&self) -> bool {
        self.commands.is_empty()
    }

    /// Every proposer's part, in order: its origin, its sequence and how
    /// many commands are its (the first part may hold none).
    pub fn parts(&self) -> impl Iterator<Item = Joined> + '_ {
        let joined: usize = self.joined.iter().map(|j| j.count as usize).sum();
        let first = Joined {
            origin: self.origin,
            seq: self.seq,
            count: u32::try_from(self.commands.len().saturating_sub(joined)).unwrap_or(u32::MAX),
        };
        std::iter::once(first).chain(self.joined.iter().copied())
    }
}

impl<'de> Deserialize<'de> for Batch {
    /// Reads format 7, or a batch of an older format (no joined parts),
    /// as [`codec::decode`] says which it reads.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Current {
            origin: NodeId,
            seq: u64,
            commands: Vec<Command>,
            stamp_ms: u64,
            joined: Vec<Joined>,
        }
        #[derive(Deserialize)]
        struct Before7 {
            origin: NodeId,
            seq: u64,
            commands: Vec<Command>,
            stamp_ms: u64,
        }
        if codec::reading_before(7) {
            let b = Before7::deserialize(deserializer)?;
            return Ok(Self {
                origin: b.origin,
                seq: b.seq,
                commands: b.commands,
                stamp_ms: b.stamp_ms,
                joined: Vec::new(),
            });
        }
        let c = Current::deserialize(deserializer)?;
        Ok(Self {
            origin: c.origin,
            seq: c.seq,
            commands: c.commands,
            stamp_ms: c.stamp_ms,
            joined: c.joined,
        })
    }
}

/// What the state machine answers for an entry: only how many commands it
/// applied (the results themselves stay on each node).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchApplied {
    /// Commands applied.
    pub commands: usize,
}

openraft::declare_raft_types!(
    /// understudy's raft types.
    pub TypeConfig:
        // Shared, so the log, replication and a fallback forward never
        // copy the commands.
        D = std::sync::Arc<Batch>,
        R = BatchApplied,
        NodeId = NodeId,
        Node = Member,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Why a replicated node did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The raft settings are inconsistent.
    #[error("invalid raft settings: {0}")]
    Config(#[from] openraft::ConfigError),
    /// Raft could not start on its storage.
    #[error("raft did not start: {0}")]
    Raft(#[from] openraft::error::Fatal<NodeId>),
    /// The data dir's raft store was refused or cannot be read.
    #[error("{0}")]
    Store(#[from] disk::DiskError),
    /// The snapshot in the data dir cannot be decoded.
    #[error("the snapshot in {path} cannot be decoded (left as it is): {source}")]
    Snapshot {
        /// The store file.
        path: std::path::PathBuf,
        /// Why.
        source: codec::CodecError,
    },
    /// A single node could not form its one-member cluster.
    #[error("the single-node cluster did not form: {0}")]
    Form(String),
}

/// Whether a new member votes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Voting {
    /// Receives the log, never votes.
    Learner,
    /// Votes, after catching up as a learner.
    Voter,
}

/// Why a membership change was not made.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// Only the leader changes membership.
    #[error("this node is not the leader{}", leader_hint(.leader, .raft_addr))]
    NotLeader {
        /// The leader, if known.
        leader: Option<NodeId>,
        /// Its raft address, if known.
        raft_addr: Option<String>,
    },
    /// Raft refused the change (another under way, a bad member).
    #[error("membership change refused: {0}")]
    Refused(String),
}

fn leader_hint(leader: &Option<NodeId>, addr: &Option<String>) -> String {
    match (leader, addr) {
        (Some(id), Some(addr)) => format!("; the leader is node {id} (raft {addr})"),
        (Some(id), None) => format!("; the leader is node {id}"),
        _ => "; no leader is known".into(),
    }
}

impl MembershipError {
    /// `NotLeader` unless `raft` leads now. Checked before asking openraft:
    /// a follower that has not yet seen the initial membership committed
    /// answers a change with "another change is under way" rather than
    /// with where the leader is.
    pub(crate) fn unless_leading(raft: &Raft) -> Result<(), Self> {
        let metrics = raft.metrics().borrow().clone();
        if metrics.current_leader == Some(metrics.id) {
            return Ok(());
        }
        let raft_addr = metrics.current_leader.and_then(|leader| {
            metrics
                .membership_config
                .membership()
                .get_node(&leader)
                .map(|m| m.raft_addr.clone())
        });
        Err(MembershipError::NotLeader {
            leader: metrics.current_leader,
            raft_addr,
        })
    }

    pub(crate) fn from_raft<E>(e: openraft::error::RaftError<NodeId, E>) -> Self
    where
        E: std::error::Error + openraft::TryAsRef<openraft::error::ForwardToLeader<NodeId, Member>>,
    {
        if let Some(to) = e.forward_to_leader() {
            return MembershipError::NotLeader {
                leader: to.leader_id,
                raft_addr: to.leader_node.as_ref().map(|m| m.raft_addr.clone()),
            };
        }
        MembershipError::Refused(e.to_string())
    }
}

/// Log entries applied between two snapshots. Every entry in the log
/// holds its batch's commands (each registration's strings and metadata)
/// until a snapshot lets it be purged: at openraft's default (5,000, then
/// 1,000 kept) a burst of 100k registrations stayed in memory whole until
/// the next snapshot, and the holes it left among the instances' own
/// allocations cost 175 B of resident memory per instance after it was
/// freed (727 → 552 B per instance measured at 100k, single node). A
/// snapshot in memory is one pointer per service; on disk it is the
/// registry written out, once per this many entries.
const SNAPSHOT_EVERY: u64 = 1_000;

/// Entries a cluster keeps behind its snapshot, so a follower a little
/// behind catches up from the log rather than from a whole snapshot. A
/// single node has no one to catch up: it keeps none.
const KEPT_FOR_FOLLOWERS: u64 = 1_000;

/// Raft's settings from the cluster config.
pub fn raft_config(cluster: &crate::config::ClusterConfig) -> openraft::Config {
    openraft::Config {
        cluster_name: "understudy".into(),
        heartbeat_interval: crate::clock::millis(cluster.heartbeat),
        election_timeout_min: crate::clock::millis(cluster.election_timeout),
        election_timeout_max: crate::clock::millis(cluster.election_timeout * 2),
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY),
        max_in_snapshot_log_to_keep: if cluster.peers.is_empty() {
            0
        } else {
            KEPT_FOR_FOLLOWERS
        },
        ..openraft::Config::default()
    }
}

/// The raft handle.
pub type Raft = openraft::Raft<TypeConfig>;

/// Whether node `me` leads, as far as its raft knows.
pub(crate) fn leads(raft: &Raft, me: NodeId) -> bool {
    raft.metrics().borrow().current_leader == Some(me)
}

/// Static membership: every member by id.
pub type Members = BTreeMap<NodeId, Member>;

/// A member as the cluster status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Node id.
    pub id: NodeId,
    /// Datacenter label.
    pub dc: String,
    /// Raft address.
    pub raft_addr: String,
    /// Whether it votes (else a learner).
    pub voter: bool,
    /// The last log index the leader knows it holds (leader only).
    pub matched: Option<u64>,
}

/// One node's own state, as its peers and the admin API see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// Its raft view of the cluster.
    #[serde(flatten)]
    pub cluster: ClusterStatus,
    /// Now minus the newest leader stamp in its read view, ms.
    pub view_lag_ms: Option<u64>,
    /// Register-to-visible delays seen there.
    pub register_to_visible: crate::view::DelaySummary,
}

/// A member's status as gathered by another node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    /// Node id.
    pub id: NodeId,
    /// Datacenter label.
    pub dc: String,
    /// Its status, if it answered.
    pub status: Option<NodeStatus>,
    /// Why it did not, if it did not.
    pub error: Option<String>,
}

/// A node's raft role; in JSON its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// It leads: it takes writes and replicates them.
    Leader,
    /// It follows a leader.
    Follower,
    /// It is running for leader.
    Candidate,
    /// It receives the log but does not vote.
    Learner,
    /// Its raft has stopped.
    Shutdown,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 5] = [
        Role::Leader,
        Role::Follower,
        Role::Candidate,
        Role::Learner,
        Role::Shutdown,
    ];

    /// Its lowercase name, as JSON and the metrics label say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Shutdown => "shutdown",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<openraft::ServerState> for Role {
    fn from(state: openraft::ServerState) -> Self {
        match state {
            openraft::ServerState::Leader => Role::Leader,
            openraft::ServerState::Follower => Role::Follower,
            openraft::ServerState::Candidate => Role::Candidate,
            openraft::ServerState::Learner => Role::Learner,
            openraft::ServerState::Shutdown => Role::Shutdown,
        }
    }
}

/// One node's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// This node's id.
    pub node_id: NodeId,
    /// This node's datacenter.
    pub dc: String,
    /// Its raft role.
    pub role: Role,
    /// The current term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The last log index applied here.
    pub last_applied: u64,
    /// The last log index held here.
    pub last_log: u64,
    /// The registry revision applied here.
    pub revision: u64,
    /// Every member.
    pub members: Vec<MemberStatus>,
}

impl ClusterStatus {
    /// The status from raft's metrics.
    pub fn of(raft: &Raft, dc: &str, revision: u64) -> Self {
        let m = raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, member)| MemberStatus {
                id: *id,
                dc: member.dc.clone(),
                raft_addr: member.raft_addr.clone(),
                voter: voters.contains(id),
                matched: m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(id).copied().flatten())
                    .map(|l| l.index)
                    .or_else(|| (*id == m.id).then(|| m.last_log_index.unwrap_or(0))),
            })
            .collect();
        Self {
            node_id: m.id,
            dc: dc.to_owned(),
            role: m.state.into(),
            term: m.current_term,
            leader: m.current_leader,
            last_applied: m.last_applied.map_or(0, |l| l.index),
            last_log: m.last_log_index.unwrap_or(0),
            revision,
            members,
        }
    }

    /// The highest log index known committed here: on the leader the
    /// index a majority of voters holds, elsewhere the last applied one
    /// (a follower applies only what it knows committed).
    pub fn committed(&self) -> u64 {
        if self.role != Role::Leader {
            return self.last_applied;
        }
        let mut matched: Vec<u64> = self
            .members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.matched.unwrap_or(0))
            .collect();
        matched.sort_unstable_by(|a, b| b.cmp(a));
        matched
            .get(matched.len() / 2)
            .copied()
            .unwrap_or(self.last_applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_node_keeps_no_log_behind_its_snapshots_and_a_cluster_keeps_some() {
        let mut cluster = crate::config::ValidConfig::default().cluster;
        let single = raft_config(&cluster);
        assert_eq!(single.max_in_snapshot_log_to_keep, 0);
        assert!(matches!(
            single.snapshot_policy,
            openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY)
        ));
        cluster.peers.insert(
            2,
            Member {
                raft_addr: "127.0.0.1:7849".to_owned(),
                dc: "dc1".to_owned(),
            },
        );
        let three = raft_config(&cluster);
        assert_eq!(three.max_in_snapshot_log_to_keep, KEPT_FOR_FOLLOWERS);
        three.validate().expect("a valid raft config");
    }
}
