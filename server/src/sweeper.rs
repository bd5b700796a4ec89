//! The liveness sweeper: sleeps until the next liveness or empty-service
//! deadline (never a scan of everything), then proposes the transitions
//! due. It wakes early when a change moves the deadlines, and once a
//! second to follow changes of the beat ring.
//!
//! Every node times the beat-driven instances it is responsible for (see
//! [`Node::beat_ring`]); when the ring changes, the instances that come to
//! this node start a fresh grace period. Purging empty services is the
//! leader's alone.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use understudy_core::{responsible, Op};

use crate::node::{Node, ProposeError};

/// How often the ring is looked at while nothing else wakes the sweeper.
const RING_CHECK: Duration = Duration::from_secs(1);

pub(crate) async fn run(node: Node, cancel: CancellationToken) {
    let me = node.config().node_id;
    let mut ring = node.beat_ring();
    loop {
        let now = node.now();
        let current = node.beat_ring();
        if current != ring {
            tracing::info!(from = ?ring, to = ?current, "the beat ring changed");
            node.state().liveness().take_over(now, |owner| {
                responsible(&ring, owner) != Some(me) && responsible(&current, owner) == Some(me)
            });
            ring = current;
        }
        let transitions = node
            .state()
            .liveness()
            .due_for(now, |owner| responsible(&ring, owner) == Some(me));
        for transition in transitions {
            propose(&node, transition.into_op()).await;
        }
        let leads = node.leads();
        let purge_at = node.registry().next_purge_deadline();
        if leads && purge_at.is_some_and(|at| at <= now) {
            propose(&node, Op::PurgeEmptyServices).await;
        }
        let next_liveness = node.state().liveness().next_deadline();
        let purge_at = node.registry().next_purge_deadline().filter(|_| leads);
        let wake = next_liveness.into_iter().chain(purge_at).min();
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(node.clock().instant_at(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel.cancelled() => break,
            () = node.deadlines_moved().notified() => {}
            () = sleep => {}
            () = tokio::time::sleep(RING_CHECK) => {}
        }
    }
}

async fn propose(node: &Node, op: Op) {
    match node.propose(op).await {
        // A rejection means the transition went stale (the instance left
        // or moved); at shutdown the sweeper's own cancellation follows.
        Ok(_) | Err(ProposeError::Rejected(_) | ProposeError::ShuttingDown) => {}
        Err(e @ (ProposeError::Busy | ProposeError::Unavailable { .. })) => {
            // The transition stays due and is retried; back off a little so
            // an overloaded writer is not hammered.
            tracing::warn!(error = %e, "liveness transition not applied");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
