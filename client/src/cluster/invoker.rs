//! [`Cluster`]: one service's call path. For each call: mock (if forced),
//! rate limit, concurrency limit, then the strategy, which for each
//! attempt routes the directory's current list, drops instances whose
//! breaker is open (never more than the ejection cap), lets the balancer
//! pick, and runs the caller's call under the attempt's timeout, feeding
//! the outcome back into the instance's statistics.
//!
//! The cluster owns its background tasks (failback retries): they stop
//! when [`Cluster::shutdown`] is called or the last handle is dropped.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::balance::{LoadBalance, PickContext, WeightedRandom};
use super::breaker::BreakerRules;
use super::limit::{ConcurrencyLimit, RateLimiter, RetryBudget};
use super::route::{Decision, RouteContext, Router};
use super::stats::{InstanceStats, Sample};
use super::strategy::Strategy;
use super::{CallFailure, ClusterError, Idempotency, Invocation, Phase, Target, ZONE};
use crate::metadata::START_TIMESTAMP;
use crate::{ClientError, Directory, Instance};

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

/// Builds a [`Cluster`].
#[derive(Debug)]
pub struct ClusterBuilder {
    local_zone: Option<String>,
    routers: Vec<Arc<dyn Router>>,
    balancer: Arc<dyn LoadBalance>,
    strategy: Strategy,
    timeout: Duration,
    deadline: Option<Duration>,
    breaker: BreakerRules,
    max_ejection: f64,
    concurrency: Option<usize>,
    rate: Option<(u32, Duration)>,
    pub(super) budget: RetryBudget,
    seed: Option<u64>,
    wall_clock: WallClock,
}

/// Milliseconds since the Unix epoch, now: how provider start timestamps
/// (metadata `timestamp`, as Dubbo sets it) are turned into uptimes.
#[derive(Clone)]
struct WallClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WallClock")
    }
}

fn system_clock() -> WallClock {
    WallClock(Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }))
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self {
            local_zone: None,
            routers: Vec::new(),
            balancer: Arc::new(WeightedRandom::new()),
            strategy: Strategy::failover(),
            timeout: Duration::from_millis(1000),
            deadline: None,
            breaker: BreakerRules::default(),
            max_ejection: 0.5,
            concurrency: None,
            rate: None,
            budget: RetryBudget::default(),
            seed: None,
            wall_clock: system_clock(),
        }
    }
}

impl ClusterBuilder {
    /// Failover over weighted random, 1 s per attempt (Dubbo's defaults),
    /// the default breaker rules, at most half the instances ejected, the
    /// default retry budget, no limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// The caller's zone, used when a call has no `zone` attachment.
    pub fn local_zone(mut self, zone: impl Into<String>) -> Self {
        self.local_zone = Some(zone.into());
        self
    }

    /// Adds a router; routers run in the order added.
    pub fn router(mut self, router: impl Router + 'static) -> Self {
        self.routers.push(Arc::new(router));
        self
    }

    /// The load balancer.
    pub fn balancer(mut self, balancer: impl LoadBalance + 'static) -> Self {
        self.balancer = Arc::new(balancer);
        self
    }

    /// The cluster strategy.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Each attempt's timeout, unless the invocation sets one.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The whole call's deadline across its attempts, unless the
    /// invocation sets one (none by default, as in Dubbo, where
    /// failover(2) with a 3 s timeout may take 9 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The circuit breaker rules of every instance.
    pub fn breaker(mut self, rules: BreakerRules) -> Self {
        self.breaker = rules;
        self
    }

    /// The largest share (0..=1) of the routed instances that open breakers
    /// may remove; past it, the longest-open are let back in.
    pub fn max_ejection(mut self, share: f64) -> Self {
        self.max_ejection = share;
        self
    }

    /// At most `max` calls of one method in flight; more wait up to their
    /// timeout.
    pub fn concurrency_limit(mut self, max: usize) -> Self {
        self.concurrency = Some(max);
        self
    }

    /// At most `permits` calls of one method per sliding window `per`.
    pub fn rate_limit(mut self, permits: u32, per: Duration) -> Self {
        self.rate = Some((permits, per));
        self
    }

    /// The retry budget shared by every strategy.
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Seeds the RNG (balancers), so a run can be replayed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The wall clock in epoch milliseconds (the system's by default),
    /// against which providers' start timestamps are read.
    pub fn wall_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.wall_clock = WallClock(Arc::new(clock));
        self
    }

