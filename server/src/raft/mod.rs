//! Replication: the write seam as raft entries (openraft 0.9). A batch of
//! commands is one log entry; the state machine applies committed entries
//! to the node's [`State`](crate::node::State) through the core, so every
//! node computes the same results from the same log. Results never travel
//! over the wire: a proposer (the leader's own writer, or a follower that
//! forwarded the batch) waits until its own state machine applies the
//! entry and takes its results there, which is also what makes a write
//! read-your-writes on the node that answered it.
//!
//! Entries and snapshots are encoded with postcard behind a format version
//! byte ([`codec`]). Raft traffic has its own gRPC service on its own port
//! ([`network`]), never the Nacos dispatch.

pub mod codec;
pub mod network;
pub mod store;
pub mod writer;

use std::collections::BTreeMap;
use std::io::Cursor;

use serde::{Deserialize, Serialize};
use understudy_core::Command;

/// A node's id within the cluster.
pub type NodeId = u64;

/// What the cluster knows of a member: where its raft service listens and
/// which datacenter it is in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// `host:port` of its raft service.
    pub raft_addr: String,
    /// Its datacenter label.
    pub dc: String,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.raft_addr, self.dc)
    }
}

/// One log entry's payload: commands proposed together, with who proposed
/// them so that node (and only it) hands the results back to its callers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// The node whose callers wait for the results.
    pub origin: NodeId,
    /// The origin's proposal number.
    pub seq: u64,
    /// The commands, applied in order, each succeeding or failing alone.
    pub commands: Vec<Command>,
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
        D = Batch,
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
}

/// The raft handle.
pub type Raft = openraft::Raft<TypeConfig>;

/// Static membership: every member by id.
pub type Members = BTreeMap<NodeId, Member>;
