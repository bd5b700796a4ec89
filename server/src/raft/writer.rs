//! The write seam of a replicated node: commands queue as on a single node
//! (removals and health changes first), a batch becomes one raft entry,
//! and each caller is answered once the entry is applied on this node —
//! read-your-writes here, whichever node leads. On a follower the batch is
//! forwarded to the leader; on a node that knows no leader the write is
//! refused as unavailable, naming the leader when one is known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::{Change, Command};

use super::store::{Results, Waiters};
use super::{Batch, Member, NodeId, Raft};
use crate::write::{Applied, BoxFuture, Propose, ProposeError};

/// Most commands gathered into one entry (one job of more stays whole).
const BATCH: usize = 256;
/// Entries proposed and not yet applied at once. openraft 0.9's core
/// waits for each append to be flushed before it takes the next write,
/// so a second entry in flight only splits the waiting commands into more
/// entries (more fsyncs, more applies); with one, every write that
/// arrives while an entry is written, replicated and applied gathers into
/// the next (up to [`BATCH`] commands). Measured on the 2-core machine
/// (`load register`, 32 connections; in memory and durable): 16 in flight
/// gave 13.8k and 3.5k ops/s, 4 gave 15.3k and 8.0k, 2 gave 17.4k and
/// 10.7k, 1 gave 17.3k and 11.4k (and 16.6–18.9k and 13.2–13.7k in a
/// second run).
const IN_FLIGHT: usize = 1;

/// Sends a batch to the leader when this node is not it; answers the log
/// index it was committed at.
pub trait Forward: Send + Sync + 'static {
    /// Forwards `batch` to `leader`.
    fn forward<'a>(
        &'a self,
        leader: NodeId,
        member: &'a Member,
        batch: &'a Batch,
    ) -> BoxFuture<'a, Result<u64, String>>;
}

/// Commands that go into one entry together, and where their results go.
struct Job {
    commands: Vec<Command>,
    reply: oneshot::Sender<Result<Vec<CommandResult>, ProposeError>>,
}

/// What one applied command did, or why the registry refused it.
type CommandResult = Result<Vec<Change>, understudy_core::Error>;

/// The write seam of a replicated node.
pub(crate) struct RaftWriter {
    urgent: mpsc::Sender<Job>,
    normal: mpsc::Sender<Job>,
    timeout: Duration,
}

/// What the proposing task needs.
struct Proposer {
    raft: Raft,
    node_id: NodeId,
    waiters: Waiters,
    forward: Arc<dyn Forward>,
    seq: AtomicU64,
    timeout: Duration,
    /// Batches are stamped with its wall reading.
    clock: crate::clock::Clock,
}

impl RaftWriter {
    pub(crate) fn start(
        raft: Raft,
        waiters: Waiters,
        forward: Arc<dyn Forward>,
        config: &crate::config::ValidConfig,
        clock: crate::clock::Clock,
        tasks: &TaskTracker,
        cancel: CancellationToken,
    ) -> Self {
        let timeout = config.writes.timeout;
        let (urgent, urgent_rx) = mpsc::channel(config.writes.queue);
        let (normal, normal_rx) = mpsc::channel(config.writes.queue);
        let proposer = Arc::new(Proposer {
            raft,
            node_id: config.node_id,
            waiters,
            forward,
            // Unique across restarts: a durable log may still hold this
            // node's batches from before, applied after this start, and
            // their results must not reach a new proposer.
            seq: AtomicU64::new(crate::clock::restart_nonce()),
            timeout,
            clock,
        });
        tasks.spawn(run(proposer, urgent_rx, normal_rx, tasks.clone(), cancel));
        Self {
            urgent,
            normal,
            timeout,
        }
    }
}

impl Propose for RaftWriter {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, ProposeError>> {
        Box::pin(async move {
            let urgent = command.op.is_urgent();
            let mut results = self.enqueue(vec![command], urgent).await?;
            match results.pop() {
                Some(Ok(changes)) => Ok(Applied { changes }),
                Some(Err(e)) => Err(ProposeError::Rejected(e)),
                None => Err(ProposeError::ShuttingDown),
            }
        })
    }

    fn propose_all(
        &self,
        commands: Vec<Command>,
    ) -> BoxFuture<'_, Result<Vec<Result<Applied, understudy_core::Error>>, ProposeError>> {
        Box::pin(async move {
            // An entry without commands is a tick, which nobody waits for.
            if commands.is_empty() {
                return Ok(Vec::new());
            }
            let results = self.enqueue(commands, false).await?;
            Ok(results
                .into_iter()
                .map(|r| r.map(|changes| Applied { changes }))
                .collect())
        })
    }
}

impl RaftWriter {
    /// Queues `commands` as one job (one entry) and waits for their results.
    async fn enqueue(
        &self,
        commands: Vec<Command>,
        urgent: bool,
    ) -> Result<Vec<CommandResult>, ProposeError> {
        {
            let queue = if urgent { &self.urgent } else { &self.normal };
            let (reply, answer) = oneshot::channel();
            match queue
                .send_timeout(Job { commands, reply }, self.timeout)
                .await
            {
                Ok(()) => {}
                Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                    metrics::counter!("understudy_writes_refused_total", "reason" => "busy")
                        .increment(1);
                    return Err(ProposeError::Busy);
                }
                Err(mpsc::error::SendTimeoutError::Closed(_)) => {
                    return Err(ProposeError::ShuttingDown)
                }
            }
            match answer.await {
                Ok(outcome) => outcome,
                Err(_) => Err(ProposeError::ShuttingDown),
            }
        }
    }
}

