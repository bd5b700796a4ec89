//! The tasks that keep the read view and the fault model current from
//! raft: the leader's ticks (stamped empty entries, so followers measure
//! their view lag even when nothing is written) and the members' DCs.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::faults::LinkFaults;

/// The leader's tick: an empty entry stamped with the leader's time every
/// `interval`, appended without waiting for it to be applied. A leader that
/// has not heard from a majority within two election timeouts skips its
/// ticks, so a deposed leader cut off from the others does not pile them
/// up in its log; so does a node alone in its cluster, whose view is
/// never behind (and whose data dir would take ten writes a second for
/// nothing).
pub async fn run_ticks(
    raft: super::Raft,
    node_id: super::NodeId,
    clock: crate::clock::Clock,
    interval: Duration,
    quorum_window: Duration,
    tasks: tokio_util::task::TaskTracker,
    cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let fresh = {
            let m = raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            m.current_leader == Some(node_id)
                && m.state == openraft::ServerState::Leader
                && membership.nodes().count() > 1
                && m.millis_since_quorum_ack
                    .is_some_and(|ms| ms <= quorum_window.as_millis() as u64)
        };
        if !fresh {
            continue;
        }
        let tick = super::Batch::tick(node_id, clock.wall_ms());
        match raft.client_write_ff(Arc::new(tick)).await {
            // Nobody needs the answer, but dropping its receiver early makes
            // openraft warn on every tick.
            Ok(answer) => drop(tasks.spawn(answer)),
            Err(e) => {
                tracing::debug!(error = %e, "tick not appended");
                return;
            }
        }
    }
}

/// Keeps the fault model told which DC each member is in, as membership
/// changes, so DC-level link faults act on new members too.
pub async fn track_dcs(raft: super::Raft, faults: LinkFaults, cancel: CancellationToken) {
    let mut metrics = raft.metrics();
    let mut seen = None;
    loop {
        {
            // Metrics change on every apply; membership seldom.
            let m = metrics.borrow_and_update();
            let membership = m.membership_config.log_id();
            if seen != Some(*membership) {
                seen = Some(*membership);
                for (id, member) in m.membership_config.membership().nodes() {
                    if !member.dc.is_empty() {
                        faults.set_dc(*id, &member.dc);
                    }
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = metrics.changed() => if changed.is_err() { return },
        }
    }
}
