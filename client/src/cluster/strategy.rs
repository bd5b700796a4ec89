//! Cluster strategies: what to do when an attempt fails. Every retry,
//! whatever the strategy, must pass three tests: the failure is not the
//! provider's own answer; the call is idempotent or the failed attempt
//! provably never reached a provider; and the shared retry budget allows
//! it. The strategies differ only in where and how often they try again.

use std::time::Duration;

/// How a call's failures are handled.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// Retry on other instances (Dubbo's default; default 2 retries).
    Failover {
        /// Retries after the first attempt.
        retries: u32,
    },
    /// One attempt; its failure is the call's.
    Failfast,
    /// One attempt; a failure is swallowed and reported as
    /// [`Outcome::Ignored`].
    Failsafe,
    /// One attempt; a failure is queued for background retries (bounded:
    /// when the queue is full the failure is returned) and reported as
    /// [`Outcome::Queued`].
    Failback {
        /// Retries waiting or running at most.
        queue: usize,
        /// The pause before each background retry.
        interval: Duration,
        /// Background retries per failed call.
        attempts: u32,
    },
    /// `parallel` instances called at once; the first answer wins and the
    /// call fails only when all fail. A non-idempotent call is sent to one
    /// instance only.
    Forking {
        /// Instances called at once.
        parallel: usize,
    },
    /// Every instance left after routing is called; any failure fails the
    /// call.
    Broadcast,
    /// The first instance left after routing that lets calls through, no
    /// balancing, one attempt.
    Available,
    /// The caller's zone first (`1 + local_retries` attempts, each within
    /// `local_timeout`); then, only after a timeout or a failure that is
    /// not the provider's answer, one attempt in another zone within
    /// `cross_timeout`. Never after an application error; a non-idempotent
    /// call only when the failed attempt never reached a provider.
    ZoneAware {
        /// Timeout of each attempt in the caller's zone.
        local_timeout: Duration,
        /// Timeout of the cross-zone attempt.
        cross_timeout: Duration,
        /// Retries within the caller's zone before going across.
        local_retries: u32,
    },
}

impl Strategy {
    /// Failover with Dubbo's default of 2 retries.
    pub fn failover() -> Self {
        Strategy::Failover { retries: 2 }
    }

    /// Failback with Dubbo's 5 s retry period, 3 retries, room for 1024.
    pub fn failback() -> Self {
        Strategy::Failback {
            queue: 1024,
            interval: Duration::from_secs(5),
            attempts: 3,
        }
    }

    /// Forking over 2 instances (Dubbo's default).
    pub fn forking() -> Self {
        Strategy::Forking { parallel: 2 }
    }

    /// Zone-aware with these timeouts and no local retry.
    pub fn zone_aware(local_timeout: Duration, cross_timeout: Duration) -> Self {
        Strategy::ZoneAware {
            local_timeout,
            cross_timeout,
            local_retries: 0,
        }
    }

    /// The strategy's name, for spans and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Failover { .. } => "failover",
            Strategy::Failfast => "failfast",
            Strategy::Failsafe => "failsafe",
            Strategy::Failback { .. } => "failback",
            Strategy::Forking { .. } => "forking",
            Strategy::Broadcast => "broadcast",
            Strategy::Available => "available",
            Strategy::ZoneAware { .. } => "zone-aware",
        }
    }
}
