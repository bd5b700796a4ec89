//! When this node last heard from each peer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::NodeId;

/// When this node last heard from each peer: an answer to a call it made,
/// or a call a peer made to it. The leader judges from it that a member is
/// gone; a follower, that it has lost its leader. Clones share the record.
#[derive(Debug, Clone, Default)]
pub struct Contacts(Arc<Mutex<HashMap<NodeId, tokio::time::Instant>>>);

impl Contacts {
    pub(super) fn heard(&self, peer: NodeId) {
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
