//! Durable raft storage (`--data-dir`): the vote, the last purged log id
//! and the latest snapshot in one redb file, `understudy.redb`, and the
//! log with its commit point in append-only segment files under `log/`
//! ([`super::segments`]), both under the data dir. The redb file carries a
//! `meta` table (format number and node id); a file of a newer format, of
//! another node, or that cannot be read is refused by name and left
//! exactly as it is; a format-3 file (the log in a redb table) has its
//! log moved to segments on open. Every write is durable (fsynced) before
//! it returns. Values are the raft codec's bytes ([`codec`]). This module
//! only reads and writes the files; the in-memory view and raft's
//! callbacks live in [`super::store`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::{Entry, LogId, SnapshotMeta, Vote};
use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::codec::{self, CodecError};
use super::segments::{SegmentError, Segments};
use super::{Member, NodeId, TypeConfig};

/// The layout this build writes and reads; bump it when a table or value
/// changes shape, the codec's format included (2: snapshots carry the
/// lost-node marks; 4: the log in segment files, not a redb table).
pub const FORMAT: u64 = 4;

/// The format whose log was a redb table, moved to segments on open.
const FORMAT_LOG_IN_TABLE: u64 = 3;

/// Most bytes of the file redb keeps cached in memory.
const CACHE_BYTES: usize = 8 << 20;

/// The file's name under the data dir.
pub const FILE_NAME: &str = "understudy.redb";

const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
const STATE: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("state");

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";
const SNAPSHOT: &str = "snapshot";

/// Why the raft store could not be opened or written.
#[derive(Debug, Error)]
pub enum DiskError {
    /// The data dir could not be created.
    #[error("cannot create data dir {path}: {source}")]
    Dir {
        /// The dir.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// redb refused the file or a transaction on it.
    #[error("raft store {path} cannot be used (left as it is): {source}")]
    Store {
        /// The file.
        path: PathBuf,
        /// redb's error.
        source: Box<redb::Error>,
    },
    /// The file was written by a newer (or unknown) format.
    #[error(
        "raft store {path} has format {found}; this build reads format {FORMAT} (left as it is)"
    )]
    Format {
        /// The file.
        path: PathBuf,
        /// The format found.
        found: u64,
    },
    /// The file belongs to another node.
    #[error("raft store {path} belongs to node {found}, not this node {expected} (left as it is)")]
    OtherNode {
        /// The file.
        path: PathBuf,
        /// The node id found.
        found: u64,
        /// This node's id.
        expected: u64,
    },
    /// A value in the file cannot be decoded.
    #[error("raft store {path} is corrupt: {what}: {source} (left as it is)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Which value.
        what: String,
        /// Why.
        source: CodecError,
    },
    /// The log's segment files cannot be read, or one is corrupt.
    #[error("raft log cannot be used (left as it is): {0}")]
    Log(#[from] SegmentError),
    /// The log's entries do not run on from the last purged one.
    #[error("raft log under {path} has entry {found} where {expected} belongs (left as it is)")]
    Gap {
        /// The log's directory.
        path: PathBuf,
        /// The index found.
        found: u64,
        /// The index the entries before it call for.
        expected: u64,
    },
    /// The file has a data table but no `meta` table.
    #[error(
        "raft store {path} has no meta table; it is not an understudy raft store (left as it is)"
    )]
    NoMeta {
        /// The file.
        path: PathBuf,
    },
}

/// A read or write of the open file that failed (boxed: redb's error is
/// large and travels through every storage call).
#[derive(Debug, Error)]
#[error("raft store I/O failed: {0}")]
pub struct StoreError(Box<redb::Error>);

macro_rules! store_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError(Box::new(e.into()))
            }
        }
    )*};
}

store_error_from!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError(Box::new(redb::Error::Io(e)))
    }
}

impl From<CodecError> for StoreError {
    fn from(e: CodecError) -> Self {
        StoreError(Box::new(redb::Error::Io(std::io::Error::other(e))))
    }
}

/// A snapshot as kept in the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PersistedSnapshot {
    /// Raft's description of it.
    pub meta: SnapshotMeta<NodeId, Member>,
    /// The snapshot's bytes (the raft codec's, as sent to followers).
    pub bytes: Vec<u8>,
}

