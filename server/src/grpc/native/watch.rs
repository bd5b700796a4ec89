//! Native watches. A watch subscribes to the stream of applied changes
//! first, then reads its starting point under the registry's lock: a
//! snapshot at revision R (or, on resume, the logged changes after the
//! token), then forwards every later change with revision > R that
//! concerns it. A watcher that falls behind the bounded buffer gets a
//! fresh snapshot, never a gap.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use understudy_core::{
    Change, Event, GroupName, NamespaceId, Registry, Service, ServiceKey, ServiceName,
};
use understudy_proto::native::{
    self, change, watch_event, ResetReason, ResumeToken, WatchEvent, WatchRequest,
};

use super::{NativeApi, WatchStream};
use crate::auth::Identity;
use crate::node::Node;
use understudy_core::access::Action;

/// Largest `Reset` message: large snapshots stream in pieces, so neither
/// side holds one huge message and clients' default 4 MiB limit holds.
const RESET_CHUNK_BYTES: usize = 1 << 20;
/// Events buffered per watcher before its forwarder waits.
const WATCHER_BUFFER: usize = 32;

/// What a watch covers.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    namespace: NamespaceId,
    group: Option<GroupName>,
    service: Option<ServiceName>,
}

impl Scope {
    pub(crate) fn parse(request: &WatchRequest) -> Result<Self, tonic::Status> {
        let invalid = |e: understudy_core::Error| tonic::Status::invalid_argument(e.to_string());
        let namespace = NamespaceId::parse(&request.namespace).map_err(invalid)?;
        let group = match request.group.trim() {
            "" if request.service.is_empty() => None,
            raw => Some(GroupName::parse(raw).map_err(invalid)?),
        };
        let service = match request.service.as_str() {
            "" => None,
            raw => Some(ServiceName::parse(raw).map_err(invalid)?),
        };
        Ok(Self {
            namespace,
            group,
            service,
        })
    }

    /// The resource it reads, for the permission check.
    fn resource(&self) -> String {
        understudy_core::access::naming_resource(
            self.namespace.as_str(),
            self.group.as_ref().map_or("", GroupName::as_str),
            self.service.as_ref().map_or("", ServiceName::as_str),
        )
    }

    fn single(&self) -> Option<ServiceKey> {
        let name = self.service.clone()?;
        Some(ServiceKey::new(
            self.namespace.clone(),
            self.group.clone().unwrap_or_else(GroupName::default_group),
            name,
        ))
    }

    fn covers(&self, key: &ServiceKey) -> bool {
        key.namespace == self.namespace
            && self.group.as_ref().is_none_or(|g| *g == key.group)
            && self.service.as_ref().is_none_or(|s| *s == key.name)
    }

    fn services(&self, registry: &Registry) -> Vec<Arc<Service>> {
        match self.single() {
            Some(key) => registry.service(&key).into_iter().collect(),
            None => registry
                .services(&self.namespace, self.group.as_ref())
                .cloned()
                .collect(),
        }
    }
}

fn token(node: &Node, revision: u64) -> ResumeToken {
    ResumeToken {
        cluster_id: node.state().cluster_id().to_string(),
        revision,
    }
}

/// Tracks instance counts so a removal can say it emptied its service.
#[derive(Debug, Default)]
struct Counts(HashMap<ServiceKey, usize>);

impl Counts {
    fn from_services(services: &[Arc<Service>]) -> Self {
        Self(
            services
                .iter()
                .map(|s| (s.key().clone(), s.instances().len()))
                .collect(),
        )
    }

    /// Renders a change, updating the counts; `None` for changes the
    /// native API does not show (service metadata, namespaces, configs).
    fn render(&mut self, change: &Change) -> Option<native::Change> {
        let (service, kind) = match &change.event {
            Event::InstanceAdded { service, instance } => {
                *self.0.entry(service.clone()).or_default() += 1;
                (
                    service,
                    change::Kind::Upsert(native::Instance::of(service, instance)),
                )
            }
            Event::InstanceChanged { service, instance } => (
                service,
                change::Kind::Upsert(native::Instance::of(service, instance)),
            ),
            Event::InstanceRemoved {
                service,
                instance,
                cause,
            } => {
                let count = self.0.entry(service.clone()).or_default();
                *count = count.saturating_sub(1);
                (
                    service,
                    change::Kind::Removed(native::InstanceRemoved {
                        instance: Some(native::Instance::of(service, instance)),
                        cause: native::RemovalCause::from(*cause).into(),
                        emptied: *count == 0,
                    }),
                )
            }
            Event::ServiceCreated { service, .. } => {
                self.0.insert(service.clone(), 0);
                (service, change::Kind::Created(true))
            }
            Event::ServiceRemoved { service } => {
                self.0.remove(service);
                (service, change::Kind::DoesNotExist(true))
            }
            _ => return None,
        };
        Some(native::Change {
            service: Some(native::ServiceRef::from(service)),
            kind: Some(kind),
        })
    }

