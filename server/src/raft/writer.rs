//! The write seam of a replicated node: commands queue as on a single node
//! (removals and health changes first), a batch becomes one raft entry,
//! and each caller is answered once the entry is applied on this node —
//! read-your-writes here, whichever node leads. On a follower the batch is
//! forwarded to the leader, which joins it into the next entry it
//! proposes (with its own commands and other followers' batches); on a
//! node that knows no leader the write is refused as unavailable, naming
//! the leader when one is known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::{Change, Command};

use super::store::{Results, Waiters};
use super::{Batch, Joined, Member, NodeId, Raft};
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
    reply: Reply,
}

/// Who waits for a job.
enum Reply {
    /// This node's callers, for the results.
    Here(oneshot::Sender<Result<Vec<CommandResult>, ProposeError>>),
    /// A batch a follower forwarded (its proposers' parts and its stamp),
    /// for the index of the entry that holds it, once applied here; the
    /// proposers take their results from their own state machines.
    Joined {
        parts: Vec<Joined>,
        stamp_ms: u64,
        reply: oneshot::Sender<Result<u64, ProposeError>>,
    },
}

/// What one applied command did, or why the registry refused it.
type CommandResult = Result<Vec<Change>, understudy_core::Error>;

/// The write seam of a replicated node.
pub(crate) struct RaftWriter {
    urgent: mpsc::Sender<Job>,
    normal: mpsc::Sender<Job>,
    timeout: Duration,
    raft: Raft,
    node_id: NodeId,
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
            raft: raft.clone(),
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
            raft,
            node_id: config.node_id,
        }
    }
}

impl Propose for RaftWriter {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, ProposeError>> {
        Box::pin(async move {
            let urgent = command.op.is_urgent();
            let mut results = self.results(vec![command], urgent).await?;
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
            let results = self.results(commands, false).await?;
            Ok(results
                .into_iter()
                .map(|r| r.map(|changes| Applied { changes }))
                .collect())
        })
    }
}

impl RaftWriter {
    /// Queues `commands` as one job (one entry) and waits for their results.
    async fn results(
        &self,
        commands: Vec<Command>,
        urgent: bool,
    ) -> Result<Vec<CommandResult>, ProposeError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(
            Job {
                commands,
                reply: Reply::Here(reply),
            },
            urgent,
        )
        .await?;
        answer.await.unwrap_or(Err(ProposeError::ShuttingDown))
    }

    /// Joins a batch a follower forwarded into the next entry this node
    /// proposes, and answers that entry's index once it is applied here.
    /// Refused when this node does not lead (as far as it knows): the
    /// follower then learns of the leader in its own time.
    pub(crate) async fn join(&self, batch: Batch) -> Result<u64, ProposeError> {
        if !super::leads(&self.raft, self.node_id) {
            return Err(ProposeError::Unavailable {
                reason: "this node is not the leader".into(),
            });
        }
        let urgent = batch.commands.iter().any(|c| c.op.is_urgent());
        let parts = batch.parts().collect();
        let (reply, answer) = oneshot::channel();
        let job = Job {
            commands: batch.commands,
            reply: Reply::Joined {
                parts,
                stamp_ms: batch.stamp_ms,
                reply,
            },
        };
        self.enqueue(job, urgent).await?;
        answer.await.unwrap_or(Err(ProposeError::ShuttingDown))
    }

    async fn enqueue(&self, job: Job, urgent: bool) -> Result<(), ProposeError> {
        let queue = if urgent { &self.urgent } else { &self.normal };
        match queue.send_timeout(job, self.timeout).await {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                metrics::counter!("understudy_writes_refused_total", "reason" => "busy")
                    .increment(1);
                Err(ProposeError::Busy)
            }
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(ProposeError::ShuttingDown),
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
        job.reply.fail(ProposeError::ShuttingDown);
    }
}

impl Reply {
    fn fail(self, e: ProposeError) {
        // The caller may have given up.
        match self {
            Reply::Here(reply) => drop(reply.send(Err(e))),
            Reply::Joined { reply, .. } => drop(reply.send(Err(e))),
        }
    }
}

impl Proposer {
    async fn propose(&self, jobs: Vec<Job>) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut stamp_ms = self.clock.wall_ms();
        // This node's commands first, then each joined batch's.
        let mut commands = Vec::new();
        let mut here = Vec::new();
        let mut joined = Vec::new();
        let mut joined_commands = Vec::new();
        let mut joined_replies = Vec::new();
        for job in jobs {
            match job.reply {
                Reply::Here(reply) => {
                    here.push((job.commands.len(), reply));
                    commands.extend(job.commands);
                }
                Reply::Joined {
                    parts,
                    stamp_ms: stamp,
                    reply,
                } => {
                    joined.extend(parts);
                    joined_commands.extend(job.commands);
                    stamp_ms = stamp_ms.min(stamp);
                    joined_replies.push(reply);
                }
            }
        }
        let count = commands.len();
        commands.extend(joined_commands);
        let batch = Arc::new(Batch {
            origin: self.node_id,
            seq,
            commands,
            stamp_ms,
            joined,
        });
        let applied = self.waiters.register(seq);
        let outcome = match self.submit(&batch).await {
            Ok(index) => match tokio::time::timeout(self.timeout, applied).await {
                Ok(Ok(results)) => Ok((index, results)),
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
            Ok((index, results)) => {
                let mut results = pad(results);
                for (n, reply) in here {
                    // The caller may have given up; the write stands.
                    let _ = reply.send(Ok(results.by_ref().take(n).collect()));
                }
                for reply in joined_replies {
                    let _ = reply.send(Ok(index));
                }
            }
            Err(e) => {
                for (_, reply) in here {
                    let _ = reply.send(Err(e.clone()));
                }
                for reply in joined_replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Gets the batch committed: directly when leading, else through the
    /// leader.
    async fn submit(&self, batch: &Arc<Batch>) -> Result<u64, ProposeError> {
        // A follower that knows its leader forwards at once; raft's core
        // would only answer the same.
        if let Some((leader, member)) = self.leader_elsewhere() {
            return self.forward_to(leader, &member, batch).await;
        }
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
            Ok(written) => Ok(written.log_id.index),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                match (to.leader_id, to.leader_node) {
                    (Some(leader), Some(member)) => self.forward_to(leader, &member, batch).await,
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

impl Proposer {
    /// The leader this node's raft knows of, when it is another node.
    fn leader_elsewhere(&self) -> Option<(NodeId, Member)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics.current_leader.filter(|l| *l != self.node_id)?;
        let member = metrics.membership_config.membership().get_node(&leader)?;
        Some((leader, member.clone()))
    }

    async fn forward_to(
        &self,
        leader: NodeId,
        member: &Member,
        batch: &Batch,
    ) -> Result<u64, ProposeError> {
        self.forward
            .forward(leader, member, batch)
            .await
            .map_err(|reason| ProposeError::Unavailable {
                reason: format!(
                    "this node is not the leader and forwarding to leader {leader} at {} failed: {reason}",
                    member.raft_addr
                ),
            })
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
