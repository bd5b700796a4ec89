//! Kills on request: a node crashed through the chaos admin API
//! (`POST /understudy/v1/chaos/kill?node=N`). Only the process that runs
//! the nodes can crash one, so the request goes to it: `understudy sim`
//! takes the requests of its shared model ([`LinkFaults::take_kills`]) and
//! kills the node as [`crate::sim::Sim::kill`] does. A node served alone
//! has no one to ask, and the request is refused.

use tokio::sync::{mpsc, oneshot};

use super::LinkFaults;
use crate::member::NodeId;

/// One request to crash a node, with its answer: whether a running node
/// of that id was killed.
#[derive(Debug)]
pub struct KillRequest {
    /// The node to crash.
    pub node: NodeId,
    /// Told `true` once the node's ports are closed, `false` when no node
    /// of that id runs.
    pub done: oneshot::Sender<bool>,
}

/// Why a kill was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KillRefused {
    /// Nothing here runs the nodes (a node served alone).
    #[error("only `understudy sim` kills its nodes on request; stop this node's process instead")]
    NoRunner,
    /// The runner has no running node of that id.
    #[error("no running node {0}")]
    NoSuchNode(NodeId),
}

impl LinkFaults {
    /// Makes the caller the runner of the nodes that share this model:
    /// kill requests arrive on the returned receiver from now on.
    pub fn take_kills(&self) -> mpsc::UnboundedReceiver<KillRequest> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.kills.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        rx
    }

    /// Asks the runner to crash node `node`, and waits for it.
    pub async fn kill(&self, node: NodeId) -> Result<(), KillRefused> {
        let runner = self.kills.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let runner = runner.ok_or(KillRefused::NoRunner)?;
        let (done, killed) = oneshot::channel();
        runner
            .send(KillRequest { node, done })
            .map_err(|_| KillRefused::NoRunner)?;
        match killed.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(KillRefused::NoSuchNode(node)),
            Err(_) => Err(KillRefused::NoRunner),
        }
    }
}
