//! Attempts and the strategies' loops over them: each strategy drives
//! attempts through routing, picking and the attempt step.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::stats::{InstanceStats, Sample};
use crate::cluster::{CallFailure, ClusterError, Invocation, Phase, Target};
use crate::Instance;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::{bump, retryable, Inner, Outcome, Reuse, Scope};

impl Inner {
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