/// Everything read from the file at open.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The vote.
    pub vote: Option<Vote<NodeId>>,
    /// The commit point.
    pub committed: Option<LogId<NodeId>>,
    /// The last purged log id.
    pub last_purged: Option<LogId<NodeId>>,
    /// The log, in index order.
    pub log: Vec<Entry<TypeConfig>>,
    /// The latest snapshot.
    pub snapshot: Option<PersistedSnapshot>,
}

/// The open raft store file; cheap to clone.
#[derive(Debug, Clone)]
pub struct Disk {
    db: Arc<Open>,
    path: Arc<PathBuf>,
}

/// The database and the log and, dropped after them (fields drop in
/// order), the signal that they are closed: redb's own drop flushes and
/// unlocks the file, which takes a moment after the last handle is gone.
#[derive(Debug)]
struct Open {
    db: Database,
    /// Written by the log writer's thread alone; the lock is uncontended.
    log: std::sync::Mutex<Segments>,
    /// Commits made durable (fsynced) so far.
    durable_commits: std::sync::atomic::AtomicU64,
    closed: tokio::sync::watch::Sender<()>,
}

impl Disk {
    /// Opens (or creates) `dir/understudy.redb` for node `node_id` and
    /// reads it whole.
    pub fn open(dir: &Path, node_id: NodeId) -> Result<(Disk, Loaded), DiskError> {
        std::fs::create_dir_all(dir).map_err(|source| DiskError::Dir {
            path: dir.to_owned(),
            source,
        })?;
        let path = dir.join(FILE_NAME);
        let store = |e: redb::Error| DiskError::Store {
            path: path.clone(),
            source: Box::new(e),
        };
        // redb initialises only an empty file; anything else must carry
        // its magic number, so a stranger's file is refused, not reused.
        // redb caches up to 1 GiB of pages by default, and keeps what it
        // wrote: the log is read back only at start, so a small cache
        // keeps a durable node's memory near an in-memory one's.
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
            .map_err(|e| store(e.into()))?;
        let meta = read_meta(&db).map_err(|e| store(*e.0))?;
        match meta {
            Meta::Fresh => {
                let tx = db.begin_write().map_err(|e| store(e.into()))?;
                {
                    let mut meta = tx.open_table(META).map_err(|e| store(e.into()))?;
                    meta.insert("format", FORMAT).map_err(|e| store(e.into()))?;
                    meta.insert("node_id", node_id)
                        .map_err(|e| store(e.into()))?;
                    tx.open_table(STATE).map_err(|e| store(e.into()))?;
                }
                tx.commit().map_err(|e| store(e.into()))?;
            }
            Meta::Missing => return Err(DiskError::NoMeta { path }),
            Meta::Found {
                format: FORMAT_LOG_IN_TABLE,
                node_id: found,
            } if found == node_id => move_log_to_segments(&db, dir, &path)?,
            Meta::Found { format, .. } if format != FORMAT => {
                return Err(DiskError::Format {
                    path,
                    found: format,
                })
            }
            Meta::Found { node_id: found, .. } if found != node_id => {
                return Err(DiskError::OtherNode {
                    path,
                    found,
                    expected: node_id,
                })
            }
            Meta::Found { .. } => {}
        }
        let (segments, contents) = Segments::open(dir)?;
        let loaded = load(&db, &path, contents, dir)?;
        let (closed, _) = tokio::sync::watch::channel(());
        Ok((
            Disk {
                db: Arc::new(Open {
                    db,
                    log: std::sync::Mutex::new(segments),
                    durable_commits: std::sync::atomic::AtomicU64::new(0),
                    closed,
                }),
                path: Arc::new(path),
            },
            loaded,
        ))
    }