    /// Walks the counts back over changes already applied, so a resumed
    /// watch counts as of its token.
    fn unapply(&mut self, change: &Change) {
        match &change.event {
            Event::InstanceAdded { service, .. } => {
                let count = self.0.entry(service.clone()).or_default();
                *count = count.saturating_sub(1);
            }
            Event::InstanceRemoved { service, .. } => {
                *self.0.entry(service.clone()).or_default() += 1
            }
            _ => {}
        }
    }
}

type Outbox = mpsc::Sender<Result<WatchEvent, tonic::Status>>;

/// A snapshot to send: the services (shared, not copied) at a revision.
/// It is rendered into `Reset` messages one chunk at a time while
/// sending, so a view of many services streams in bounded memory.
struct Snapshot {
    services: Vec<Arc<Service>>,
    revision: u64,
    reason: ResetReason,
    exists: bool,
}

impl Snapshot {
    async fn send(self, node: &Node, tx: &Outbox) -> Result<(), ()> {
        metrics::counter!("understudy_watch_snapshots_total", "reason" => self.reason.as_str_name())
            .increment(1);
        let reset = |services, last| WatchEvent {
            token: Some(token(node, self.revision)),
            event: Some(watch_event::Event::Reset(native::Reset {
                services,
                reason: self.reason.into(),
                exists: self.exists,
                last,
            })),
        };
        let started = std::time::Instant::now();
        let (services, mut messages, mut bytes) = (self.services.len(), 1_usize, 0_usize);
        let mut chunk: Vec<native::ServiceState> = Vec::new();
        let mut size = 0;
        for service in &self.services {
            let state = native::ServiceState {
                service: Some(native::ServiceRef::from(service.key())),
                instances: service
                    .instances()
                    .map(|i| native::Instance::of(service.key(), i))
                    .collect(),
            };
            // The state as a field of the Reset: tag, length, body.
            let body = prost::Message::encoded_len(&state);
            let len = 1 + prost::length_delimiter_len(body) + body;
            // Leave room for the Reset's other fields.
            if size + len > RESET_CHUNK_BYTES - 64 && !chunk.is_empty() {
                tx.send(Ok(reset(std::mem::take(&mut chunk), false)))
                    .await
                    .map_err(|_| ())?;
                bytes += size;
                size = 0;
                messages += 1;
                if messages % 100 == 0 {
                    tracing::info!(messages, bytes, services, "sending a large watch snapshot");
                }
            }
            size += len;
            chunk.push(state);
        }
        tx.send(Ok(reset(chunk, true))).await.map_err(|_| ())?;
        if messages > 1 {
            tracing::info!(
                services,
                messages,
                bytes = bytes + size,
                took_ms = started.elapsed().as_millis() as u64,
                "sent a watch snapshot in several messages"
            );
        }
        Ok(())
    }
}

/// A snapshot of what `scope` covers, and the instance counts with it.
/// A fresh snapshot for a watcher that cannot continue from its revision;
/// its per-service counts start over with it.
fn start_over(node: &Node, scope: &Scope, reason: ResetReason, counts: &mut Counts) -> Snapshot {
    let registry = node.registry();
    let (snapshot, fresh) = reset(scope, &registry, reason);
    *counts = fresh;
    snapshot
}

fn reset(scope: &Scope, registry: &Registry, reason: ResetReason) -> (Snapshot, Counts) {
    let services = scope.services(registry);
    let counts = Counts::from_services(&services);
    let exists = scope.single().is_none() || !services.is_empty();
    let snapshot = Snapshot {
        services,
        revision: registry.revision(),
        reason,
        exists,
    };
    (snapshot, counts)
}

/// Where a watch starts: a snapshot or the changes missed since a resume
/// token, the revision that brings it to, and the counts as of then.
struct Start {
    snapshot: Option<Snapshot>,
    missed: Vec<WatchEvent>,
    revision: u64,
    counts: Counts,
}

