//! Group commit for the durable log. One thread owns the writes to the
//! raft store file: log appends that queue while a commit is under way go
//! into the next commit together, so one fsync covers every entry waiting,
//! however many callers wait on them. Raft hears an append is flushed only
//! once its commit is durable. The commit point rides along with the next
//! commit (raft does not need it to be durable). Every other write (vote,
//! truncation, purge) keeps its place in the same queue and is durable
//! before its caller goes on.

use std::sync::mpsc;

use openraft::storage::LogFlushed;
use openraft::LogId;
use tokio::sync::oneshot;

use super::disk::{Disk, StoreError};
use super::{NodeId, TypeConfig};

/// A write the thread runs alone, in queue order.
type Write = Box<dyn FnOnce(&Disk) -> Result<(), StoreError> + Send>;

enum Job {
    Append {
        entries: Vec<(u64, Vec<u8>)>,
        flushed: LogFlushed<TypeConfig>,
    },
    Committed(Option<LogId<NodeId>>),
    Write {
        write: Write,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// The queue to the writing thread; the thread ends when the last handle
/// is dropped, and with it its handle on the file.
#[derive(Debug, Clone)]
pub(super) struct Flusher {
    jobs: mpsc::Sender<Job>,
}

/// The thread is gone (it only ends when every handle is dropped, or if it
/// panicked).
fn gone() -> StoreError {
    StoreError::from(redb::Error::Io(std::io::Error::other(
        "the raft store's writer has stopped",
    )))
}

impl Flusher {
    /// Starts the thread writing to `disk`.
    pub(super) fn start(disk: Disk) -> Self {
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("raft-flusher".into())
            .spawn(move || run(&disk, &queue))
            .expect("the raft store's writer thread starts");
        Self { jobs }
    }

    /// Queues encoded entries; `flushed` is called once they are durable
    /// (or with the error that kept them from it).
    pub(super) fn append(
        &self,
        entries: Vec<(u64, Vec<u8>)>,
        flushed: LogFlushed<TypeConfig>,
    ) -> Result<(), StoreError> {
        self.jobs
            .send(Job::Append { entries, flushed })
            .map_err(|e| {
                if let Job::Append { flushed, .. } = e.0 {
                    flushed.log_io_completed(Err(std::io::Error::other(
                        "the raft store's writer has stopped",
                    )));
                }
                gone()
            })
    }

    /// Queues the commit point, written with the next commit.
    pub(super) fn committed(&self, committed: Option<LogId<NodeId>>) -> Result<(), StoreError> {
        self.jobs
            .send(Job::Committed(committed))
            .map_err(|_| gone())
    }

    /// Runs `write` in queue order; resolves once it is durable.
    pub(super) async fn write(&self, write: Write) -> Result<(), StoreError> {
        let (done, result) = oneshot::channel();
        self.jobs
            .send(Job::Write { write, done })
            .map_err(|_| gone())?;
        result.await.map_err(|_| gone())?
    }
}

/// Appends gathered for one commit.
#[derive(Default)]
struct Group {
    entries: Vec<(u64, Vec<u8>)>,
    flushed: Vec<LogFlushed<TypeConfig>>,
    committed: Option<Option<LogId<NodeId>>>,
}

impl Group {
    /// Commits what was gathered (one fsync if there are entries) and
    /// tells raft.
    fn commit(&mut self, disk: &Disk) {
        if self.entries.is_empty() && self.committed.is_none() {
            return;
        }
        let result = disk.append_group(&self.entries, self.committed.take());
        self.entries.clear();
        for flushed in self.flushed.drain(..) {
            let result = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            flushed.log_io_completed(result);
        }
        if let Err(e) = result {
            tracing::error!(error = %e, "the raft log could not be written");
        }
    }
}

fn run(disk: &Disk, queue: &mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut group = Group::default();
        // Everything queued by now goes into this commit.
        for job in std::iter::once(first).chain(queue.try_iter()) {
            match job {
                Job::Append { entries, flushed } => {
                    group.entries.extend(entries);
                    group.flushed.push(flushed);
                }
                Job::Committed(committed) => group.committed = Some(committed),
                Job::Write { write, done } => {
                    group.commit(disk);
                    let _ = done.send(write(disk));
                }
            }
        }
        group.commit(disk);
    }
}