    /// How many durable (fsynced) commits this handle's file has had.
    pub fn durable_commits(&self) -> u64 {
        self.db
            .durable_commits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Commits `tx` durably, and counts it.
    fn commit(&self, tx: redb::WriteTransaction) -> Result<(), StoreError> {
        tx.commit()?;
        self.count_commit();
        Ok(())
    }

    fn count_commit(&self) {
        self.db
            .durable_commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Segments> {
        self.db.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tells when the file is closed, without keeping it open.
    pub fn watch_close(&self) -> Closed {
        Closed(self.db.closed.subscribe())
    }

    /// Writes `entries` (index, encoded entry) in one durable commit.
    pub fn append(&self, entries: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        self.append_group(entries, None)
    }

    /// Writes `entries` and, if given, the commit point with one write
    /// and one `fdatasync` (the log writer's group commit).
    pub fn append_group(
        &self,
        entries: &[(u64, Vec<u8>)],
        committed: Option<Option<LogId<NodeId>>>,
    ) -> Result<(), StoreError> {
        let committed = committed.map(|c| codec::encode(&c)).transpose()?;
        self.log().append(entries, committed.as_deref())?;
        self.count_commit();
        Ok(())
    }

    /// Removes the log from `index` on, durably.
    pub fn truncate(&self, index: u64) -> Result<(), StoreError> {
        self.log().truncate(index)?;
        self.count_commit();
        Ok(())
    }

    /// Records the log up to and including `log_id` as purged (durably),
    /// then deletes the segments that hold nothing after it: entries
    /// left at or below it are skipped when the log is read.
    pub fn purge(&self, log_id: LogId<NodeId>) -> Result<(), StoreError> {
        self.put(LAST_PURGED, &codec::encode(&log_id)?)?;
        self.log().purge(log_id.index)?;
        Ok(())
    }

    /// Saves the vote, durably.
    pub fn save_vote(&self, vote: &Vote<NodeId>) -> Result<(), StoreError> {
        self.put(VOTE, &codec::encode(vote)?)
    }

    /// Saves the latest snapshot.
    pub fn save_snapshot(&self, snapshot: &PersistedSnapshot) -> Result<(), StoreError> {
        self.put(SNAPSHOT, &codec::encode(snapshot)?)
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let tx = self.db.db.begin_write()?;
        {
            let mut state = tx.open_table(STATE)?;
            state.insert(key, bytes)?;
        }
        self.commit(tx)
    }
}

/// Tells when every handle of a [`Disk`] is gone and the file is closed.
#[derive(Debug)]
pub struct Closed(tokio::sync::watch::Receiver<()>);

impl Closed {
    /// Resolves once the file is closed and unlocked.
    pub async fn wait(mut self) {
        while self.0.changed().await.is_ok() {}
    }
}

enum Meta {
    /// A new, empty database.
    Fresh,
    /// Tables, but no meta table.
    Missing,
    Found {
        format: u64,
        node_id: u64,
    },
}

fn read_meta(db: &Database) -> Result<Meta, StoreError> {
    let tx = db.begin_read()?;
    let meta = match tx.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            let empty = tx.list_tables()?.next().is_none();
            return Ok(if empty { Meta::Fresh } else { Meta::Missing });
        }
        Err(e) => return Err(e.into()),
    };
    let format = meta.get("format")?.map(|v| v.value());
    let node_id = meta.get("node_id")?.map(|v| v.value());
    Ok(match (format, node_id) {
        (Some(format), Some(node_id)) => Meta::Found { format, node_id },
        // A meta table without both keys was not written by us.
        _ => Meta::Missing,
    })
}

/// Moves a format-3 file's log table into segment files (with its commit
/// point), then drops the table and marks the file format 4 in one
/// commit; interrupted, it starts over on the next open.
fn move_log_to_segments(db: &Database, dir: &Path, path: &Path) -> Result<(), DiskError> {
    let store = |e: redb::Error| DiskError::Store {
        path: path.to_owned(),
        source: Box::new(e),
    };
    let log_dir = dir.join(super::segments::DIR_NAME);
    if log_dir.exists() {
        std::fs::remove_dir_all(&log_dir).map_err(|e| store(redb::Error::Io(e)))?;
    }
    let (mut segments, _) = Segments::open(dir)?;
    let tx = db.begin_read().map_err(|e| store(e.into()))?;
    let committed = tx
        .open_table(STATE)
        .map_err(|e| store(e.into()))?
        .get(COMMITTED)
        .map_err(|e| store(e.into()))?
        .map(|v| v.value().to_vec());
    let mut rows = Vec::new();
    for row in tx
        .open_table(LOG)
        .map_err(|e| store(e.into()))?
        .iter()
        .map_err(|e| store(e.into()))?
    {
        let (index, bytes) = row.map_err(|e| store(e.into()))?;
        rows.push((index.value(), bytes.value().to_vec()));
    }
    drop(tx);
    // A purged prefix may have left a gap before the first row: each run
    // of consecutive rows is one append.
    let mut start = 0;
    for end in 1..=rows.len() {
        if end == rows.len() || rows[end].0 != rows[end - 1].0 + 1 {
            let last = end == rows.len();
            segments
                .append(&rows[start..end], committed.as_deref().filter(|_| last))
                .map_err(|e| store(redb::Error::Io(e)))?;
            start = end;
        }
    }
    drop(segments);
    let tx = db.begin_write().map_err(|e| store(e.into()))?;
    {
        tx.delete_table(LOG).map_err(|e| store(e.into()))?;
        tx.open_table(STATE)
            .map_err(|e| store(e.into()))?
            .remove(COMMITTED)
            .map_err(|e| store(e.into()))?;
        tx.open_table(META)
            .map_err(|e| store(e.into()))?
            .insert("format", FORMAT)
            .map_err(|e| store(e.into()))?;
    }
    tx.commit().map_err(|e| store(e.into()))?;
    tracing::info!(file = %path.display(), entries = rows.len(), "moved the raft log to segment files");
    Ok(())
}

fn load(
    db: &Database,
    path: &Path,
    contents: super::segments::Contents,
    dir: &Path,
) -> Result<Loaded, DiskError> {
    let store = |e: redb::Error| DiskError::Store {
        path: path.to_owned(),
        source: Box::new(e),
    };
    let corrupt = |what: String, source: CodecError| DiskError::Corrupt {
        path: path.to_owned(),
        what,
        source,
    };
    let tx = db.begin_read().map_err(|e| store(e.into()))?;
    let state = tx.open_table(STATE).map_err(|e| store(e.into()))?;
    let mut loaded = Loaded::default();
    if let Some(v) = state.get(VOTE).map_err(|e| store(e.into()))? {
        loaded.vote = Some(codec::decode(v.value()).map_err(|e| corrupt("the vote".into(), e))?);
    }
    if let Some(v) = state.get(LAST_PURGED).map_err(|e| store(e.into()))? {
        loaded.last_purged = Some(
            codec::decode(v.value()).map_err(|e| corrupt("the last purged log id".into(), e))?,
        );
    }
    if let Some(v) = state.get(SNAPSHOT).map_err(|e| store(e.into()))? {
        loaded.snapshot =
            Some(codec::decode(v.value()).map_err(|e| corrupt("the snapshot".into(), e))?);
    }
    if let Some(bytes) = &contents.committed {
        loaded.committed =
            codec::decode(bytes).map_err(|e| corrupt("the commit point".into(), e))?;
    }
    // A purge records its point before it deletes segments: what a crash
    // left of them at or below it is skipped.
    let purged = loaded.last_purged.map(|p| p.index);
    let mut expected = None;
    for (index, bytes) in &contents.entries {
        if purged.is_some_and(|p| *index <= p) {
            continue;
        }
        let expected = expected.get_or_insert(purged.map_or(*index, |p| p + 1));
        if *index != *expected {
            return Err(DiskError::Gap {
                path: dir.join(super::segments::DIR_NAME),
                found: *index,
                expected: *expected,
            });
        }
        *expected += 1;
        let entry: Entry<TypeConfig> =
            codec::decode(bytes).map_err(|e| corrupt(format!("log entry {index}"), e))?;
        loaded.log.push(entry);
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn log_id(index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn entry(index: u64) -> (u64, Vec<u8>) {
        let entry: Entry<TypeConfig> = Entry {
            log_id: log_id(index),
            payload: EntryPayload::Blank,
        };
        (index, codec::encode(&entry).unwrap())
    }

    fn indexes(loaded: &Loaded) -> Vec<u64> {
        loaded.log.iter().map(|e| e.log_id.index).collect()
    }

    #[test]
    fn entries_vote_commit_point_purge_and_truncate_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (disk, loaded) = Disk::open(dir.path(), 3).unwrap();
            assert!(loaded.log.is_empty() && loaded.vote.is_none());
            disk.append(&(1..=10).map(entry).collect::<Vec<_>>())
                .unwrap();
            disk.truncate(8).unwrap();
            disk.purge(log_id(3)).unwrap();
            disk.save_vote(&Vote::new(4, 3)).unwrap();
            disk.append_group(&[entry(8)], Some(Some(log_id(6))))
                .unwrap();
        }
        let (_disk, loaded) = Disk::open(dir.path(), 3).unwrap();
        assert_eq!(indexes(&loaded), vec![4, 5, 6, 7, 8]);
        assert_eq!(loaded.vote, Some(Vote::new(4, 3)));
        assert_eq!(loaded.committed, Some(log_id(6)));
        assert_eq!(loaded.last_purged, Some(log_id(3)));
        assert!(loaded.snapshot.is_none());
    }

    fn set_meta(path: &Path, key: &str, value: u64) {
        let db = Database::create(path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META).unwrap().insert(key, value).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn a_newer_format_is_refused_by_number_and_the_file_is_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        drop(Disk::open(dir.path(), 1).unwrap());
        let path = dir.path().join(FILE_NAME);
        set_meta(&path, "format", FORMAT + 1);
        let before = std::fs::read(&path).unwrap();
        let err = Disk::open(dir.path(), 1).unwrap_err();
        assert!(matches!(err, DiskError::Format { found, .. } if found == FORMAT + 1));
        let message = err.to_string();
        assert!(message.contains(FILE_NAME), "{message}");
        assert!(
            message.contains(&format!("format {}", FORMAT + 1)),
            "{message}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before, "left byte for byte");
    }

    #[test]
    fn another_nodes_file_is_refused_by_id_and_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (disk, _) = Disk::open(dir.path(), 2).unwrap();
            disk.append(&[entry(1)]).unwrap();
        }
        let path = dir.path().join(FILE_NAME);
        let before = std::fs::read(&path).unwrap();
        let err = Disk::open(dir.path(), 5).unwrap_err();
        assert!(
            matches!(
                err,
                DiskError::OtherNode {
                    found: 2,
                    expected: 5,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("node 2"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "left byte for byte");
    }

    #[test]
    fn a_corrupt_file_or_entry_is_refused_and_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, b"not a redb file, just some bytes").unwrap();
        let err = Disk::open(dir.path(), 1).unwrap_err();
        assert!(matches!(err, DiskError::Store { .. }), "{err}");
        assert!(err.to_string().contains(FILE_NAME), "{err}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"not a redb file, just some bytes"
        );

        let dir = tempfile::tempdir().unwrap();
        {
            let (disk, _) = Disk::open(dir.path(), 1).unwrap();
            disk.append(&[entry(1), (2, vec![codec::FORMAT, 0xff, 0xff])])
                .unwrap();
        }
        let path = dir.path().join(FILE_NAME);
        let segment = dir
            .path()
            .join(super::super::segments::DIR_NAME)
            .join(format!("{:020}.log", 1));
        let before = (
            std::fs::read(&path).unwrap(),
            std::fs::read(&segment).unwrap(),
        );
        let err = Disk::open(dir.path(), 1).unwrap_err();
        assert!(matches!(err, DiskError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("log entry 2"), "{err}");
        assert_eq!(
            (
                std::fs::read(&path).unwrap(),
                std::fs::read(&segment).unwrap()
            ),
            before,
            "left byte for byte"
        );
    }

    #[test]
    fn a_format_3_file_has_its_log_table_moved_to_segments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        {
            let db = Database::create(&path).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut meta = tx.open_table(META).unwrap();
                meta.insert("format", FORMAT_LOG_IN_TABLE).unwrap();
                meta.insert("node_id", 1).unwrap();
                let mut log = tx.open_table(LOG).unwrap();
                for (index, bytes) in (4..=7).map(entry) {
                    log.insert(index, bytes.as_slice()).unwrap();
                }
                let mut state = tx.open_table(STATE).unwrap();
                let committed = codec::encode(&Some(log_id(6))).unwrap();
                state.insert(COMMITTED, committed.as_slice()).unwrap();
                let purged = codec::encode(&log_id(4)).unwrap();
                state.insert(LAST_PURGED, purged.as_slice()).unwrap();
                let vote = codec::encode(&Vote::<NodeId>::new(2, 1)).unwrap();
                state.insert(VOTE, vote.as_slice()).unwrap();
            }
            tx.commit().unwrap();
        }
        for _ in 0..2 {
            let (disk, loaded) = Disk::open(dir.path(), 1).unwrap();
            assert_eq!(indexes(&loaded), vec![5, 6, 7]);
            assert_eq!(loaded.committed, Some(log_id(6)));
            assert_eq!(loaded.last_purged, Some(log_id(4)));
            assert_eq!(loaded.vote, Some(Vote::new(2, 1)));
            drop(disk);
        }
        let db = Database::create(&path).unwrap();
        let tx = db.begin_read().unwrap();
        assert_eq!(
            tx.open_table(META)
                .unwrap()
                .get("format")
                .unwrap()
                .unwrap()
                .value(),
            FORMAT
        );
        assert!(matches!(
            tx.open_table(LOG),
            Err(redb::TableError::TableDoesNotExist(_))
        ));
    }
}
