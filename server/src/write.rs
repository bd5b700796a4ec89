//! The write seam: every command goes through [`Propose`], which answers
//! once it is applied on this node (read-your-writes). `raft/writer.rs`
//! implements it for a replicated node; the node and its adapters only
//! see this trait.

use std::future::Future;
use std::pin::Pin;

use thiserror::Error;
use understudy_core::{Change, Command};

/// Why a proposed command was not applied.
#[derive(Debug, Clone, Error)]
pub enum ProposeError {
    /// The registry refused it; nothing changed.
    #[error(transparent)]
    Rejected(#[from] understudy_core::Error),
    /// The write queue stayed full for the whole write timeout.
    #[error("the server is too busy to take this write now; retry")]
    Busy,
    /// The node is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The cluster cannot take the write now: no leader, or the leader is
    /// unreachable from this node; `reason` names the leader if known.
    #[error("the cluster cannot take this write now: {reason}")]
    Unavailable {
        /// What is wrong, naming the leader when one is known.
        reason: String,
    },
}

/// What an applied command did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The changes, with their revisions.
    pub changes: Vec<Change>,
}

/// A boxed, sendable future (the seam must be object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The write seam: takes a command, returns its outcome once it is applied
/// to this node's view (replicated first, on a node with peers).
pub trait Propose: Send + Sync + 'static {
    /// Proposes a command.
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, ProposeError>>;

    /// Proposes `commands` as one log entry: all of them reach the log
    /// together or none does, and they are applied in order, each
    /// succeeding or refused on its own. Answers one result per command.
    fn propose_all(
        &self,
        commands: Vec<Command>,
    ) -> BoxFuture<'_, Result<Vec<Result<Applied, understudy_core::Error>>, ProposeError>>;
}
