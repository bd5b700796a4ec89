//! [`Cluster`]: one service's call path. For each call: mock (if forced),
//! rate limit, concurrency limit, then the strategy, which for each
//! attempt routes the directory's current list, drops instances whose
//! breaker is open (never more than the ejection cap), lets the balancer
//! pick, and runs the caller's call under the attempt's timeout, feeding
//! the outcome back into the instance's statistics.
//!
//! The cluster owns its background tasks (failback retries): they stop
//! when [`Cluster::shutdown`] is called or the last handle is dropped.
//!
//! Its parts: [`builder`] assembles a cluster, `select` routes and picks
//! one target, `attempts` runs attempts and the strategies' loops.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::cluster::balance::LoadBalance;
use crate::cluster::breaker::BreakerRules;
use crate::cluster::limit::{ConcurrencyLimit, RateLimiter, RetryBudget};
use crate::cluster::route::Router;
use crate::cluster::stats::InstanceStats;
use crate::cluster::strategy::Strategy;
use crate::cluster::{CallFailure, ClusterError, Idempotency, Invocation, Target, ZONE};
use crate::{Directory, Instance};

mod attempts;
mod builder;
mod select;

pub use builder::ClusterBuilder;

/// What a call through the cluster came to.
#[derive(Debug)]
pub enum Outcome<T> {
    /// A provider answered.
    Answered {
        /// The answer.
        value: T,
        /// Who answered.
        instance: Arc<Instance>,
        /// Attempts made, the answering one included.
        attempts: u32,
    },
    /// The mock answered: always, or after `cause`.
    Mocked {
        /// The mock's answer.
        value: T,
        /// The failure that made the mock answer, if any.
        cause: Option<ClusterError>,
    },
    /// Failsafe: the call failed and the failure was swallowed.
    Ignored {
        /// The failure.
        error: ClusterError,
    },
    /// Failback: the call failed and is being retried in the background.
    Queued {
        /// The failure.
        error: ClusterError,
    },
}

impl<T> Outcome<T> {
    /// The answer, from a provider or the mock.
    pub fn value(self) -> Option<T> {
        match self {
            Outcome::Answered { value, .. } | Outcome::Mocked { value, .. } => Some(value),
            Outcome::Ignored { .. } | Outcome::Queued { .. } => None,
        }
    }

    /// The instance that answered.
    pub fn instance(&self) -> Option<&Arc<Instance>> {
        match self {
            Outcome::Answered { instance, .. } => Some(instance),
            _ => None,
        }
    }
}

/// When the mock answers instead of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mock {
    /// Always: no provider is called (Dubbo's `force:`).
    Always,
    /// After a failure that is not the provider's own answer (Dubbo's
    /// `fail:`): no provider, timeout, open circuit, limit, budget.
    OnFailure,
}

/// Counters of one cluster, as [`Cluster::metrics`] reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Calls made.
    pub calls: u64,
    /// Calls a provider answered.
    pub answered: u64,
    /// Calls that failed (mocked, ignored and queued ones included).
    pub failed: u64,
    /// Attempts made, first ones and retries.
    pub attempts: u64,
    /// Retries made.
    pub retries: u64,
    /// Cross-zone attempts of the zone-aware strategy.
    pub cross_zone: u64,
    /// Retries refused by the retry budget.
    pub budget_exhausted: u64,
    /// Calls refused by a limit.
    pub limited: u64,
    /// Calls answered by the mock.
    pub mocked: u64,
    /// Failback retries queued, and those that then succeeded or gave up.
    pub failback_queued: u64,
    /// Failback retries that succeeded.
    pub failback_recovered: u64,
    /// Failback retries that gave up.
    pub failback_abandoned: u64,
    /// Routing decisions: (router, zone, reason) and how often.
    pub decisions: BTreeMap<(String, String, String), u64>,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    calls: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    pub(super) cross_zone: AtomicU64,
    budget_exhausted: AtomicU64,
    limited: AtomicU64,
    mocked: AtomicU64,
    failback_queued: AtomicU64,
    failback_recovered: AtomicU64,
    failback_abandoned: AtomicU64,
    decisions: Mutex<BTreeMap<(String, String, String), u64>>,
}

pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The current targets and the statistics of every listed instance.
#[derive(Debug, Default)]
struct Table {
    /// Whether a non-empty list was seen: instances in the first one count
    /// as warm, later arrivals warm up.
    seeded: bool,
    list: Option<Arc<[Instance]>>,
    targets: Arc<[Target]>,
    stats: HashMap<(String, u16, String), Arc<InstanceStats>>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) service: String,
    local_zone: Option<String>,
    routers: Vec<Arc<dyn Router>>,
    balancer: Arc<dyn LoadBalance>,
    strategy: Strategy,
    timeout: Duration,
    deadline: Option<Duration>,
    breaker: BreakerRules,
    max_ejection: f64,
    concurrency: Option<ConcurrencyLimit>,
    rate: Option<RateLimiter>,
    budget: RetryBudget,
    rng: Mutex<StdRng>,
    wall_clock: WallClock,
    source: Mutex<watch::Receiver<Arc<[Instance]>>>,
    /// The directory the list comes from, when built on one: it tells a
    /// service that does not exist from one with no instance.
    directory: Option<Directory>,
    table: Mutex<Table>,
    pub(super) counters: Counters,
    failback_slots: Arc<Semaphore>,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

/// One service's call path: routers, balancer, strategy, governance.
/// Cheap to clone; dropping the last handle stops its background tasks.
#[derive(Debug, Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
    _stop: Arc<DropGuard>,
}

/// Where an attempt may go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope<'a> {
    /// Wherever the routers say.
    Any,
    /// The caller's zone if it has instances, else anywhere.
    Local(&'a str),
    /// Any zone but the caller's; zone routers are bypassed.
    Across(&'a str),
}

/// Whether instances already tried may be picked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reuse {
    /// When every candidate was tried, try one again.
    Allowed,
    /// Never: fail with no provider instead.
    Never,
}

/// What a retry decision needs to know.
pub(super) fn retryable(error: &ClusterError, idempotency: Idempotency) -> bool {
    if error.is_application() {
        return false;
    }
    match idempotency {
        Idempotency::Idempotent => true,
        Idempotency::NotIdempotent => error.never_reached_provider(),
    }
}

/// Milliseconds since the Unix epoch, now: how provider start timestamps
/// (metadata `timestamp`, as Dubbo sets it) are turned into uptimes.
#[derive(Clone)]
pub(super) struct WallClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WallClock")
    }
}

pub(super) fn system_clock() -> WallClock {
    WallClock(Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }))
}

pub(super) fn same_instance(a: &Instance, b: &Instance) -> bool {
    a.ip == b.ip && a.port == b.port && a.cluster == b.cluster
}

