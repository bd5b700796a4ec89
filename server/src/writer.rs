//! The local writer: the single task that applies commands on a node
//! without raft. Commands arrive on two bounded queues; removals and
//! health changes (urgent) always go first, so a flood of registrations
//! never delays a deregistration or an expiry. Each wake-up drains a batch
//! and applies it under one write lock.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::{Change, Command};

use crate::clock::Clock;
use crate::config::ValidConfig;
use crate::node::{Applied, BoxFuture, Propose, ProposeError, State};

/// Most commands applied under one lock.
const BATCH: usize = 256;

struct Job {
    command: Command,
    reply: oneshot::Sender<Result<Vec<Change>, understudy_core::Error>>,
}

/// The write seam of a single node.
pub(crate) struct LocalWriter {
    urgent: mpsc::Sender<Job>,
    normal: mpsc::Sender<Job>,
    timeout: Duration,
}

impl LocalWriter {
    pub(crate) fn start(
        config: &ValidConfig,
        clock: Clock,
        state: Arc<State>,
        tasks: &TaskTracker,
        cancel: CancellationToken,
    ) -> Self {
        let (urgent, urgent_rx) = mpsc::channel(config.write_queue);
        let (normal, normal_rx) = mpsc::channel(config.write_queue);
        tasks.spawn(run(state, clock, urgent_rx, normal_rx, cancel));
        Self {
            urgent,
            normal,
            timeout: config.write_timeout,
        }
    }
}

impl Propose for LocalWriter {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Applied, ProposeError>> {
        Box::pin(async move {
            let queue = if command.op.is_urgent() {
                &self.urgent
            } else {
                &self.normal
            };
            let (reply, answer) = oneshot::channel();
            match queue
                .send_timeout(Job { command, reply }, self.timeout)
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
                Ok(Ok(changes)) => Ok(Applied { changes }),
                Ok(Err(rejected)) => Err(ProposeError::Rejected(rejected)),
                Err(_) => Err(ProposeError::ShuttingDown),
            }
        })
    }
}

async fn run(
    state: Arc<State>,
    clock: Clock,
    mut urgent: mpsc::Receiver<Job>,
    mut normal: mpsc::Receiver<Job>,
    cancel: CancellationToken,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            biased;
            Some(job) = urgent.recv() => batch.push(job),
            Some(job) = normal.recv() => batch.push(job),
            () = cancel.cancelled() => break,
        }
        fill(&mut batch, &mut urgent, &mut normal);
        apply(&state, &clock, &mut batch);
    }
    // Shutting down: refuse new writes, but finish the ones already queued,
    // so nothing a client was told is applied gets lost on the way out.
    urgent.close();
    normal.close();
    loop {
        fill(&mut batch, &mut urgent, &mut normal);
        if batch.is_empty() {
            break;
        }
        apply(&state, &clock, &mut batch);
    }
}

/// Tops the batch up without waiting, urgent jobs first.
fn fill(batch: &mut Vec<Job>, urgent: &mut mpsc::Receiver<Job>, normal: &mut mpsc::Receiver<Job>) {
    while batch.len() < BATCH {
        match urgent.try_recv().or_else(|_| normal.try_recv()) {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

fn apply(state: &State, clock: &Clock, batch: &mut Vec<Job>) {
    let commands: Vec<Command> = batch.iter().map(|j| j.command.clone()).collect();
    let results = state.apply(&commands, clock.now());
    metrics::counter!("understudy_commands_applied_total").increment(commands.len() as u64);
    for (job, result) in batch.drain(..).zip(results) {
        // The caller may have given up (client gone); the write stands.
        let _ = job.reply.send(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_core::{InstanceSpec, Op, Owner, ServiceKey};

    fn job(
        op: Op,
    ) -> (
        Job,
        oneshot::Receiver<Result<Vec<Change>, understudy_core::Error>>,
    ) {
        let (reply, answer) = oneshot::channel();
        (
            Job {
                command: Command::new(0, op),
                reply,
            },
            answer,
        )
    }

    fn register(port: u16) -> Op {
        Op::Register {
            service: ServiceKey::parse("", "", "svc").unwrap(),
            owner: Owner::Beat {
                ip: "10.0.0.1".into(),
                port,
            },
            instances: vec![InstanceSpec::new("10.0.0.1", port)],
        }
    }

    fn deregister(port: u16) -> Op {
        Op::Deregister {
            service: ServiceKey::parse("", "", "svc").unwrap(),
            owner: Owner::Beat {
                ip: "10.0.0.1".into(),
                port,
            },
        }
    }

    #[test]
    fn urgent_jobs_jump_ahead_of_queued_registrations() {
        let (urgent_tx, mut urgent) = mpsc::channel(8);
        let (normal_tx, mut normal) = mpsc::channel(8);
        let mut answers = Vec::new();
        for port in 0..3 {
            let (j, a) = job(register(port));
            normal_tx.try_send(j).ok().unwrap();
            answers.push(a);
        }
        let (j, a) = job(deregister(0));
        urgent_tx.try_send(j).ok().unwrap();
        answers.push(a);
        let mut batch = Vec::new();
        fill(&mut batch, &mut urgent, &mut normal);
        let urgent_first: Vec<bool> = batch.iter().map(|j| j.command.op.is_urgent()).collect();
        assert_eq!(urgent_first, vec![true, false, false, false]);
    }

    #[test]
    fn a_batch_applies_every_job_and_answers_each() {
        let config = ValidConfig::default();
        let state = State::new(&config);
        let clock = Clock::starting_at(0);
        let (j1, a1) = job(register(1));
        let (j2, a2) = job(Op::DeleteService {
            service: ServiceKey::parse("", "", "missing").unwrap(),
        });
        let mut batch = vec![j1, j2];
        apply(&state, &clock, &mut batch);
        assert!(batch.is_empty());
        assert_eq!(a1.blocking_recv().unwrap().unwrap().len(), 2);
        assert!(matches!(
            a2.blocking_recv().unwrap(),
            Err(understudy_core::Error::ServiceNotFound { .. })
        ));
        assert_eq!(state.registry().counts().instances, 1);
    }
}
