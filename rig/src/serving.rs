//! The serving half of a run: providers, consumers, the call network and
//! the observers, started before the timeline, acted on by its provider
//! faults and call-link changes, and judged at the end into the report's
//! `consumers`, `staleWindow`, `providerFaults` and `overTime.consumers`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_server::sim::Sim;

use crate::callnet::CallNet;
use crate::consumer::{Consumer, Failure, Record};
use crate::observe::RegistryTimeline;
use crate::provider::{Providers, RegistryNode};
use crate::report::{fraction, ConsumerReport, ProviderFault, StaleWindow, ZoneOverTime};
use crate::{histogram, lock, Action, ChaosError, Scenario};

/// A provider fault as applied: which provider, what, from when to when
/// (from the start of the workload; `None`: to the end).
#[derive(Debug, Clone)]
struct Span {
    provider: usize,
    fault: &'static str,
    from: Duration,
    until: Option<Duration>,
}

/// What one zone's consumers recorded.
struct ZoneCalls {
    zone: String,
    records: Arc<Mutex<Vec<Record>>>,
}

/// The serving half while it runs.
pub(crate) struct Serving {
    providers: Providers,
    consumers: Vec<Consumer>,
    running: Vec<tokio::task::JoinHandle<Consumer>>,
    zones: Vec<ZoneCalls>,
    net: CallNet,
    timeline: RegistryTimeline,
    stop: CancellationToken,
    tasks: TaskTracker,
    spans: Arc<Mutex<Vec<Span>>>,
    restores: Vec<Duration>,
    start: Option<Instant>,
    /// The report's windows: their width and how many.
    windows: (Duration, usize),
}

