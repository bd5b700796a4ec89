//! What the registry and the consumers' directories showed, and when: the
//! ground truth the consumer report is judged against.
//!
//! - [`RegistryTimeline`]: a native watch of the serving service on every
//!   registry node. Every change carries its revision, the same on every
//!   node; the first time any node shows a revision is when "the leader's
//!   view" (the first node to apply, which is the leader) reached it. So
//!   whether an instance had been removed by an instant is read from the
//!   last change of it whose revision had been shown by then.
//! - [`DirectoryLog`]: when each instance left and came back in one
//!   consumer's directory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_client::Directory;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, ResumeToken, WatchRequest};

use crate::lock;
use crate::provider::SERVING;

#[derive(Debug, Default)]
struct Timeline {
    /// Per `ip:port`, its presence changes in revision order.
    changes: HashMap<String, BTreeMap<u64, bool>>,
    /// When some node first showed each revision.
    shown: BTreeMap<u64, Instant>,
}

/// The serving service as the registry's nodes applied it.
#[derive(Debug, Clone, Default)]
pub(crate) struct RegistryTimeline {
    timeline: Arc<Mutex<Timeline>>,
}

impl RegistryTimeline {
    /// Watches the serving service on each node until `stop`.
    pub(crate) fn watch(
        nodes: &[SocketAddr],
        stop: &CancellationToken,
        tasks: &TaskTracker,
    ) -> Self {
        let this = Self::default();
        for grpc in nodes {
            tasks.spawn(follow(*grpc, this.clone(), stop.clone()));
        }
        this
    }

    fn record(
        &self,
        revision: u64,
        at: Instant,
        presence: impl IntoIterator<Item = (String, bool)>,
    ) {
        let mut t = lock(&self.timeline);
        let first = t.shown.entry(revision).or_insert(at);
        if at < *first {
            *first = at;
        }
        for (key, present) in presence {
            t.changes.entry(key).or_default().insert(revision, present);
        }
    }

    /// Whether the leader's view had removed `key` by `at` (it listed it
    /// once, and its last change shown by then took it away).
    pub(crate) fn removed(&self, key: &str, at: Instant) -> bool {
        let t = lock(&self.timeline);
        let Some(changes) = t.changes.get(key) else {
            return false;
        };
        changes
            .iter()
            .rev()
            .find(|(revision, _)| t.shown.get(revision).is_some_and(|shown| *shown <= at))
            .is_some_and(|(_, present)| !*present)
    }

    /// When the leader's view first removed `key` at or after `from`, and
    /// when it next listed it again after that.
    pub(crate) fn removal_after(
        &self,
        key: &str,
        from: Instant,
    ) -> (Option<Instant>, Option<Instant>) {
        let t = lock(&self.timeline);
        let Some(changes) = t.changes.get(key) else {
            return (None, None);
        };
        let mut timed: Vec<(Instant, bool)> = changes
            .iter()
            .filter_map(|(revision, present)| t.shown.get(revision).map(|at| (*at, *present)))
            .collect();
        timed.sort_by_key(|(at, _)| *at);
        let removed = timed
            .iter()
            .find(|(at, present)| *at >= from && !*present)
            .map(|(at, _)| *at);
        let returned = removed.and_then(|gone| {
            timed
                .iter()
                .find(|(at, present)| *at > gone && *present)
                .map(|(at, _)| *at)
        });
        (removed, returned)
    }
}