/// How long a watch resuming from a revision this node has not applied yet
/// waits for it to catch up (a watcher moved from a node that was ahead).
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits, up to [`CATCH_UP`], until this node has applied the revision of
/// a resume token of its own cluster (learning which cluster that is first,
/// if it has applied nothing yet), so a watcher that moves to a node that
/// is behind resumes there instead of going back to an older snapshot.
/// Still behind then, the watch is refused as `UNAVAILABLE`: the watcher
/// keeps its list and tries again, here or elsewhere; an older state would
/// bring back instances that are gone and drop ones that were added.
#[allow(clippy::result_large_err)] // tonic's error type
async fn catch_up(node: &Node, resume: &ResumeToken) -> Result<(), tonic::Status> {
    let mut changes = node.state().watch_changes();
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let state = node.state();
        let applied = node.registry().revision();
        let behind = if state.cluster_known() {
            *resume.cluster_id == *state.cluster_id() && applied < resume.revision
        } else {
            true
        };
        if !behind {
            return Ok(());
        }
        let refuse = || {
            tonic::Status::unavailable(format!(
                "resume.revision: this node has applied revision {applied}, behind the watcher's {} after {CATCH_UP:?}; try again or another node",
                resume.revision
            ))
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(refuse());
        }
        // Ticks change no revision: poll as well as listen.
        let wake = tokio::time::Instant::now() + std::time::Duration::from_millis(50);
        if let Ok(Err(RecvError::Closed)) =
            tokio::time::timeout_at(deadline.min(wake), changes.recv()).await
        {
            return Err(refuse());
        }
    }
}

fn start(node: &Node, scope: &Scope, resume: Option<&ResumeToken>) -> Start {
    let registry = node.registry();
    let revision = registry.revision();
    let from_snapshot = |reason| {
        let (snapshot, counts) = reset(scope, &registry, reason);
        Start {
            snapshot: Some(snapshot),
            missed: Vec::new(),
            revision,
            counts,
        }
    };
    let resumable = resume.filter(|t| *t.cluster_id == *node.state().cluster_id());
    let Some(resume) = resumable else {
        return from_snapshot(if resume.is_some() {
            ResetReason::HistoryUnavailable
        } else {
            ResetReason::Initial
        });
    };
    let Ok(logged) = registry.changes_since(resume.revision) else {
        return from_snapshot(ResetReason::HistoryUnavailable);
    };
    let missed: Vec<Change> = logged
        .filter(|c| c.event.service().is_some_and(|k| scope.covers(k)))
        .collect();
    let mut counts = Counts::from_services(&scope.services(&registry));
    for change in missed.iter().rev() {
        counts.unapply(change);
    }
    let missed = missed
        .iter()
        .filter_map(|c| {
            counts.render(c).map(|change| WatchEvent {
                token: Some(token(node, c.revision)),
                event: Some(watch_event::Event::Change(change)),
            })
        })
        .collect();
    Start {
        snapshot: None,
        missed,
        revision,
        counts,
    }
}

/// The shortest progress interval a watcher may ask for.
const MIN_PROGRESS: std::time::Duration = std::time::Duration::from_millis(100);

/// A progress event at `revision`: every change the watch covers up to it
/// has been sent.
fn progress_event(node: &Node, revision: u64) -> WatchEvent {
    let config = node.config();
    WatchEvent {
        token: Some(token(node, revision)),
        event: Some(watch_event::Event::Progress(native::Progress {
            node_id: config.node_id,
            dc: config.dc.clone(),
            view_lag_ms: node.view().lag().map(|lag| lag.as_millis() as u64),
        })),
    }
}

