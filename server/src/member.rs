//! Who is in a cluster: a node's id and what the cluster knows of a
//! member. A leaf: configuration, the fault model and raft all name these.

use serde::{Deserialize, Serialize};

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
