//! Ephemeral ownership across nodes. Instances a
//! client registered over a connection belong to the node holding that
//! connection. Two things can leave such instances without a live owner,
//! and this task clears both after the owner grace period:
//!
//! - a member the leader stops hearing from: the leader proposes
//!   [`Op::NodeLost`], which removes what the member's connections still
//!   own (clients that reconnected elsewhere in time have re-registered,
//!   so their instances moved in place and stay), and [`Op::NodeBack`]
//!   once it answers again;
//! - connections this node no longer holds (a removal that could not be
//!   written, or an earlier run of this node): it removes them itself.
//!
//! The clock starts when a node becomes leader, so a new leader gives
//! every member a full grace period.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use understudy_core::{Op, Owner, RemovalCause};

use crate::node::Node;

/// How often ownership is checked: often enough that the grace period is
/// kept to within a few percent.
fn period(grace: Duration) -> Duration {
    (grace / 20).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

pub(crate) async fn run(node: Node, cancel: CancellationToken) {
    let grace = node.config().cluster.owner_grace;
    let mut tick = tokio::time::interval(period(grace));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut orphans: HashMap<Owner, Instant> = HashMap::new();
    let mut leading_since: Option<Instant> = None;
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        clear_orphans(&node, &mut orphans, grace).await;
        if node.leads() {
            let since = *leading_since.get_or_insert_with(Instant::now);
            watch_members(&node, since, grace).await;
        } else {
            leading_since = None;
        }
    }
}

/// Removes owners on this node that no connection here holds, once they
/// have been orphaned for the grace period.
async fn clear_orphans(node: &Node, orphans: &mut HashMap<Owner, Instant>, grace: Duration) {
    let me = node.config().node_id;
    let now = Instant::now();
    let current: Vec<Owner> = {
        let registry = node.registry();
        registry
            .owners_on(me)
            .filter(|owner| match owner {
                Owner::Connection { id, .. } => !node.holds(id),
                _ => false,
            })
            .cloned()
            .collect()
    };
    orphans.retain(|owner, _| current.contains(owner));
    for owner in current {
        let since = *orphans.entry(owner.clone()).or_insert(now);
        if now.saturating_duration_since(since) < grace {
            continue;
        }
        tracing::info!(%owner, "removing the instances of a connection this node no longer holds");
        let op = Op::RemoveOwner {
            owner: owner.clone(),
            cause: RemovalCause::OwnerLost,
        };
        match node.propose(op).await {
            Ok(_) => {
                orphans.remove(&owner);
            }
            // Retried at the next tick.
            Err(e) => tracing::debug!(%owner, error = %e, "orphaned owner not removed yet"),
        }
    }
}

/// On the leader: marks members silent for the grace period lost (and
/// nodes that left the cluster with owners behind), and lost members that
/// answer again back.
async fn watch_members(node: &Node, leading_since: Instant, grace: Duration) {
    let (raft, contacts) = (node.raft(), node.contacts());
    let me = node.config().node_id;
    let members: BTreeSet<u64> = raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .nodes()
        .map(|(id, _)| *id)
        .collect();
    let (owner_nodes, lost) = {
        let registry = node.registry();
        (registry.owner_nodes(), registry.lost_nodes().clone())
    };
    // Answering again within a heartbeat or two is "back".
    let recent = node.config().cluster.election_timeout;
    let now = Instant::now();
    let candidates: BTreeSet<u64> = members
        .iter()
        .chain(&owner_nodes)
        .chain(&lost)
        .copied()
        .filter(|id| *id != me)
        .collect();
    for id in candidates {
        let is_member = members.contains(&id);
        let heard = if is_member { contacts.last(id) } else { None };
        let silent_since = heard.map_or(leading_since, |h| h.max(leading_since));
        let silent = now.saturating_duration_since(silent_since);
        let op = if lost.contains(&id) {
            let answers = heard.is_some_and(|h| now.saturating_duration_since(h) < recent);
            // A node that left the cluster and owns nothing is forgotten.
            let gone = !is_member && !owner_nodes.contains(&id);
            if answers || gone {
                Op::NodeBack { node: id }
            } else if owner_nodes.contains(&id) {
                // Registered while marked lost (a write forwarded before
                // the mark): cleared by marking again.
                Op::NodeLost { node: id }
            } else {
                continue;
            }
        } else if silent >= grace && (is_member || owner_nodes.contains(&id)) {
            tracing::warn!(
                node = id,
                silent_ms = silent.as_millis() as u64,
                "member lost: removing what its connections own"
            );
            Op::NodeLost { node: id }
        } else {
            continue;
        };
        if let Err(e) = node.propose(op).await {
            tracing::debug!(node = id, error = %e, "member ownership change not applied yet");
        }
    }
}