impl NativeApi {
    pub(super) async fn open_watch(
        &self,
        request: tonic::Request<WatchRequest>,
        identity: Option<Identity>,
    ) -> Result<tonic::Response<WatchStream>, tonic::Status> {
        let max = self.node.config().grpc.max_watches_per_connection;
        let slot = match crate::grpc::connection(request.extensions()) {
            Some(conn) => Some(conn.open_watch(max).map_err(|open| {
                tonic::Status::resource_exhausted(format!(
                    "this connection has {open} watches open: over the limit of {max} (max_watches_per_connection)"
                ))
            })?),
            None => None,
        };
        let request = request.into_inner();
        let scope = Scope::parse(&request)?;
        let resource = scope.resource();
        self.permit(identity.as_ref(), resource.clone(), Action::Read)?;
        // A user limited by its roles is checked again before each change
        // is sent: deleted, or its permission revoked, its watch ends.
        let limited = identity.filter(|who| !who.bootstrap).map(|who| who.user);
        let progress_every = (request.progress_ms > 0).then(|| {
            std::time::Duration::from_millis(u64::from(request.progress_ms)).max(MIN_PROGRESS)
        });
        let node = self.node.clone();
        if let Some(resume) = &request.resume {
            catch_up(&node, resume).await?;
        }
        // Subscribe first, then read the starting point.
        let mut changes = node.state().watch_changes();
        let Start {
            snapshot,
            missed,
            mut revision,
            mut counts,
        } = start(&node, &scope, request.resume.as_ref());
        let (tx, rx) = mpsc::channel(WATCHER_BUFFER);
        metrics::gauge!("understudy_watches").increment(1.0);
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            let sent = metrics::counter!("understudy_watch_events_total");
            let forward = async {
                if let Some(snapshot) = snapshot {
                    snapshot.send(&node, &tx).await?;
                }
                sent.increment(missed.len() as u64);
                for event in missed {
                    tx.send(Ok(event)).await.map_err(|_| ())?;
                }
                let mut progress = progress_every.map(tokio::time::interval);
                let still_allowed = || {
                    limited.as_deref().is_none_or(|user| {
                        node.auth().still_allows(user, &resource, Action::Read)
                    })
                };
                let refused = || {
                    let user = limited.as_deref().unwrap_or_default();
                    Err(tonic::Status::permission_denied(format!(
                        "authorization failed! user '{user}' may no longer read {resource}"
                    )))
                };
                loop {
                    let tick = async {
                        match progress.as_mut() {
                            Some(interval) => interval.tick().await,
                            None => std::future::pending().await,
                        }
                    };
                    let received = tokio::select! {
                        received = changes.recv() => received,
                        // The first tick is at once: the watch is current.
                        _ = tick => {
                            tx.send(Ok(progress_event(&node, revision))).await.map_err(|_| ())?;
                            continue;
                        }
                        // The watcher went away.
                        () = tx.closed() => return Err(()),
                    };
                    match received {
                        // A fresh snapshot is as much a read as a change.
                        Ok(ref batch) if batch.is_empty() && !still_allowed() => {
                            tx.send(refused()).await.map_err(|_| ())?;
                            return Err(());
                        }
                        Err(RecvError::Lagged(_)) if !still_allowed() => {
                            tx.send(refused()).await.map_err(|_| ())?;
                            return Err(());
                        }
                        Ok(batch) if batch.is_empty() => {
                            // The registry was replaced by a raft snapshot:
                            // the changes in between will never be seen.
                            metrics::counter!("understudy_watch_resets_total", "reason" => "restored").increment(1);
                            let snapshot = start_over(
                                &node,
                                &scope,
                                ResetReason::HistoryUnavailable,
                                &mut counts,
                            );
                            revision = snapshot.revision;
                            snapshot.send(&node, &tx).await?;
                        }
                        Ok(batch) => {
                            let after = revision;
                            let covered = batch.iter().any(|c| {
                                c.revision > after
                                    && c.event.service().is_some_and(|k| scope.covers(k))
                            });
                            if covered && !still_allowed() {
                                tx.send(refused()).await.map_err(|_| ())?;
                                return Err(());
                            }
                            for change in batch.iter().filter(|c| c.revision > after) {
                                revision = change.revision;
                                if !change.event.service().is_some_and(|k| scope.covers(k)) {
                                    continue;
                                }
                                if let Some(rendered) = counts.render(change) {
                                    let event = WatchEvent {
                                        token: Some(token(&node, change.revision)),
                                        event: Some(watch_event::Event::Change(rendered)),
                                    };
                                    tx.send(Ok(event)).await.map_err(|_| ())?;
                                    sent.increment(1);
                                }
                            }
                        }
                        Err(RecvError::Lagged(_)) => {
                            // Too far behind to replay: start over from a snapshot.
                            metrics::counter!("understudy_watch_resets_total", "reason" => "fell_behind").increment(1);
                            let snapshot =
                                start_over(&node, &scope, ResetReason::FellBehind, &mut counts);
                            revision = snapshot.revision;
                            snapshot.send(&node, &tx).await?;
                        }
                        Err(RecvError::Closed) => return Err(()),
                    }
                }
            };
            tokio::select! {
                // The watcher went away or the node's history ended.
                ended = forward => {
                    let _: Result<(), ()> = ended;
                }
                // The node stops: the stream ends and the watcher resumes
                // elsewhere with its token.
                () = stop.cancelled() => {}
            }
            drop(slot);
            metrics::gauge!("understudy_watches").decrement(1.0);
        });
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}