/// Follows the serving service on one node, reconnecting with its token
/// (a killed node just stops answering).
async fn follow(grpc: SocketAddr, timeline: RegistryTimeline, stop: CancellationToken) {
    let mut token: Option<ResumeToken> = None;
    let mut listed: BTreeSet<String> = BTreeSet::new();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let request = WatchRequest {
            service: SERVING.to_owned(),
            resume: token.clone(),
            ..WatchRequest::default()
        };
        let stream = async {
            let mut client = RegistryClient::connect(format!("http://{grpc}"))
                .await
                .ok()?;
            client.watch(request).await.ok().map(|r| r.into_inner())
        };
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            stream = tokio::time::timeout(Duration::from_secs(2), stream) => stream.ok().flatten(),
        };
        let Some(mut stream) = stream else {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(200)) => continue,
            }
        };
        let mut resetting: Option<BTreeSet<String>> = None;
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                event = stream.next() => event,
            };
            let Some(Ok(event)) = event else { break };
            let now = Instant::now();
            let revision = event.token.as_ref().map_or(0, |t| t.revision);
            let key = |ip: &str, port: u32| format!("{ip}:{port}");
            match event.event {
                Some(watch_event::Event::Reset(reset)) => {
                    let set = resetting.get_or_insert_with(BTreeSet::new);
                    for state in &reset.services {
                        set.extend(state.instances.iter().map(|i| key(&i.ip, i.port)));
                    }
                    if reset.last {
                        let set = resetting.take().unwrap_or_default();
                        let presence: Vec<(String, bool)> = listed
                            .union(&set)
                            .map(|k| (k.clone(), set.contains(k)))
                            .collect();
                        timeline.record(revision, now, presence);
                        listed = set;
                    }
                }
                Some(watch_event::Event::Change(c)) => match c.kind {
                    Some(change::Kind::Upsert(i)) => {
                        // A disabled or unhealthy instance is not offered.
                        let offered = i.enabled && i.healthy;
                        let k = key(&i.ip, i.port);
                        if offered {
                            listed.insert(k.clone());
                        } else {
                            listed.remove(&k);
                        }
                        timeline.record(revision, now, [(k, offered)]);
                    }
                    Some(change::Kind::Removed(r)) => {
                        if let Some(i) = r.instance {
                            let k = key(&i.ip, i.port);
                            listed.remove(&k);
                            timeline.record(revision, now, [(k, false)]);
                        }
                    }
                    _ => {}
                },
                Some(watch_event::Event::Progress(_)) | None => {}
            }
            if event.token.is_some() && resetting.is_none() {
                token = event.token;
            }
        }
    }
}

/// Per `ip:port`, (when, listed) in time order.
type Listings = HashMap<String, Vec<(Instant, bool)>>;

/// When instances left and came back in one consumer's directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct DirectoryLog {
    changes: Arc<Mutex<Listings>>,
}

impl DirectoryLog {
    /// Follows `directory` until it goes away or `stop`.
    pub(crate) fn follow(
        directory: &Directory,
        stop: &CancellationToken,
        tasks: &TaskTracker,
    ) -> Self {
        let log = Self::default();
        let mut updates = directory.changes();
        let (this, stop) = (log.clone(), stop.clone());
        tasks.spawn(async move {
            let mut listed: BTreeSet<String> = BTreeSet::new();
            loop {
                let now = Instant::now();
                let set: BTreeSet<String> = updates
                    .borrow_and_update()
                    .iter()
                    .filter(|i| i.enabled && i.healthy)
                    .map(|i| format!("{}:{}", i.ip, i.port))
                    .collect();
                {
                    let mut changes = lock(&this.changes);
                    for gone in listed.difference(&set) {
                        changes.entry(gone.clone()).or_default().push((now, false));
                    }
                    for new in set.difference(&listed) {
                        changes.entry(new.clone()).or_default().push((now, true));
                    }
                }
                listed = set;
                tokio::select! {
                    () = stop.cancelled() => return,
                    changed = updates.changed() => if changed.is_err() { return },
                }
            }
        });
        log
    }

    /// When `key` first left the directory at or after `from`, if it was
    /// listed at `from`.
    pub(crate) fn left_after(&self, key: &str, from: Instant) -> Option<Instant> {
        let changes = lock(&self.changes);
        let changes = changes.get(key)?;
        let listed_then = changes
            .iter()
            .rev()
            .find(|(at, _)| *at <= from)
            .is_some_and(|(_, listed)| *listed);
        if !listed_then {
            return None;
        }
        changes
            .iter()
            .find(|(at, listed)| *at >= from && !*listed)
            .map(|(at, _)| *at)
    }
}
