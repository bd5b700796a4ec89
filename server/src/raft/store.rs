//! The raft log (in memory, written through to a [`Disk`] in durable
//! mode) and the state machine over the node's [`State`]. The state
//! machine applies each committed batch through the core and hands the results to the node's own waiting proposer, if the
//! batch came from this node; a snapshot is the registry's sorted snapshot
//! with the last applied log id and membership, postcard behind the
//! format byte. In durable mode the state machine keeps each snapshot it
//! builds or installs on disk and starts from it. Nothing here talks to
//! the network.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership, Vote,
};
use tokio::sync::oneshot;
use understudy_core::Change;

use super::codec;
use super::disk::{Disk, Loaded, PersistedSnapshot, StoreError};
use super::flusher::Flusher;
use super::snapshot::{decode_body, SnapshotBody};
use super::{BatchApplied, Member, NodeId, TypeConfig};
use crate::clock::Clock;
use crate::state::State;

/// The results of a batch's commands, in order.
pub type Results = Vec<Result<Vec<Change>, understudy_core::Error>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The raft log, vote and commit point, in memory; with a [`Disk`], every
/// change is also committed to it (durably) before raft is told it is done,
/// and reads still come from memory.
#[derive(Debug, Clone, Default)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
    disk: Option<Flusher>,
}

impl LogStore {
    /// A durable log over `disk`, starting from what was read from it.
    pub fn durable(disk: Disk, loaded: Loaded) -> Self {
        let inner = LogInner {
            vote: loaded.vote,
            committed: loaded.committed,
            last_purged: loaded.last_purged,
            log: loaded
                .log
                .into_iter()
                .map(|e| (e.log_id.index, e))
                .collect(),
        };
        Self {
            inner: Arc::new(Mutex::new(inner)),
            disk: Some(Flusher::start(disk)),
        }
    }

    /// Runs a disk write on the writer thread, after every write queued
    /// before it; resolves once it is durable.
    async fn on_disk<F>(&self, write: F) -> Result<(), StoreError>
    where
        F: FnOnce(&Disk) -> Result<(), StoreError> + Send + 'static,
    {
        match &self.disk {
            Some(flusher) => flusher.write(Box::new(write)).await,
            None => Ok(()),
        }
    }
}

fn write_error(
    e: impl std::error::Error + 'static,
    what: fn(openraft::AnyError) -> StorageIOError<NodeId>,
) -> StorageError<NodeId> {
    StorageError::IO {
        source: what(openraft::AnyError::new(&e)),
    }
}

#[derive(Debug, Default)]
struct LogInner {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    log: BTreeMap<u64, Entry<TypeConfig>>,
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(lock(&self.inner)
            .log
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = lock(&self.inner);
        let last = inner
            .log
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let saved = *vote;
        self.on_disk(move |disk| disk.save_vote(&saved))
            .await
            .map_err(|e| write_error(e, StorageIOError::write_vote))?;
        lock(&self.inner).vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.inner).vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        if let Some(flusher) = &self.disk {
            flusher
                .committed(committed)
                .map_err(|e| write_error(e, StorageIOError::write))?;
        }
        lock(&self.inner).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.inner).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let Some(flusher) = &self.disk else {
            let mut inner = lock(&self.inner);
            for entry in entries {
                inner.log.insert(entry.log_id.index, entry);
            }
            // In memory, written is flushed.
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let mut encoded = Vec::with_capacity(entries.len());
        for entry in &entries {
            let bytes =
                codec::encode(entry).map_err(|e| write_error(e, StorageIOError::write_logs))?;
            encoded.push((entry.log_id.index, bytes));
        }
        // Readable at once (raft may replicate entries before they are
        // flushed here), flushed with the next group commit: raft counts
        // an entry as written here only when `callback` says so, so an
        // acknowledged entry survives a crash.
        {
            let mut inner = lock(&self.inner);
            for entry in entries {
                inner.log.insert(entry.log_id.index, entry);
            }
        }
        let flushed = Box::new(move |result| callback.log_io_completed(result));
        flusher
            .append(encoded, flushed)
            .map_err(|e| write_error(e, StorageIOError::write_logs))
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let index = log_id.index;
        self.on_disk(move |disk| disk.truncate(index))
            .await
            .map_err(|e| write_error(e, StorageIOError::write_logs))?;
        lock(&self.inner).log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.on_disk(move |disk| disk.purge(log_id))
            .await
            .map_err(|e| write_error(e, StorageIOError::write_logs))?;
        let mut inner = lock(&self.inner);
        inner.last_purged = Some(log_id);
        inner.log = inner.log.split_off(&(log_id.index + 1));
        Ok(())
    }
}

