//! [`ClusterBuilder`]: a cluster's parts and settings, checked and
//! assembled into a [`Cluster`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::balance::{LoadBalance, WeightedRandom};
use crate::cluster::breaker::BreakerRules;
use crate::cluster::limit::{ConcurrencyLimit, RateLimiter, RetryBudget};
use crate::cluster::route::Router;
use crate::cluster::strategy::Strategy;
use crate::{ClientError, Directory, Instance};

use super::{system_clock, Cluster, Counters, Inner, Table, WallClock};

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
