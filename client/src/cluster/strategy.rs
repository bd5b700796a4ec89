//! Cluster strategies: what to do when an attempt fails. Every retry,
//! whatever the strategy, must pass three tests: the failure is not the
//! provider's own answer; the call is idempotent or the failed attempt
//! provably never reached a provider; and the shared retry budget allows
//! it. The strategies differ only in where and how often they try again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::invoker::{bump, retryable, Inner, Outcome, Reuse, Scope};
use super::{CallFailure, ClusterError, Invocation, Phase, Target};
use crate::Instance;

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

/// The strategies' bodies: each drives attempts through the invoker's
/// routing, picking and attempt steps.
impl Inner {
    pub(super) async fn failover<T, F, Fut>(
        &self,
        inv: &Invocation,
        call: &F,
        retries: u32,
        timeout: Duration,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut,
        Fut: Future<Output = Result<T, CallFailure>>,
    {
        let mut tried: Vec<Arc<Instance>> = Vec::new();
        let mut last: Option<ClusterError> = None;
        for attempt in 0..=retries {
            let target = match self.select(inv, Scope::Any, &tried, Reuse::Allowed) {
                Ok(t) => t,
                // A retry that finds nothing reports what made it retry.
                Err(e) => return Err(last.unwrap_or(e)),
            };
            tried.push(target.instance.clone());
            match self
                .attempt(inv, &target, call, timeout, Phase::Attempt)
                .await
            {
                Ok(value) => {
                    return Ok(Outcome::Answered {
                        value,
                        instance: target.instance,
                        attempts: attempt + 1,
                    })
                }
                Err(e) if attempt == retries => return Err(e),
                Err(e) => last = Some(self.may_retry(inv, e)?),
            }
        }
        Err(last.unwrap_or_else(|| self.no_provider(inv, "no attempt was made".into())))
    }

    pub(super) async fn zone_aware<T, F, Fut>(
        &self,
        inv: &Invocation,
        call: &F,
        local_timeout: Duration,
        cross_timeout: Duration,
        local_retries: u32,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut,
        Fut: Future<Output = Result<T, CallFailure>>,
    {
        let zone = self.caller_zone(inv).map(str::to_owned);
        let local_scope = zone.as_deref().map_or(Scope::Any, Scope::Local);
        let mut tried: Vec<Arc<Instance>> = Vec::new();
        let mut last = None;
        for attempt in 0..=local_retries {
            let target = match self.select(inv, local_scope, &tried, Reuse::Never) {
                Ok(t) => t,
                Err(e) => {
                    last = Some(last.unwrap_or(e));
                    break;
                }
            };
            // A local retry is paid for only once there is an instance to
            // retry on.
            if let Some(e) = last.take() {
                self.may_retry(inv, e)?;
            }
            tried.push(target.instance.clone());
            match self
                .attempt(inv, &target, call, local_timeout, Phase::Local)
                .await
            {
                Ok(value) => {
                    return Ok(Outcome::Answered {
                        value,
                        instance: target.instance,
                        attempts: attempt + 1,
                    })
                }
                Err(e) if !retryable(&e, inv.idempotency) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        let Some(error) = last else {
            return Err(self.no_provider(inv, "no attempt was made".into()));
        };
        let Some(zone) = zone else {
            return Err(error);
        };
        // Routers that left nothing local (a strict zone, a tag) are not a
        // failure of the zone's instances; all of them ejected is.
        if tried.is_empty() && !matches!(error, ClusterError::CircuitOpen { .. }) {
            return Err(error);
        }
        let error = self.may_retry(inv, error)?;
        let target = match self.select(inv, Scope::Across(&zone), &tried, Reuse::Never) {
            Ok(t) => t,
            Err(_) => return Err(error),
        };
        bump(&self.counters.cross_zone);
        let attempts = tried.len() as u32 + 1;
        self.attempt(inv, &target, call, cross_timeout, Phase::CrossZone)
            .await
            .map(|value| Outcome::Answered {
                value,
                instance: target.instance,
                attempts,
            })
    }

    pub(super) async fn forking<T, F, Fut>(
        &self,
        inv: &Invocation,
        call: &F,
        parallel: usize,
        timeout: Duration,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut,
        Fut: Future<Output = Result<T, CallFailure>>,
    {
        let mut chosen: Vec<Target> = Vec::new();
        let mut tried: Vec<Arc<Instance>> = Vec::new();
        while chosen.len() < parallel {
            match self.select(inv, Scope::Any, &tried, Reuse::Never) {
                Ok(t) => {
                    tried.push(t.instance.clone());
                    chosen.push(t);
                }
                Err(e) if chosen.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        let attempts = chosen.len() as u32;
        let mut running: FuturesUnordered<_> = chosen
            .iter()
            .map(|t| async move { (t, self.attempt(inv, t, call, timeout, Phase::Attempt).await) })
            .collect();
        let mut last = None;
        while let Some((target, result)) = running.next().await {
            match result {
                Ok(value) => {
                    return Ok(Outcome::Answered {
                        value,
                        instance: target.instance.clone(),
                        attempts,
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| self.no_provider(inv, "no attempt was made".into())))
    }

    pub(super) async fn broadcast<T, F, Fut>(
        &self,
        inv: &Invocation,
        call: &F,
        timeout: Duration,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut,
        Fut: Future<Output = Result<T, CallFailure>>,
    {
        let now = Instant::now();
        let targets: Vec<Target> = self
            .route(inv, Scope::Any, now)?
            .into_iter()
            .filter(|t| !t.stats.breaker().is_ejected(now))
            .collect();
        if targets.is_empty() {
            return Err(ClusterError::CircuitOpen {
                service: self.service.clone(),
                method: inv.method.clone(),
                open: 0,
            });
        }
        let attempts = targets.len() as u32;
        let results = futures_util::future::join_all(
            targets
                .iter()
                .map(|t| self.attempt(inv, t, call, timeout, Phase::Attempt)),
        )
        .await;
        let mut answer = None;
        for (target, result) in targets.iter().zip(results) {
            match result {
                Ok(value) => {
                    answer.get_or_insert((value, target.instance.clone()));
                }
                Err(e) => return Err(e),
            }
        }
        let (value, instance) =
            answer.ok_or_else(|| self.no_provider(inv, "no attempt was made".into()))?;
        Ok(Outcome::Answered {
            value,
            instance,
            attempts,
        })
    }

    pub(super) async fn available<T, F, Fut>(
        &self,
        inv: &Invocation,
        call: &F,
        timeout: Duration,
    ) -> Result<Outcome<T>, ClusterError>
    where
        F: Fn(Arc<Instance>) -> Fut,
        Fut: Future<Output = Result<T, CallFailure>>,
    {
        let now = Instant::now();
        let candidates = self.route(inv, Scope::Any, now)?;
        let open = candidates.len();
        let target = candidates
            .into_iter()
            .find(|t| t.stats.breaker().try_acquire(now))
            .ok_or_else(|| ClusterError::CircuitOpen {
                service: self.service.clone(),
                method: inv.method.clone(),
                open,
            })?;
        let value = self
            .attempt(inv, &target, call, timeout, Phase::Attempt)
            .await?;
        Ok(Outcome::Answered {
            value,
            instance: target.instance,
            attempts: 1,
        })
    }
}
