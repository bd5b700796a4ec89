//! The election gate: a node that cannot reach a majority of the voters
//! does not start elections. This is what raft's pre-vote gives (a node
//! campaigns only if it could win), which openraft 0.9 does not have.
//!
//! Without it, a node cut off from the majority times out again and again
//! and raises its term each time; when the partition heals, its answers
//! carry that higher term, the working leader steps down, and the cluster
//! stalls through a needless election (seconds over a slow link). With
//! it, the cut-off node stays a follower at the old term and simply
//! catches up.
//!
//! Reachability is measured, not guessed: every node pings every other
//! voter each heartbeat period over the raft transport, through the link
//! faults, and counts a voter reachable if it answered (or called) within
//! twice the election timeout. Disabling elections is always safe; it can
//! only delay one, and only on a node that could not have won it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::network::{AdminReply, Network};
use super::{NodeId, Raft};

/// Runs the gate of the node whose raft and transport are given until
/// `cancel` fires.
pub async fn run(
    raft: Raft,
    network: Network,
    heartbeat: Duration,
    election_timeout: Duration,
    tasks: TaskTracker,
    cancel: CancellationToken,
) {
    let me = network.node_id();
    let fresh = election_timeout * 2;
    let started = tokio::time::Instant::now();
    let mut enabled = true;
    let mut ticker = tokio::time::interval(heartbeat);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let voters: Vec<(NodeId, super::Member)> = {
            let m = raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            let ids: Vec<NodeId> = membership.voter_ids().collect();
            membership
                .nodes()
                .filter(|(id, _)| ids.contains(id))
                .map(|(id, member)| (*id, member.clone()))
                .collect()
        };
        for (id, member) in voters.iter().filter(|(id, _)| *id != me) {
            let network = network.clone();
            let (id, member) = (*id, member.clone());
            // An answer marks the peer heard from (the transport's contacts);
            // each ping ends within its timeout.
            tasks.spawn(async move {
                let answer = network.ping(id, &member, election_timeout).await;
                if let Ok(other) = answer {
                    if !matches!(other, AdminReply::Pong) {
                        tracing::debug!(peer = id, ?other, "unexpected answer to a ping");
                    }
                }
            });
        }
        if started.elapsed() < fresh || voters.is_empty() {
            continue;
        }
        let now = tokio::time::Instant::now();
        let reachable = 1 + voters
            .iter()
            .filter(|(id, _)| *id != me)
            .filter(|(id, _)| {
                network
                    .contacts()
                    .last(*id)
                    .is_some_and(|heard| now.saturating_duration_since(heard) < fresh)
            })
            .count();
        let majority = reachable * 2 > voters.len();
        if majority != enabled {
            enabled = majority;
            raft.runtime_config().elect(enabled);
            tracing::info!(
                reachable,
                voters = voters.len(),
                "{}",
                if enabled {
                    "a majority is reachable again: elections enabled"
                } else {
                    "cut off from the majority: no elections from this node"
                }
            );
        }
    }
}