/// Proposers of this node waiting for their batch's results, by sequence.
#[derive(Debug, Clone, Default)]
pub struct Waiters {
    inner: Arc<Mutex<HashMap<u64, oneshot::Sender<Results>>>>,
}

impl Waiters {
    /// Waits for batch `seq`; register before proposing it.
    pub fn register(&self, seq: u64) -> oneshot::Receiver<Results> {
        let (tx, rx) = oneshot::channel();
        lock(&self.inner).insert(seq, tx);
        rx
    }

    /// Gives up on batch `seq` (its proposal failed).
    pub fn forget(&self, seq: u64) {
        lock(&self.inner).remove(&seq);
    }

    fn deliver(&self, seq: u64, results: Results) {
        if let Some(tx) = lock(&self.inner).remove(&seq) {
            // The caller may have given up; the write stands.
            let _ = tx.send(results);
        }
    }
}

/// The latest snapshot, held as its body: the body's services are the
/// registry's own (one `Arc` each), so holding it costs little, where its
/// encoded bytes would cost the registry's size again. It is encoded when
/// a follower needs it; in durable mode its bytes are also on disk.
#[derive(Debug, Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, Member>,
    body: Arc<SnapshotBody>,
}

/// The state machine: the node's applied state, fed by committed entries.
#[derive(Debug)]
pub struct StateMachine {
    node_id: NodeId,
    state: Arc<State>,
    clock: Clock,
    waiters: Waiters,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
    current: Arc<Mutex<Option<StoredSnapshot>>>,
    snapshots_built: u64,
    disk: Option<Disk>,
    view: Option<crate::view::View>,
    /// The cluster's history id, from the first normal entry of its log
    /// (or a snapshot that carries it): the same on every node, new after
    /// an in-memory restart of the whole cluster.
    genesis: Option<String>,
}

impl StateMachine {
    /// A state machine over `state`, handing this node's results to
    /// `waiters`.
    pub fn new(node_id: NodeId, state: Arc<State>, clock: Clock, waiters: Waiters) -> Self {
        Self {
            node_id,
            state,
            clock,
            waiters,
            last_applied: None,
            membership: StoredMembership::default(),
            current: Arc::new(Mutex::new(None)),
            snapshots_built: 0,
            disk: None,
            view: None,
            genesis: None,
        }
    }

    fn learn_genesis(&mut self, genesis: Option<String>) {
        if let Some(id) = &genesis {
            self.state.set_cluster_id(id);
        }
        self.genesis = genesis;
    }

    /// Feeds `view` with the stamps of applied entries, holding them back
    /// by its DC's apply delay.
    pub fn with_view(mut self, view: crate::view::View) -> Self {
        self.view = Some(view);
        self
    }

    /// Keeps every snapshot on `disk`, and starts from `snapshot` (the one
    /// kept there last), so raft re-applies only the log after it.
    pub fn durable(
        mut self,
        disk: Disk,
        snapshot: Option<PersistedSnapshot>,
    ) -> Result<Self, codec::CodecError> {
        if let Some(snapshot) = snapshot {
            let body = decode_body(&snapshot.bytes)?;
            drop(snapshot.bytes);
            self.state.restore(body.registry.clone(), self.clock.now());
            self.learn_genesis(body.genesis.clone());
            self.last_applied = snapshot.meta.last_log_id;
            self.membership = snapshot.meta.last_membership.clone();
            *lock(&self.current) = Some(StoredSnapshot {
                meta: snapshot.meta,
                body: Arc::new(body),
            });
        }
        self.disk = Some(disk);
        Ok(self)
    }
}

