//! Routing and picking one target for an attempt: the routers' chain over
//! the healthy targets, then breakers (never ejecting more than the cap),
//! then the balancer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::balance::PickContext;
use crate::cluster::route::{Decision, RouteContext};
use crate::cluster::stats::InstanceStats;
use crate::cluster::{ClusterError, Invocation, Target};
use crate::metadata::START_TIMESTAMP;
use crate::Instance;

use super::{same_instance, Inner, Reuse, Scope};

impl Inner {
    /// The healthy, enabled instances of the latest list, with stats.
    /// An instance warms up from its start timestamp when its metadata
    /// has one; otherwise those in the first list count as warm and later
    /// arrivals warm up from `now`, when they were first seen.
    pub(super) fn targets(&self, now: Instant) -> Arc<[Target]> {
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
}
