//! Group commit for the durable log. One thread owns the writes to the
//! raft store file: log appends that queue while a commit is under way go
//! into the next commit together, so one fsync covers every entry waiting,
//! however many callers wait on them. Raft hears an append is flushed only
//! once its commit is durable. The commit point rides along with the next
//! commit of entries (raft does not need it to be durable). Every other write (vote,
//! truncation, purge) keeps its place in the same queue and is durable
//! before its caller goes on.

use std::sync::mpsc;

use openraft::LogId;
use tokio::sync::oneshot;

use super::disk::{Disk, StoreError};
use super::NodeId;

/// A write the thread runs alone, in queue order.
type Write = Box<dyn FnOnce(&Disk) -> Result<(), StoreError> + Send>;

/// Told when an append is durable, or why it is not (raft's `LogFlushed`).
pub(super) type Flushed = Box<dyn FnOnce(Result<(), std::io::Error>) + Send>;

enum Job {
    Append {
        entries: Vec<(u64, Vec<u8>)>,
        flushed: Flushed,
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
        flushed: Flushed,
    ) -> Result<(), StoreError> {
        self.jobs
            .send(Job::Append { entries, flushed })
            .map_err(|e| {
                if let Job::Append { flushed, .. } = e.0 {
                    flushed(Err(std::io::Error::other(
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

    /// Queues `write` now, behind everything queued before it; the
    /// future resolves once it is durable.
    pub(super) fn write(
        &self,
        write: Write,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send {
        let (done, result) = oneshot::channel();
        let queued = self.jobs.send(Job::Write { write, done });
        async move {
            queued.map_err(|_| gone())?;
            result.await.map_err(|_| gone())?
        }
    }
}

/// Appends gathered for one commit.
#[derive(Default)]
struct Group {
    entries: Vec<(u64, Vec<u8>)>,
    flushed: Vec<Flushed>,
    committed: Option<Option<LogId<NodeId>>>,
}

impl Group {
    /// Commits what was gathered (one fsync) and tells raft. A commit
    /// point alone waits for the next entries: a commit of its own would
    /// cost nearly what one of entries does, and raft does not need it.
    fn commit(&mut self, disk: &Disk) {
        if self.entries.is_empty() {
            return;
        }
        let result = disk.append_group(&self.entries, self.committed.take());
        self.entries.clear();
        for flushed in self.flushed.drain(..) {
            let result = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            flushed(result);
        }
        if let Err(e) = result {
            tracing::error!(error = %e, "the raft log could not be written");
        }
    }
}

fn run(disk: &Disk, queue: &mpsc::Receiver<Job>) {
    // Outlives each round: a commit point waits for the next entries.
    let mut group = Group::default();
    while let Ok(first) = queue.recv() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::codec;
    use crate::raft::TypeConfig;
    use openraft::{CommittedLeaderId, Entry, EntryPayload};
    use std::sync::{Arc, Mutex};

    fn entry(index: u64) -> (u64, Vec<u8>) {
        let entry: Entry<TypeConfig> = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        };
        (index, codec::encode(&entry).unwrap())
    }

    #[tokio::test]
    async fn appends_queued_during_a_commit_share_the_next_one_and_all_survive() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = Disk::open(dir.path(), 1).unwrap();
        let flusher = Flusher::start(disk.clone());
        // Keep the thread busy while fifty appends queue behind it.
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let busy = flusher.write(Box::new(move |_| {
            let _ = wait.recv();
            Ok(())
        }));
        let done = Arc::new(Mutex::new(Vec::new()));
        for index in 1..=50 {
            let done = done.clone();
            let flushed: Flushed = Box::new(move |result| {
                done.lock().unwrap().push((index, result.is_ok()));
            });
            flusher.append(vec![entry(index)], flushed).unwrap();
        }
        let before = disk.durable_commits();
        release.send(()).unwrap();
        busy.await.unwrap();
        // The vote is written after every append queued before it.
        flusher
            .write(Box::new(|disk| disk.save_vote(&openraft::Vote::new(1, 1))))
            .await
            .unwrap();
        let done = done.lock().unwrap().clone();
        assert_eq!(done, (1..=50).map(|i| (i, true)).collect::<Vec<_>>());
        assert_eq!(
            disk.durable_commits() - before,
            2,
            "one commit for the fifty appends, one for the vote"
        );
        drop(flusher);
        let closed = disk.watch_close();
        drop(disk);
        closed.wait().await;
        let (_, loaded) = Disk::open(dir.path(), 1).unwrap();
        let indexes: Vec<u64> = loaded.log.iter().map(|e| e.log_id.index).collect();
        assert_eq!(indexes, (1..=50).collect::<Vec<_>>());
    }
}