impl Cluster {
    /// Starts building a cluster.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::new()
    }

    /// The service called.
    pub fn service(&self) -> &str {
        &self.inner.service
    }

    /// The current targets: healthy, enabled instances with their stats.
    pub fn targets(&self) -> Arc<[Target]> {
        self.inner.targets(Instant::now())
    }

    /// The cluster's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        let c = &self.inner.counters;
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            calls: read(&c.calls),
            answered: read(&c.answered),
            failed: read(&c.failed),
            attempts: read(&c.attempts),
            retries: read(&c.retries),
            cross_zone: read(&c.cross_zone),
            budget_exhausted: read(&c.budget_exhausted),
            limited: read(&c.limited),
            mocked: read(&c.mocked),
            failback_queued: read(&c.failback_queued),
            failback_recovered: read(&c.failback_recovered),
            failback_abandoned: read(&c.failback_abandoned),
            decisions: c
                .decisions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Calls the service: `call` is the caller's own call to one instance.
    pub async fn invoke<T, F, Fut>(
        &self,
        invocation: Invocation,
        call: F,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, CallFailure>> + Send + 'static,
        T: Send + 'static,
    {
        self.invoke_inner(invocation, call, None::<(Mock, fn(&Invocation) -> T)>)
            .await
    }

    /// Calls the service with a mock: `mock` answers always, or after a
    /// failure that is not the provider's own answer.
    pub async fn invoke_or_mock<T, F, Fut, M>(
        &self,
        invocation: Invocation,
        call: F,
        when: Mock,
        mock: M,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, CallFailure>> + Send + 'static,
        T: Send + 'static,
        M: FnOnce(&Invocation) -> T,
    {
        self.invoke_inner(invocation, call, Some((when, mock)))
            .await
    }

    async fn invoke_inner<T, F, Fut, M>(
        &self,
        invocation: Invocation,
        call: F,
        mock: Option<(Mock, M)>,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, CallFailure>> + Send + 'static,
        T: Send + 'static,
        M: FnOnce(&Invocation) -> T,
    {
        let inner = &self.inner;
        let span = tracing::info_span!(
            "invoke",
            service = %inner.service,
            method = %invocation.method,
            strategy = inner.strategy.name(),
            zone = tracing::field::Empty,
            reason = tracing::field::Empty,
            instance = tracing::field::Empty,
            attempts = tracing::field::Empty,
        );
        bump(&inner.counters.calls);
        if let Some((Mock::Always, mock)) = mock {
            bump(&inner.counters.mocked);
            return Ok(Outcome::Mocked {
                value: mock(&invocation),
                cause: None,
            });
        }
        let result = self
            .clone()
            .run(invocation.clone(), call)
            .instrument(span.clone())
            .await;
        let counters = &inner.counters;
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => {
                bump(&counters.failed);
                let (outcome, label) = match mock {
                    Some((Mock::OnFailure, mock)) if !error.is_application() => {
                        bump(&counters.mocked);
                        let value = mock(&invocation);
                        (
                            Ok(Outcome::Mocked {
                                value,
                                cause: Some(error),
                            }),
                            "mocked",
                        )
                    }
                    _ => (Err(error), "failed"),
                };
                metrics::counter!("understudy_client_calls_total",
                    "service" => inner.service.clone(), "outcome" => label)
                .increment(1);
                return outcome;
            }
        };
        let label = match &outcome {
            Outcome::Answered {
                instance, attempts, ..
            } => {
                bump(&counters.answered);
                span.record("instance", format!("{}:{}", instance.ip, instance.port));
                span.record("attempts", attempts);
                "answered"
            }
            Outcome::Ignored { .. } => {
                bump(&counters.failed);
                "ignored"
            }
            Outcome::Queued { .. } => {
                bump(&counters.failed);
                "queued"
            }
            Outcome::Mocked { .. } => "mocked",
        };
        metrics::counter!("understudy_client_calls_total",
            "service" => inner.service.clone(), "outcome" => label)
        .increment(1);
        Ok(outcome)
    }

    /// Limits, then the strategy, within the call's deadline if it has
    /// one.
    async fn run<T, F, Fut>(self, inv: Invocation, call: F) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, CallFailure>> + Send + 'static,
        T: Send + 'static,
    {
        match inv.deadline.or(self.inner.deadline) {
            None => self.limited_strategy(inv, call).await,
            Some(deadline) => {
                let method = inv.method.clone();
                tokio::time::timeout(deadline, self.limited_strategy(inv, call))
                    .await
                    .unwrap_or(Err(ClusterError::DeadlineExceeded { method, deadline }))
            }
        }
    }

    async fn limited_strategy<T, F, Fut>(
        self,
        inv: Invocation,
        call: F,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, CallFailure>> + Send + 'static,
        T: Send + 'static,
    {
        let inner = &self.inner;
        let timeout = inv.timeout.unwrap_or(inner.timeout);
        if let Some(rate) = &inner.rate {
            rate.try_acquire(&inv.method, Instant::now())
                .map_err(|limit| inner.limited(&inv, limit))?;
        }
        let _permit = match &inner.concurrency {
            Some(limit) => Some(
                limit
                    .acquire(&inv.method, timeout)
                    .await
                    .map_err(|l| inner.limited(&inv, l))?,
            ),
            None => None,
        };
        inner.budget.deposit(Instant::now());
        match inner.strategy.clone() {
            Strategy::Failover { retries } => inner.failover(&inv, &call, retries, timeout).await,
            Strategy::Failfast => inner.failover(&inv, &call, 0, timeout).await,
            Strategy::Failsafe => match inner.failover(&inv, &call, 0, timeout).await {
                Err(error) => Ok(Outcome::Ignored { error }),
                ok => ok,
            },
            Strategy::Failback {
                interval, attempts, ..
            } => match inner.failover(&inv, &call, 0, timeout).await {
                Err(error) if attempts > 0 && retryable(&error, inv.idempotency) => {
                    self.queue_failback(inv, call, timeout, interval, attempts, error)
                }
                other => other,
            },
            Strategy::Forking { parallel } => {
                let parallel = match inv.idempotency {
                    Idempotency::Idempotent => parallel,
                    Idempotency::NotIdempotent => 1,
                };
                inner.forking(&inv, &call, parallel, timeout).await
            }
            Strategy::Broadcast => inner.broadcast(&inv, &call, timeout).await,
            Strategy::Available => inner.available(&inv, &call, timeout).await,
            Strategy::ZoneAware {
                local_timeout,
                cross_timeout,
                local_retries,
            } => {
                inner
                    .zone_aware(&inv, &call, local_timeout, cross_timeout, local_retries)
                    .await
            }
        }
    }

    /// Queues a failed call for background retries, or hands the failure
    /// back when the queue is full.
    fn queue_failback<T, F, Fut>(
        &self,
        inv: Invocation,
        call: F,
        timeout: Duration,
        interval: Duration,
        attempts: u32,
        error: ClusterError,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, CallFailure>> + Send + 'static,
        T: Send + 'static,
    {
        let Ok(slot) = self.inner.failback_slots.clone().try_acquire_owned() else {
            tracing::warn!(service = %self.inner.service, method = %inv.method,
                "failback queue full; the failure goes back to the caller");
            return Err(error);
        };
        bump(&self.inner.counters.failback_queued);
        let inner = self.inner.clone();
        let cancel = inner.cancel.clone();
        self.inner.tasks.spawn(async move {
            let _slot = slot;
            for attempt in 1..=attempts {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(interval) => {}
                }
                if !inner.budget.withdraw(Instant::now()) {
                    bump(&inner.counters.budget_exhausted);
                    continue;
                }
                bump(&inner.counters.retries);
                match inner.failover(&inv, &call, 0, timeout).await {
                    Ok(_) => {
                        bump(&inner.counters.failback_recovered);
                        return;
                    }
                    Err(e) if retryable(&e, inv.idempotency) && attempt < attempts => {
                        tracing::debug!(method = %inv.method, error = %e, "failback retry failed");
                    }
                    Err(e) => {
                        tracing::warn!(method = %inv.method, error = %e, "failback gave up");
                        break;
                    }
                }
            }
            bump(&inner.counters.failback_abandoned);
        });
        Ok(Outcome::Queued { error })
    }

    /// Stops the background retries and waits for them.
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

impl Inner {
    fn limited(&self, inv: &Invocation, limit: super::LimitKind) -> ClusterError {
        bump(&self.counters.limited);
        ClusterError::LimitExceeded {
            method: inv.method.clone(),
            limit,
        }
    }

    pub(super) fn caller_zone<'a>(&'a self, inv: &'a Invocation) -> Option<&'a str> {
        inv.attachment(ZONE).or(self.local_zone.as_deref())
    }
}
