//! The liveness sweeper: sleeps until the next liveness or empty-service
//! deadline (never a periodic scan), then proposes the transitions due.
//! It wakes early when a change or a beat moves the deadlines.

use tokio_util::sync::CancellationToken;
use understudy_core::Op;

use crate::node::{Node, ProposeError};

pub(crate) async fn run(node: Node, cancel: CancellationToken) {
    loop {
        // Only the leader proposes transitions (beats reaching other
        // nodes are not yet forwarded to it; see DESIGN "Liveness").
        if !node.leads() {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = node.deadlines_moved().notified() => {}
                () = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
            continue;
        }
        let now = node.now();
        let transitions = node.state().liveness().due(now);
        for transition in transitions {
            propose(&node, transition.into_op()).await;
        }
        let purge_at = node.registry().next_purge_deadline();
        if purge_at.is_some_and(|at| at <= now) {
            propose(&node, Op::PurgeEmptyServices).await;
        }
        let next_liveness = node.state().liveness().next_deadline();
        let purge_at = node.registry().next_purge_deadline();
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
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
