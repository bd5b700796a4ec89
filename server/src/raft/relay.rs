//! The commit relay: pipelined delivery of committed entries over slow
//! links.
//!
//! openraft 0.9 keeps one append in flight per follower and tells a
//! follower that entries are committed only in its next append, so over a
//! link with one-way latency `L` a follower's view trails the leader by
//! two to three `L` — not the `L` a pipelined raft (etcd's, Consul's)
//! shows, and not the latency a chaos rig asked for. So the leader also
//! sends every entry it has applied to each follower behind an injected
//! delay, as a plain append carrying the leader's vote and commit point,
//! without waiting for the answer: messages leave as entries commit and
//! arrive one delay later, in order, with the link's own loss and cuts.
//!
//! It is safe because it only repeats committed entries the leader would
//! send anyway, with the real previous log id: a follower accepts one only
//! if its log matches up to there (raft's log matching), ignores what it
//! already holds, and refuses anything from a stale leader by its vote.
//! The leader never reads the answers; its own replication still decides
//! what is matched and committed. A lost or refused relay message costs
//! nothing but freshness until raft's stream fills the gap.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use openraft::raft::AppendEntriesRequest;
use openraft::{LogId, RaftLogReader, ServerState};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::network::Network;
use super::store::LogStore;
use super::{codec, Member, NodeId, Raft, TypeConfig};

/// Most entries one relay message carries.
const MAX_ENTRIES: u64 = 512;
/// Relay messages queued per follower before the relay starts over.
const QUEUE: usize = 256;
/// How long a relay delivery may take once its delay is served.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs the relay of the node whose raft, transport and log are given.
pub fn start(
    raft: Raft,
    network: Network,
    log: LogStore,
    tasks: &TaskTracker,
    cancel: CancellationToken,
) {
    let tracker = tasks.clone();
    tasks.spawn(run(raft, network, log, tracker, cancel));
}

struct Follower {
    /// The last log id queued for it.
    sent: Option<LogId<NodeId>>,
    queue: mpsc::Sender<(Instant, AppendEntriesRequest<TypeConfig>)>,
}

async fn run(
    raft: Raft,
    network: Network,
    mut log: LogStore,
    tasks: TaskTracker,
    cancel: CancellationToken,
) {
    let me = network.node_id();
    let mut metrics = raft.metrics();
    let mut followers: HashMap<NodeId, Follower> = HashMap::new();
    let mut term = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = metrics.changed() => if changed.is_err() { return },
        }
        // Metrics change on every apply: decide cheaply, under the borrow,
        // whether there is anything to relay before copying anything.
        let (vote, applied, matched, members) = {
            let m = metrics.borrow_and_update();
            let leading = m.state == ServerState::Leader
                && m.vote.is_committed()
                && m.vote.leader_id().voted_for() == Some(me);
            if !leading || term != Some(m.vote) {
                // A new term (or none): whatever was queued is moot.
                followers.clear();
                term = leading.then_some(m.vote);
                if !leading {
                    continue;
                }
            }
            let Some(applied) = m.last_applied else {
                continue;
            };
            let slow: Vec<(NodeId, Member)> = m
                .membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != me)
                .filter(|(id, _)| {
                    let link = network.faults().link(me, **id);
                    !link.cut && (!link.delay.is_zero() || !link.jitter.is_zero())
                })
                .map(|(id, member)| (*id, member.clone()))
                .collect();
            let matched: BTreeMap<NodeId, Option<LogId<NodeId>>> = if slow.is_empty() {
                BTreeMap::new()
            } else {
                m.replication.clone().unwrap_or_default()
            };
            (m.vote, applied, matched, slow)
        };
        // Followers over perfect or cut links get nothing relayed.
        followers.retain(|id, _| members.iter().any(|(m, _)| m == id));
        for (id, member) in members {
            let follower = followers.entry(id).or_insert_with(|| Follower {
                sent: None,
                queue: spawn_sender(&network, id, member, &tasks, cancel.clone()),
            });
            let known = matched.get(&id).copied().flatten();
            let prev = match (follower.sent, known) {
                (Some(sent), Some(known)) => Some(sent.max(known)),
                (sent, known) => sent.or(known),
            };
            // A follower raft has not matched yet gets nothing relayed.
            let Some(prev) = prev else { continue };
            if prev.index >= applied.index {
                continue;
            }
            let last = applied.index.min(prev.index + MAX_ENTRIES);
            let entries = match log.try_get_log_entries(prev.index + 1..=last).await {
                Ok(entries) => entries,
                Err(_) => continue,
            };
            // Purged meanwhile (raft sends a snapshot then): skip.
            if entries.first().map(|e| e.log_id.index) != Some(prev.index + 1) {
                continue;
            }
            let sent = entries.last().map(|e| e.log_id);
            let request = AppendEntriesRequest {
                vote,
                prev_log_id: Some(prev),
                entries,
                leader_commit: Some(applied),
            };
            if follower.queue.try_send((Instant::now(), request)).is_ok() {
                follower.sent = sent;
            } else {
                // Behind by a whole queue: start over from what raft matched.
                follower.sent = None;
            }
        }
    }
}

/// The per-follower sender: each message waits its link delay from when
/// it was queued (in order: never before the one ahead of it), may be
/// lost or cut, and is then delivered.
fn spawn_sender(
    network: &Network,
    target: NodeId,
    member: Member,
    tasks: &TaskTracker,
    cancel: CancellationToken,
) -> mpsc::Sender<(Instant, AppendEntriesRequest<TypeConfig>)> {
    let (tx, mut rx) = mpsc::channel::<(Instant, AppendEntriesRequest<TypeConfig>)>(QUEUE);
    let network = network.clone();
    tasks.spawn(async move {
        let me = network.node_id();
        let mut not_before = Instant::now();
        loop {
            let (queued, request) = tokio::select! {
                _ = cancel.cancelled() => return,
                next = rx.recv() => match next {
                    Some(next) => next,
                    None => return,
                },
            };
            let Ok((delay, lost)) = network.faults().send(me, target) else {
                continue;
            };
            not_before = not_before.max(queued + delay);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(not_before) => {}
            }
            if lost || network.faults().admits(me, target).is_err() {
                continue;
            }
            let Ok(payload) = codec::encode(&request) else {
                continue;
            };
            if let Err(e) = network
                .deliver_append(target, &member, payload, DELIVERY_TIMEOUT)
                .await
            {
                tracing::trace!(target, error = %e, "relay message not delivered");
            }
        }
    });
    tx
}