async fn run(
    proposer: Arc<Proposer>,
    mut urgent: mpsc::Receiver<Job>,
    mut normal: mpsc::Receiver<Job>,
    tasks: TaskTracker,
    cancel: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let mut batch: Vec<Job> = Vec::new();
        tokio::select! {
            biased;
            Some(job) = urgent.recv() => batch.push(job),
            Some(job) = normal.recv() => batch.push(job),
            () = cancel.cancelled() => break,
        }
        // While every slot is taken, more jobs gather into this batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let mut size: usize = batch.iter().map(|job| job.commands.len()).sum();
        while size < BATCH {
            match urgent.try_recv().or_else(|_| normal.try_recv()) {
                Ok(job) => {
                    size += job.commands.len();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        let proposer = proposer.clone();
        tasks.spawn(async move {
            let _slot = slot;
            proposer.propose(batch).await;
        });
    }
    // Shutting down: writes already queued are refused explicitly rather
    // than dropped without an answer.
    urgent.close();
    normal.close();
    while let Ok(job) = urgent.try_recv().or_else(|_| normal.try_recv()) {
        let _ = job.reply.send(Err(ProposeError::ShuttingDown));
    }
}

impl Proposer {
    async fn propose(&self, jobs: Vec<Job>) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut commands = Vec::new();
        let mut replies = Vec::with_capacity(jobs.len());
        for job in jobs {
            replies.push((job.commands.len(), job.reply));
            commands.extend(job.commands);
        }
        let count = commands.len();
        let batch = Arc::new(Batch {
            origin: self.node_id,
            seq,
            commands,
            stamp_ms: self.clock.wall_ms(),
        });
        let applied = self.waiters.register(seq);
        let outcome = match self.submit(&batch).await {
            Ok(()) => match tokio::time::timeout(self.timeout, applied).await {
                Ok(Ok(results)) => Ok(results),
                Ok(Err(_)) => Err(ProposeError::ShuttingDown),
                Err(_) => Err(ProposeError::Unavailable {
                    reason: "the write was committed but not applied on this node within the write timeout".into(),
                }),
            },
            Err(e) => Err(e),
        };
        self.waiters.forget(seq);
        metrics::counter!("understudy_commands_applied_total").increment(count as u64);
        match outcome {
            Ok(results) => {
                let mut results = pad(results);
                for (n, reply) in replies {
                    // The caller may have given up; the write stands.
                    let _ = reply.send(Ok(results.by_ref().take(n).collect()));
                }
            }
            Err(e) => {
                for (_, reply) in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Gets the batch committed: directly when leading, else through the
    /// leader.
    async fn submit(&self, batch: &Arc<Batch>) -> Result<(), ProposeError> {
        // A leader cut off from its quorum would wait for ever: the write
        // timeout bounds it (the entry may still commit later if the
        // partition heals before a new leader overwrites it).
        let written = tokio::time::timeout(self.timeout, self.raft.client_write(batch.clone()));
        let Ok(written) = written.await else {
            return Err(ProposeError::Unavailable {
                reason: format!(
                    "not committed within {:?}: this node leads but cannot reach a quorum",
                    self.timeout
                ),
            });
        };
        match written {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                match (to.leader_id, to.leader_node) {
                    (Some(leader), Some(member)) => self
                        .forward
                        .forward(leader, &member, batch)
                        .await
                        .map(|_| ())
                        .map_err(|reason| ProposeError::Unavailable {
                            reason: format!(
                                "this node is not the leader and forwarding to leader {leader} at {} failed: {reason}",
                                member.raft_addr
                            ),
                        }),
                    _ => Err(ProposeError::Unavailable {
                        reason: "this node is not the leader and knows no leader (no quorum)"
                            .into(),
                    }),
                }
            }
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                Err(ProposeError::Unavailable {
                    reason: e.to_string(),
                })
            }
            Err(RaftError::Fatal(e)) => {
                tracing::error!(error = %e, "raft stopped");
                Err(ProposeError::ShuttingDown)
            }
        }
    }
}

/// One result per command, even if the state machine answered fewer (it
/// never does; the padding keeps every caller answered regardless).
fn pad(results: Results) -> impl Iterator<Item = Result<Vec<Change>, understudy_core::Error>> {
    results
        .into_iter()
        .map(Some)
        .chain(std::iter::repeat_with(|| None))
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(understudy_core::Error::Invalid {
                    field: "command",
                    reason: "no result was recorded for this command".into(),
                })
            })
        })
}

impl Forward for super::network::Network {
    fn forward<'a>(
        &'a self,
        leader: NodeId,
        member: &'a Member,
        batch: &'a Batch,
    ) -> BoxFuture<'a, Result<u64, String>> {
        Box::pin(async move {
            super::network::Network::forward(self, leader, member, batch)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