impl Serving {
    /// Starts the providers and the consumers' directories, and waits
    /// until every consumer lists every provider.
    pub(crate) async fn start(scenario: &Scenario, sim: &Sim) -> Result<Self, ChaosError> {
        let registry: Vec<RegistryNode> = sim
            .nodes()
            .values()
            .map(|n| RegistryNode {
                dc: n.dc.clone(),
                grpc: n.grpc,
            })
            .collect();
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let net = CallNet::new(scenario.seed);
        for link in &scenario.call_links {
            net.apply(link);
        }
        let grpc: Vec<_> = registry.iter().map(|n| n.grpc).collect();
        let timeline = RegistryTimeline::watch(&grpc, &stop, &tasks);
        let zones: Vec<String> = scenario.dcs.iter().map(|(d, _)| d.clone()).collect();
        let providers = Providers::start(&scenario.serving, &zones, &registry, scenario.seed)
            .await
            .map_err(ChaosError::Serving)?;
        let mut consumers = Vec::new();
        let mut zone_calls = Vec::new();
        for group in &scenario.consumers {
            for index in 1..=group.count {
                let consumer = Consumer::build(
                    group,
                    index,
                    scenario.seed,
                    scenario.duration,
                    &registry,
                    net.clone(),
                    timeline.clone(),
                    (&stop, &tasks),
                )
                .map_err(|e| ChaosError::Serving(std::io::Error::other(e.to_string())))?;
                consumers.push(consumer);
            }
            zone_calls.push(ZoneCalls {
                zone: group.zone.clone(),
                records: Arc::default(),
            });
        }
        // Providers registering later (a delay) are not waited for.
        let expected = scenario
            .serving
            .iter()
            .filter(|g| g.delay.is_zero())
            .map(|g| g.count as usize)
            .sum::<usize>();
        let deadline = Instant::now() + Duration::from_secs(20);
        while consumers
            .iter()
            .any(|c| c.directory.instances().len() < expected)
        {
            if Instant::now() > deadline {
                return Err(ChaosError::Serving(std::io::Error::other(
                    "the consumers did not see every provider within 20 s",
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            providers,
            consumers,
            running: Vec::new(),
            zones: zone_calls,
            net,
            timeline,
            stop,
            tasks,
            spans: Arc::default(),
            restores: Vec::new(),
            start: None,
            windows: (Duration::from_secs(1), 1),
        })
    }

    /// Starts the consumers' calls, timed from `start`; they are told
    /// over time in `count` windows of `window`.
    pub(crate) fn begin(&mut self, start: Instant, window: Duration, count: usize) {
        self.start = Some(start);
        self.windows = (window, count);
        for consumer in self.consumers.drain(..) {
            let records = self
                .zones
                .iter()
                .find(|z| z.zone == consumer.zone)
                .map(|z| z.records.clone())
                .unwrap_or_default();
            self.running
                .push(tokio::spawn(consumer.run(start, records)));
        }
    }

    /// Applies a provider fault or call-link change at `at`.
    pub(crate) async fn apply(&mut self, action: &Action, at: Duration) {
        let indices = |zone: &str, index: Option<u32>| -> Vec<usize> {
            self.providers
                .all
                .iter()
                .enumerate()
                .filter(|(_, p)| p.zone == zone)
                .filter(|(_, p)| index.is_none_or(|i| p.name == format!("{zone}/{i}")))
                .map(|(k, _)| k)
                .collect()
        };
        match action {
            Action::CallLink(spec) => self.net.apply(spec),
            Action::KillProviders(target) => {
                for k in indices(&target.zone, target.index) {
                    let open = lock(&self.spans)
                        .iter()
                        .any(|s| s.provider == k && s.fault == "kill" && s.until.is_none());
                    if !open {
                        lock(&self.spans).push(Span {
                            provider: k,
                            fault: "kill",
                            from: at,
                            until: None,
                        });
                    }
                    self.providers.all[k].kill().await;
                }
            }
            Action::RestartProviders(target) => {
                self.restores.push(at);
                for k in indices(&target.zone, target.index) {
                    for span in lock(&self.spans).iter_mut() {
                        if span.provider == k && span.fault == "kill" && span.until.is_none() {
                            span.until = Some(at);
                        }
                    }
                    if let Err(e) = self.providers.all[k].restart().await {
                        tracing::warn!(provider = %self.providers.all[k].name, error = %e, "restart failed");
                    }
                }
            }
            Action::PauseProvider(target, lasting) => {
                for k in indices(&target.zone, target.index) {
                    let provider = self.providers.all[k].clone();
                    provider.pause(true);
                    lock(&self.spans).push(Span {
                        provider: k,
                        fault: "pause",
                        from: at,
                        until: Some(at + *lasting),
                    });
                    let lasting = *lasting;
                    self.tasks.spawn(async move {
                        tokio::time::sleep(lasting).await;
                        provider.pause(false);
                    });
                }
            }
            Action::SlowProviders {
                zone,
                factor,
                lasting,
            } => {
                for k in indices(zone, None) {
                    let provider = self.providers.all[k].clone();
                    provider.slow(*factor);
                    lock(&self.spans).push(Span {
                        provider: k,
                        fault: "slow",
                        from: at,
                        until: Some(at + *lasting),
                    });
                    let lasting = *lasting;
                    self.tasks.spawn(async move {
                        tokio::time::sleep(lasting).await;
                        provider.slow(1.0);
                    });
                }
            }
            _ => {}
        }
    }

    /// Waits for the consumers' last calls, stops everything, and judges.
    pub(crate) async fn finish(mut self) -> Judged {
        let mut consumers = Vec::new();
        for running in self.running.drain(..) {
            if let Ok(consumer) = running.await {
                consumers.push(consumer);
            }
        }
        let start = self.start.unwrap_or_else(Instant::now);
        let spans = lock(&self.spans).clone();
        let in_fault = |at: Duration| {
            spans
                .iter()
                .any(|s| s.from <= at && s.until.is_none_or(|until| at < until))
        };
        let restore = self.restores.last().copied();
        let reports = self
            .zones
            .iter()
            .map(|z| judge_zone(&z.zone, &lock(&z.records), &in_fault, restore))
            .collect();
        let mut over_time = BTreeMap::new();
        for z in &self.zones {
            // A zone's calls are all in its first group's records.
            over_time.entry(z.zone.clone()).or_insert_with(|| {
                zone_over_time(&lock(&z.records), self.windows.0, self.windows.1)
            });
        }

        // Deaths (kills and pauses) against each DC's directories.
        let mut windows: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
        let mut faults = Vec::new();
        for span in &spans {
            let provider = &self.providers.all[span.provider];
            let key = provider.key();
            let from = start + span.from;
            let (removed, returned) = self.timeline.removal_after(&key, from);
            let ms = |at: Instant| at.saturating_duration_since(start).as_millis() as u64;
            faults.push(ProviderFault {
                provider: provider.name.clone(),
                fault: span.fault.to_owned(),
                at_ms: span.from.as_millis() as u64,
                until_ms: span.until.map(|u| u.as_millis() as u64),
                removed_ms: removed.map(ms),
                returned_ms: returned.map(ms),
            });
            if span.fault == "slow" {
                continue;
            }
            // A removal counts until the provider is back (or, for a
            // pause, a while after it, for the lagging DCs).
            let horizon = match (span.fault, span.until) {
                ("pause", Some(until)) => start + until + Duration::from_secs(10),
                (_, Some(until)) => start + until,
                (_, None) => Instant::now(),
            };
            for consumer in &consumers {
                if let Some(left) = consumer.log.left_after(&key, from) {
                    if left <= horizon {
                        let us = left.saturating_duration_since(from).as_micros() as u64;
                        let _ = windows
                            .entry(consumer.zone.clone())
                            .or_insert_with(histogram)
                            .record(us.max(1));
                    }
                }
            }
        }
        let stale_window = windows
            .into_iter()
            .map(|(dc, h)| {
                (
                    dc,
                    StaleWindow {
                        count: h.len(),
                        p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
                        max_ms: h.max() as f64 / 1000.0,
                    },
                )
            })
            .collect();
        for consumer in &consumers {
            consumer.stop().await;
        }
        self.providers.stop().await;
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        Judged {
            consumers: reports,
            stale_window,
            provider_faults: faults,
            call_loss_patterns: self.net.loss_patterns(),
            over_time,
        }
    }
}

/// The serving half's part of the report.
pub(crate) struct Judged {
    pub(crate) consumers: Vec<ConsumerReport>,
    pub(crate) stale_window: BTreeMap<String, StaleWindow>,
    pub(crate) provider_faults: Vec<ProviderFault>,
    pub(crate) call_loss_patterns: BTreeMap<String, String>,
    /// Per zone, its calls window by window.
    pub(crate) over_time: BTreeMap<String, ZoneOverTime>,
}

/// One zone's calls by the window (of `count` of `window`) they started
/// in: how many, the share that failed, the share of the answered ones
/// served in the zone.
fn zone_over_time(records: &[Record], window: Duration, count: usize) -> ZoneOverTime {
    // Per window: calls, failed, answered, answered in the zone.
    let mut tally = vec![(0u64, 0u64, 0u64, 0u64); count];
    for r in records {
        let k = (r.at.as_micros() / window.as_micros().max(1)) as usize;
        let Some(t) = tally.get_mut(k) else { continue };
        t.0 += 1;
        match r.outcome {
            Ok(same_zone) => {
                t.2 += 1;
                t.3 += u64::from(same_zone);
            }
            Err(_) => t.1 += 1,
        }
    }
    ZoneOverTime {
        calls: tally.iter().map(|t| t.0).collect(),
        error_rate: tally.iter().map(|t| fraction(t.1, t.0)).collect(),
        same_zone_share: tally.iter().map(|t| fraction(t.3, t.2)).collect(),
    }
}

fn share(part: usize, all: usize) -> f64 {
    if all == 0 {
        1.0
    } else {
        part as f64 / all as f64
    }
}

/// One zone's calls, judged.
fn judge_zone(
    zone: &str,
    records: &[Record],
    in_fault: &dyn Fn(Duration) -> bool,
    restore: Option<Duration>,
) -> ConsumerReport {
    let answered: Vec<&Record> = records.iter().filter(|r| r.outcome.is_ok()).collect();
    let same = |rs: &[&Record]| {
        share(
            rs.iter().filter(|r| r.outcome == Ok(true)).count(),
            rs.len(),
        )
    };
    let healthy: Vec<&Record> = answered
        .iter()
        .copied()
        .filter(|r| !in_fault(r.at))
        .collect();
    let failed: Vec<&Record> = records.iter().filter(|r| r.outcome.is_err()).collect();
    let during = |idempotent: bool| {
        failed
            .iter()
            .filter(|r| r.idempotent == idempotent && in_fault(r.at))
            .count() as u64
    };
    let mut latency = histogram();
    for r in records {
        let _ = latency.record((r.latency.as_micros() as u64).max(1));
    }
    let quantile = |q: f64| {
        if latency.is_empty() {
            0.0
        } else {
            latency.value_at_quantile(q) as f64 / 1000.0
        }
    };
    ConsumerReport {
        zone: zone.to_owned(),
        calls: records.len() as u64,
        errors: failed.len() as u64,
        error_rate: if records.is_empty() {
            0.0
        } else {
            failed.len() as f64 / records.len() as f64
        },
        same_zone_share: same(&answered),
        same_zone_share_healthy: same(&healthy),
        idempotent_failed_during_fault: during(true),
        non_idempotent_failed_during_fault: during(false),
        no_provider: failed
            .iter()
            .filter(|r| r.outcome == Err(Failure::NoProvider))
            .count() as u64,
        stale_calls: records.iter().filter(|r| r.stale).count() as u64,
        p50_ms: quantile(0.5),
        p99_ms: quantile(0.99),
        back_in_zone_after_restore_ms: restore.and_then(|at| back_in_zone(&answered, at)),
    }
}

/// From `restore`, the start of the first 100 ms window from which every
/// later window of answered calls is at least 99% same-zone.
fn back_in_zone(answered: &[&Record], restore: Duration) -> Option<u64> {
    let mut windows: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for r in answered.iter().filter(|r| r.at >= restore) {
        let w = windows
            .entry(((r.at - restore).as_millis() / 100) as u64)
            .or_default();
        w.1 += 1;
        if r.outcome == Ok(true) {
            w.0 += 1;
        }
    }
    windows
        .iter()
        .rev()
        .take_while(|(_, (same, all))| share(*same, *all) >= 0.99)
        .last()
        .map(|(w, _)| w * 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(at_ms: u64, outcome: Result<bool, Failure>, idempotent: bool) -> Record {
        Record {
            at: Duration::from_millis(at_ms),
            idempotent,
            latency: Duration::from_millis(at_ms % 7 + 1),
            outcome,
            stale: at_ms == 1500,
        }
    }

    #[test]
    fn a_zones_calls_are_judged_by_fault_windows_and_the_return_to_the_zone() {
        // A fault from 1 s to 2 s, restored at 2 s.
        let records: Vec<Record> = (0..40)
            .map(|k| {
                let at = k * 100;
                let outcome = match at {
                    1000..=1999 if at % 200 == 0 => Err(Failure::Timeout),
                    1000..=2299 => Ok(false),
                    _ => Ok(true),
                };
                call(at, outcome, at % 400 != 0)
            })
            .collect();
        let in_fault =
            |at: Duration| (Duration::from_secs(1)..Duration::from_secs(2)).contains(&at);
        let r = judge_zone("hz", &records, &in_fault, Some(Duration::from_secs(2)));
        assert_eq!(r.calls, 40);
        assert_eq!(r.errors, 5);
        assert_eq!(r.error_rate, 5.0 / 40.0);
        // 35 answered, 8 of them across (1.1 to 2.2 s, but the failed ones).
        assert_eq!(r.same_zone_share, 27.0 / 35.0);
        // Healthy: outside 1 to 2 s; 2.0, 2.1 and 2.2 s went across.
        assert_eq!(r.same_zone_share_healthy, 27.0 / 30.0);
        // Failed at 1.0, 1.4, 1.8 s (idempotent) and 1.2, 1.6 s (not).
        assert_eq!(r.idempotent_failed_during_fault, 3);
        assert_eq!(r.non_idempotent_failed_during_fault, 2);
        assert_eq!(r.no_provider, 0);
        assert_eq!(r.stale_calls, 1);
        // Back in the zone from the 2.3 s window on: 300 ms after.
        assert_eq!(r.back_in_zone_after_restore_ms, Some(300));
        assert_eq!(
            judge_zone("hz", &records, &in_fault, None).back_in_zone_after_restore_ms,
            None
        );
    }

    #[test]
    fn a_zones_calls_are_told_window_by_window() {
        let records = [
            call(100, Ok(true), true),
            call(900, Ok(false), true),
            call(1200, Err(Failure::Timeout), true),
            call(1500, Ok(true), true),
            call(2100, Err(Failure::NoProvider), false),
            // Past the last window: left out.
            call(3100, Ok(true), true),
        ];
        let z = zone_over_time(&records, Duration::from_secs(1), 3);
        assert_eq!(z.calls, [2, 2, 1]);
        assert_eq!(z.error_rate, [Some(0.0), Some(0.5), Some(1.0)]);
        assert_eq!(z.same_zone_share, [Some(0.5), Some(1.0), None]);
    }
}