    /// A cluster over a directory's list. Must be called inside a tokio
    /// runtime.
    pub fn build(self, directory: &Directory) -> Result<Cluster, ClientError> {
        let service = directory.service().to_string();
        self.build_from(service, directory.changes(), Some(directory.clone()))
    }

    /// A cluster over any list of instances (tests, simulations, lists
    /// from elsewhere). Must be called inside a tokio runtime.
    pub fn build_on(
        self,
        service: impl Into<String>,
        instances: watch::Receiver<Arc<[Instance]>>,
    ) -> Result<Cluster, ClientError> {
        self.build_from(service.into(), instances, None)
    }

    fn build_from(
        self,
        service: String,
        instances: watch::Receiver<Arc<[Instance]>>,
        directory: Option<Directory>,
    ) -> Result<Cluster, ClientError> {
        let invalid = |message: &str| {
            Err(ClientError::Config {
                message: message.into(),
            })
        };
        if !(0.0..=1.0).contains(&self.max_ejection) {
            return invalid("max_ejection must lie in 0..=1");
        }
        if self.timeout.is_zero() {
            return invalid("timeout must be positive");
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return invalid("deadline must be positive");
        }
        if self.concurrency == Some(0) {
            return invalid("concurrency_limit must be at least 1");
        }
        if let Some((permits, per)) = self.rate {
            if permits == 0 || per.is_zero() {
                return invalid("rate_limit needs at least 1 permit and a positive window");
            }
        }
        match &self.strategy {
            Strategy::Forking { parallel: 0 } => return invalid("forking needs parallel >= 1"),
            Strategy::Failback { queue: 0, .. } => return invalid("failback needs a queue >= 1"),
            Strategy::ZoneAware {
                local_timeout,
                cross_timeout,
                ..
            } if local_timeout.is_zero() || cross_timeout.is_zero() => {
                return invalid("zone-aware timeouts must be positive")
            }
            _ => {}
        }
        let failback_slots = match self.strategy {
            Strategy::Failback { queue, .. } => queue,
            _ => 0,
        };
        let cancel = CancellationToken::new();
        let rng = match self.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let inner = Arc::new(Inner {
            service,
            local_zone: self.local_zone,
            routers: self.routers,
            balancer: self.balancer,
            strategy: self.strategy,
            timeout: self.timeout,
            deadline: self.deadline,
            breaker: self.breaker,
            max_ejection: self.max_ejection,
            concurrency: self.concurrency.map(ConcurrencyLimit::new),
            rate: self.rate.map(|(p, per)| RateLimiter::new(p, per)),
            budget: self.budget,
            rng: Mutex::new(rng),
            wall_clock: self.wall_clock,
            source: Mutex::new(instances),
            directory,
            table: Mutex::new(Table::default()),
            counters: Counters::default(),
            failback_slots: Arc::new(Semaphore::new(failback_slots)),
            tasks: TaskTracker::new(),
            cancel: cancel.clone(),
        });
        Ok(Cluster {
            inner,
            _stop: Arc::new(cancel.drop_guard()),
        })
    }
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

fn same_instance(a: &Instance, b: &Instance) -> bool {
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

    /// The healthy, enabled instances of the latest list, with stats.
    /// An instance warms up from its start timestamp when its metadata
    /// has one; otherwise those in the first list count as warm and later
    /// arrivals warm up from `now`, when they were first seen.
    fn targets(&self, now: Instant) -> Arc<[Target]> {
        let list = self
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .borrow()
            .clone();
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if table.list.as_ref().is_some_and(|l| Arc::ptr_eq(l, &list)) {
            return table.targets.clone();
        }
        let first = !table.seeded;
        table.seeded |= !list.is_empty();
        let mut stats = HashMap::with_capacity(list.len());
        let mut targets = Vec::with_capacity(list.len());
        let mut wall_now = None;
        for instance in list.iter() {
            let key = (instance.ip.clone(), instance.port, instance.cluster.clone());
            let s = table.stats.get(&key).cloned().unwrap_or_else(|| {
                let started = instance
                    .metadata
                    .get(START_TIMESTAMP)
                    .and_then(|t| t.parse::<u64>().ok());
                let warm_from = match started {
                    Some(started) => {
                        let wall = *wall_now.get_or_insert_with(|| (self.wall_clock.0)());
                        let up = Duration::from_millis(wall.saturating_sub(started));
                        // Up longer than this process's clock reaches: warm.
                        now.checked_sub(up)
                    }
                    None if first => None,
                    None => Some(now),
                };
                Arc::new(InstanceStats::with_rules(warm_from, self.breaker.clone()))
            });
            if instance.healthy && instance.enabled {
                targets.push(Target {
                    instance: Arc::new(instance.clone()),
                    stats: s.clone(),
                });
            }
            stats.insert(key, s);
        }
        table.stats = stats;
        table.targets = targets.into();
        table.list = Some(list);
        table.targets.clone()
    }

    /// Why the list is empty: a service that does not exist (a namespace
    /// or group mismatch, seed 000's other "no provider"), or one with no
    /// healthy, enabled instance.
    fn why_empty(&self) -> String {
        match &self.directory {
            Some(d) if d.exists() == Some(false) => {
                let key = d.service();
                format!(
                    "service {} does not exist in namespace {}, group {}",
                    key.name, key.namespace, key.group
                )
            }
            _ => "the directory lists no healthy, enabled instance".into(),
        }
    }

    pub(super) fn no_provider(&self, inv: &Invocation, reason: String) -> ClusterError {
        ClusterError::NoProvider {
            service: self.service.clone(),
            method: inv.method.clone(),
            reason,
        }
    }

    fn record_decisions(&self, decisions: &[Decision]) {
        if decisions.is_empty() {
            return;
        }
        let span = tracing::Span::current();
        let mut counted = self
            .counters
            .decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for d in decisions {
            let zone = d.zone.clone().unwrap_or_default();
            if d.zone.is_some() {
                span.record("zone", zone.as_str());
            }
            span.record("reason", d.reason);
            *counted
                .entry((d.router.to_owned(), zone.clone(), d.reason.to_owned()))
                .or_default() += 1;
            metrics::counter!("understudy_client_route_decisions_total",
                "service" => self.service.clone(), "router" => d.router,
                "zone" => zone, "reason" => d.reason)
            .increment(1);
        }
    }

    /// The routed candidates of one attempt.
    pub(super) fn route(
        &self,
        inv: &Invocation,
        scope: Scope<'_>,
        now: Instant,
    ) -> Result<Vec<Target>, ClusterError> {
        let all = self.targets(now);
        if all.is_empty() {
            return Err(self.no_provider(inv, self.why_empty()));
        }
        let mut targets: Vec<Target> = match scope {
            Scope::Any => all.to_vec(),
            Scope::Local(zone) => {
                let local: Vec<Target> = all.iter().filter(|t| t.zone() == zone).cloned().collect();
                if local.is_empty() {
                    all.to_vec()
                } else {
                    local
                }
            }
            Scope::Across(zone) => {
                let across: Vec<Target> =
                    all.iter().filter(|t| t.zone() != zone).cloned().collect();
                if across.is_empty() {
                    return Err(self.no_provider(
                        inv,
                        format!("no instance outside zone {zone} for the cross-zone attempt"),
                    ));
                }
                across
            }
        };
        let mut cx = RouteContext {
            now,
            local_zone: self.caller_zone(inv),
            decisions: Vec::new(),
        };
        for router in &self.routers {
            if matches!(scope, Scope::Across(_)) && router.bypassed_across() {
                continue;
            }
            targets = match router.route(targets, inv, &mut cx) {
                Ok(t) if t.is_empty() => {
                    let reason = format!("the {} router left no instance", router.name());
                    self.record_decisions(&cx.decisions);
                    return Err(self.no_provider(inv, reason));
                }
                Ok(t) => t,
                Err(why) => {
                    self.record_decisions(&cx.decisions);
                    return Err(self.no_provider(inv, format!("{} router: {why}", router.name())));
                }
            };
        }
        self.record_decisions(&cx.decisions);
        Ok(targets)
    }

    /// Drops ejected candidates (within the cap) and those already tried,
    /// then lets the balancer pick one whose breaker admits the call.
    fn pick(
        &self,
        inv: &Invocation,
        candidates: Vec<Target>,
        tried: &[Arc<Instance>],
        reuse: Reuse,
        now: Instant,
    ) -> Result<Target, ClusterError> {
        let n = candidates.len();
        let mut ejected: Vec<(usize, Option<Instant>)> = candidates
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let breaker = t.stats.breaker();
                breaker.is_ejected(now).then(|| (i, breaker.opened_at()))
            })
            .collect();
        let open = ejected.len();
        let cap = if self.max_ejection > 0.0 {
            ((n as f64 * self.max_ejection).floor() as usize).max(1)
        } else {
            0
        };
        // Past the cap, the longest-open instances are let back in.
        ejected.sort_by_key(|&(i, at)| (at, i));
        let let_back = open.saturating_sub(cap);
        let mut pardoned = vec![false; n];
        let mut excluded = vec![false; n];
        for (k, &(i, _)) in ejected.iter().enumerate() {
            if k < let_back {
                pardoned[i] = true;
            } else {
                excluded[i] = true;
            }
        }
        let mut available: Vec<(Target, bool)> = candidates
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !excluded[*i])
            .map(|(i, t)| (t, pardoned[i]))
            .collect();
        if available.is_empty() {
            return Err(ClusterError::CircuitOpen {
                service: self.service.clone(),
                method: inv.method.clone(),
                open,
            });
        }
        let untried: Vec<(Target, bool)> = available
            .iter()
            .filter(|(t, _)| !tried.iter().any(|i| same_instance(i, &t.instance)))
            .cloned()
            .collect();
        if !untried.is_empty() {
            available = untried;
        } else if reuse == Reuse::Never {
            return Err(self.no_provider(inv, "every available instance was already tried".into()));
        }
        let local_zone = self.caller_zone(inv);
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        while !available.is_empty() {
            let targets: Vec<Target> = available.iter().map(|(t, _)| t.clone()).collect();
            let mut cx = PickContext {
                now,
                rng: &mut rng,
                local_zone,
            };
            let index = self
                .balancer
                .pick(&targets, inv, &mut cx)
                .min(targets.len() - 1);
            let (target, pardoned) = available.swap_remove(index);
            if pardoned || target.stats.breaker().try_acquire(now) {
                return Ok(target);
            }
        }
        Err(ClusterError::CircuitOpen {
            service: self.service.clone(),
            method: inv.method.clone(),
            open,
        })
    }

    pub(super) fn select(
        &self,
        inv: &Invocation,
        scope: Scope<'_>,
        tried: &[Arc<Instance>],
        reuse: Reuse,
    ) -> Result<Target, ClusterError> {
        let now = Instant::now();
        let candidates = self.route(inv, scope, now)?;
        self.pick(inv, candidates, tried, reuse, now)
    }

    /// One attempt on one target under a timeout, recorded in its stats.
    pub(super) async fn attempt<T, F, Fut>(
        &self,
        inv: &Invocation,
        target: &Target,
        call: &F,
        timeout: Duration,
        phase: Phase,
    ) -> Result<T, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut,
        Fut: Future<Output = Result<T, CallFailure>>,
    {
        bump(&self.counters.attempts);
        let mut pending = Pending {
            stats: &target.stats,
            start: Instant::now(),
            done: false,
        };
        let _active = target.stats.begin();
        let result = tokio::time::timeout(timeout, call(target.instance.clone())).await;
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(pending.start);
        pending.done = true;
        let instance = || format!("{}:{}", target.instance.ip, target.instance.port);
        match result {
            Ok(Ok(value)) => {
                target.stats.record(now, elapsed, Sample::Answered);
                Ok(value)
            }
            Ok(Err(failure)) => {
                let sample = match failure {
                    CallFailure::Application { .. } => Sample::Answered,
                    _ => Sample::Failed,
                };
                target.stats.record(now, elapsed, sample);
                Err(ClusterError::Failed {
                    method: inv.method.clone(),
                    instance: instance(),
                    failure,
                })
            }
            Err(_) => {
                target.stats.record(now, elapsed, Sample::Failed);
                Err(ClusterError::Timeout {
                    method: inv.method.clone(),
                    instance: instance(),
                    phase,
                    after: timeout,
                })
            }
        }
    }

    /// Whether a retry after `error` may go: retryable and within budget.
    pub(super) fn may_retry(
        &self,
        inv: &Invocation,
        error: ClusterError,
    ) -> Result<ClusterError, ClusterError> {
        if !retryable(&error, inv.idempotency) {
            return Err(error);
        }
        if !self.budget.withdraw(Instant::now()) {
            bump(&self.counters.budget_exhausted);
            return Err(ClusterError::BudgetExhausted {
                method: inv.method.clone(),
                last: Box::new(error),
            });
        }
        bump(&self.counters.retries);
        Ok(error)
    }
}

/// An attempt in flight: if its future is dropped before it finishes (a
/// forking loser, a caller giving up), the breaker is told, so a half-open
/// probe never stays in flight forever.
struct Pending<'a> {
    stats: &'a InstanceStats,
    start: Instant,
    done: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.stats.breaker().abandon(Instant::now());
        }
    }
}