/// Keeps a snapshot's `bytes` on disk, off the async workers (an fsync).
async fn persist(
    disk: Option<&Disk>,
    meta: &SnapshotMeta<NodeId, Member>,
    bytes: Vec<u8>,
) -> Result<(), StorageError<NodeId>> {
    let Some(disk) = disk.cloned() else {
        return Ok(());
    };
    let persisted = PersistedSnapshot {
        meta: meta.clone(),
        bytes,
    };
    let signature = meta.signature();
    let fail = |e: StoreError| StorageError::IO {
        source: StorageIOError::write_snapshot(
            Some(signature.clone()),
            openraft::AnyError::new(&e),
        ),
    };
    tokio::task::spawn_blocking(move || disk.save_snapshot(&persisted))
        .await
        .map_err(|e| fail(redb::Error::Io(std::io::Error::other(e)).into()))?
        .map_err(fail)
}

fn io_error(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageError::IO {
        source: StorageIOError::read_snapshot(None, &e),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Member>), StorageError<NodeId>>
    {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchApplied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut answers = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => answers.push(BatchApplied::default()),
                EntryPayload::Normal(batch) => {
                    if self.genesis.is_none() {
                        let id = format!(
                            "{:x}-{:x}-{:x}",
                            entry.log_id.index, batch.origin, batch.stamp_ms
                        );
                        self.learn_genesis(Some(id));
                    }
                    if let Some(view) = &self.view {
                        view.admit(batch.stamp_ms).await;
                    }
                    if batch.is_tick() {
                        answers.push(BatchApplied::default());
                    } else {
                        if let Some(view) = &self.view {
                            view.before_apply(&batch.commands, |key| {
                                self.state.registry().config(key)
                            });
                        }
                        let results = self.state.apply(&batch.commands, self.clock.now());
                        answers.push(BatchApplied {
                            commands: results.len(),
                        });
                        // Each proposer of this node takes its part's results.
                        let mut results = results.into_iter();
                        for part in batch.parts() {
                            let theirs = results.by_ref().take(part.count as usize);
                            if part.origin == self.node_id {
                                self.waiters.deliver(part.seq, theirs.collect());
                            } else {
                                theirs.for_each(drop);
                            }
                        }
                    }
                    if let Some(view) = &self.view {
                        view.applied(batch.stamp_ms, &batch.commands);
                    }
                }
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                    answers.push(BatchApplied::default());
                }
            }
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshots_built += 1;
        // Taken here, between applies, so the registry, the applied log id
        // and the membership agree; copying it costs one Arc per service.
        SnapshotBuilder {
            body: Some(SnapshotBody {
                last_applied: self.last_applied,
                membership: self.membership.clone(),
                registry: self.state.registry().snapshot(),
                genesis: self.genesis.clone(),
            }),
            id: self.snapshots_built,
            current: self.current.clone(),
            disk: self.disk.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let started = std::time::Instant::now();
        let bytes = snapshot.into_inner();
        let size = bytes.len();
        let body = decode_body(&bytes).map_err(io_error)?;
        // On disk first: a crash after this restarts from the snapshot.
        persist(self.disk.as_ref(), meta, bytes).await?;
        self.state.restore(body.registry.clone(), self.clock.now());
        self.learn_genesis(body.genesis.clone());
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        *lock(&self.current) = Some(StoredSnapshot {
            meta: meta.clone(),
            body: Arc::new(body),
        });
        tracing::info!(
            snapshot = %meta.snapshot_id,
            up_to = ?meta.last_log_id.map(|l| l.index),
            bytes = size,
            took_ms = started.elapsed().as_millis() as u64,
            "installed a snapshot"
        );
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let Some(current) = lock(&self.current).clone() else {
            return Ok(None);
        };
        let bytes = codec::encode(current.body.as_ref()).map_err(io_error)?;
        Ok(Some(Snapshot {
            meta: current.meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

/// Builds one snapshot from the state captured when it was asked for.
#[derive(Debug)]
pub struct SnapshotBuilder {
    body: Option<SnapshotBody>,
    id: u64,
    current: Arc<Mutex<Option<StoredSnapshot>>>,
    disk: Option<Disk>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let Some(body) = self.body.take() else {
            return Err(io_error(std::io::Error::other(
                "a snapshot builder builds once",
            )));
        };
        let meta = SnapshotMeta {
            last_log_id: body.last_applied,
            last_membership: body.membership.clone(),
            snapshot_id: format!("{}-{}", body.last_applied.map_or(0, |l| l.index), self.id),
        };
        // openraft reads only the meta of a snapshot it had built: the
        // bytes are made when they are kept on disk, else when a follower
        // asks (`get_current_snapshot`). Encoding them here regardless
        // cost a transient buffer of the registry's encoded size (90 MB at
        // 100k instances) on every snapshot.
        if self.disk.is_some() {
            let bytes = codec::encode(&body).map_err(io_error)?;
            persist(self.disk.as_ref(), &meta, bytes).await?;
        }
        *lock(&self.current) = Some(StoredSnapshot {
            meta: meta.clone(),
            body: Arc::new(body),
        });
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Batch, Joined};
    use super::*;
    use crate::config::ValidConfig;
    use openraft::{CommittedLeaderId, Membership};
    use understudy_core::{Command, InstanceSpec, Op, Owner, ServiceKey};

    fn entry(index: u64, commands: Vec<Command>) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Arc::new(super::super::Batch {
                origin: 1,
                seq: index,
                commands,
                stamp_ms: 0,
                joined: Vec::new(),
            })),
        }
    }

    fn register(port: u16) -> Command {
        Command::new(
            0,
            Op::Register {
                service: ServiceKey::parse("", "", "svc").unwrap(),
                owner: Owner::Persistent {
                    ip: "10.0.0.1".into(),
                    port,
                },
                instances: vec![InstanceSpec::new("10.0.0.1", port)],
            },
        )
    }

    fn machine(node_id: NodeId, waiters: Waiters) -> (StateMachine, Arc<State>) {
        let state = Arc::new(State::new(&ValidConfig::default()));
        let machine = StateMachine::new(node_id, state.clone(), Clock::starting_at(0), waiters);
        (machine, state)
    }

    #[tokio::test]
    async fn an_applied_batch_answers_its_own_proposer_and_no_one_else() {
        let waiters = Waiters::default();
        let (mut machine, state) = machine(1, waiters.clone());
        let mine = waiters.register(1);
        let answers = machine
            .apply(vec![entry(1, vec![register(1), register(2)])])
            .await
            .unwrap();
        assert_eq!(answers, vec![BatchApplied { commands: 2 }]);
        let results = mine.await.unwrap();
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(state.registry().counts().instances, 2);
        // Another node's batch is applied, but nobody here waits for it.
        let (mut other, _) = machine_on(2);
        let mut theirs = waiters.register(2);
        other
            .apply(vec![entry(2, vec![register(3)])])
            .await
            .unwrap();
        assert!(
            matches!(theirs.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
            "no result here for a batch applied by another node's machine"
        );
    }

    #[tokio::test]
    async fn each_joined_proposer_takes_its_own_commands_results() {
        let waiters = Waiters::default();
        // Node 2 forwarded two commands (its seq 7) into leader 1's entry
        // after one of the leader's own (seq 3), and node 3 one (seq 9).
        let (mut machine, _) = machine(2, waiters.clone());
        let (mine, leaders) = (waiters.register(7), waiters.register(3));
        let mut batch = Batch {
            origin: 1,
            seq: 3,
            commands: (1..=4).map(register).collect(),
            stamp_ms: 0,
            joined: vec![
                Joined {
                    origin: 2,
                    seq: 7,
                    count: 2,
                },
                Joined {
                    origin: 3,
                    seq: 9,
                    count: 1,
                },
            ],
        };
        // The same port twice: the second of node 2's two is a change.
        batch.commands[2] = register(2);
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Normal(Arc::new(batch)),
        };
        machine.apply(vec![entry]).await.unwrap();
        let results = mine.await.unwrap();
        assert_eq!(results.len(), 2, "node 2 takes its two results");
        let ports: Vec<u16> = results
            .iter()
            .flat_map(|r| r.as_ref().unwrap())
            .map(|change| match &change.event {
                understudy_core::Event::InstanceAdded { instance, .. }
                | understudy_core::Event::InstanceChanged { instance, .. } => instance.port,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            ports,
            vec![2],
            "the first registers port 2, the second changes nothing"
        );
        let mut leaders = leaders;
        assert!(
            leaders.try_recv().is_err(),
            "the leader's part is for node 1's machine, not this one"
        );
    }

    fn machine_on(node_id: NodeId) -> (StateMachine, Arc<State>) {
        machine(node_id, Waiters::default())
    }

    #[tokio::test]
    async fn a_snapshot_rebuilds_the_registry_elsewhere_and_tells_watchers_to_start_over() {
        let (mut source, state) = machine_on(1);
        let membership = Membership::new(vec![std::collections::BTreeSet::from([1])], None);
        source
            .apply(vec![Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
                payload: EntryPayload::Membership(membership),
            }])
            .await
            .unwrap();
        source
            .apply((2..12).map(|i| entry(i, vec![register(i as u16)])))
            .await
            .unwrap();
        let mut builder = source.get_snapshot_builder().await;
        let snapshot = builder.build_snapshot().await.unwrap();
        assert_eq!(snapshot.meta.last_log_id.map(|l| l.index), Some(11));
        assert!(
            builder.build_snapshot().await.is_err(),
            "a builder builds once"
        );

        // A node in memory encodes its snapshot only when a follower asks
        // for it: what it sends is the current snapshot.
        let sent = source.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(sent.meta, snapshot.meta);

        let (mut target, restored) = machine_on(2);
        let mut watcher = restored.watch_changes();
        target
            .install_snapshot(&sent.meta, sent.snapshot)
            .await
            .unwrap();
        assert_eq!(restored.registry().snapshot(), state.registry().snapshot());
        let (applied, membership) = target.applied_state().await.unwrap();
        assert_eq!(applied.map(|l| l.index), Some(11));
        assert_eq!(membership.voter_ids().collect::<Vec<_>>(), vec![1]);
        let signal = watcher.try_recv().unwrap();
        assert!(signal.is_empty(), "an empty batch means start over");
        let current = target.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, snapshot.meta);
    }

    #[tokio::test]
    async fn a_snapshot_of_another_format_is_refused_and_changes_nothing() {
        let (mut target, state) = machine_on(2);
        let meta = SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), 5)),
            last_membership: StoredMembership::default(),
            snapshot_id: "x".into(),
        };
        let mut bytes = codec::encode(&0u8).unwrap();
        bytes[0] = codec::FORMAT + 1;
        let refused = target
            .install_snapshot(&meta, Box::new(Cursor::new(bytes)))
            .await;
        assert!(refused.is_err());
        assert_eq!(target.applied_state().await.unwrap().0, None);
        assert_eq!(state.registry().counts().instances, 0);
    }

    #[tokio::test]
    async fn the_log_keeps_purged_and_truncated_ranges_straight() {
        let mut log = LogStore::default();
        let entries: Vec<_> = (1..=10)
            .map(|i| entry(i, vec![register(i as u16)]))
            .collect();
        {
            let mut inner = lock(&log.inner);
            for e in entries {
                inner.log.insert(e.log_id.index, e);
            }
        }
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 8))
            .await
            .unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 3))
            .await
            .unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(3));
        assert_eq!(state.last_log_id.map(|l| l.index), Some(7));
        let left: Vec<u64> = log
            .try_get_log_entries(0..100)
            .await
            .unwrap()
            .iter()
            .map(|e| e.log_id.index)
            .collect();
        assert_eq!(left, vec![4, 5, 6, 7]);
    }

    #[tokio::test]
    async fn a_durable_machine_keeps_its_snapshot_and_a_new_one_starts_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, loaded) = Disk::open(dir.path(), 1).unwrap();
        let (machine, state) = machine_on(1);
        let mut machine = machine.durable(disk, loaded.snapshot).unwrap();
        machine
            .apply((1..=5).map(|i| entry(i, vec![register(i as u16)])))
            .await
            .unwrap();
        let built = machine
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        drop(machine);

        let (disk, loaded) = Disk::open(dir.path(), 1).unwrap();
        let (fresh, restored) = machine_on(1);
        let mut restarted = fresh.durable(disk, loaded.snapshot).unwrap();
        assert_eq!(restored.registry().snapshot(), state.registry().snapshot());
        let (applied, _) = restarted.applied_state().await.unwrap();
        assert_eq!(applied.map(|l| l.index), Some(5));
        let current = restarted.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, built.meta);
    }
}
