//! The report of a chaos run: what the registry did (view lag and
//! register-to-visible per DC, writes acknowledged and lost, watcher
//! events delivered and missed, convergence after heals, the schedule as
//! applied, each lossy link's first draws) and what the consumers saw
//! (per consumer zone: calls, errors, same-zone share, failures during
//! provider faults, "no provider", calls to instances already removed,
//! latency, the return to the zone after a restore; per DC: how long a
//! dead provider stayed in its consumers' directories), and the run over
//! time, window by window ([`OverTime`]: view lag per DC, same-zone share
//! and error rate per consumer zone). `report.json` is this in camelCase;
//! `report.md` renders it for people, with the charts of
//! [`chart`](crate::chart) beside it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use understudy_server::raft::NodeId;
use understudy_server::view::DelaySummary;

/// A delay summary per DC.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DcReport {
    /// View lag samples of the DC's nodes.
    pub view_lag: DelaySummary,
    /// Provider request to watcher event, for the DC's watchers.
    pub register_to_visible: DelaySummary,
}

/// What happened to the workload's writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteReport {
    /// Acknowledged by the node asked.
    pub acknowledged: u64,
    /// Refused as invalid (a 4xx answer: not applied).
    pub refused: u64,
    /// Not acknowledged, outcome unknown: a 5xx answer (the cluster
    /// could not take it now; it may still be applied), a timeout, a
    /// dropped connection. Left out of the lost and missed counts.
    pub unknown: u64,
    /// Acknowledged but not in force on every live node at the end.
    pub lost: u64,
    /// A few refusals and unknown outcomes, as the clients saw them.
    pub refusal_samples: Vec<String>,
}

/// What the watchers saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchReport {
    /// How many watchers.
    pub watchers: u64,
    /// Events delivered to them in all.
    pub events: u64,
    /// Acknowledged registrations a watcher never saw, plus differences
    /// between a watcher's final list and the registry's.
    pub missed: u64,
    /// Of those, registrations never seen.
    pub missed_unseen: u64,
    /// Of those, final list differences.
    pub missed_final: u64,
    /// Times a watcher had to reconnect (to another node).
    pub reconnects: u64,
    /// Snapshots a watcher got again, by reason.
    pub resets: BTreeMap<String, u64>,
}

/// One planned step and when it was applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedStep {
    /// Planned time, ms from the start.
    pub at_ms: u64,
    /// The action.
    pub action: String,
    /// When it was applied, ms from the start.
    pub applied_ms: u64,
}

/// How long a heal took to converge.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Convergence {
    /// The heal step, ms from the start.
    pub heal_at_ms: u64,
    /// From the heal until every live node had applied what the most
    /// advanced one had at the heal, with a fresh view; `None`: not within
    /// 30 s.
    pub converged_ms: Option<u64>,
}

/// The report of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The seed used.
    pub seed: u64,
    /// The time scale used.
    pub scale: f64,
    /// The nodes and their DCs.
    pub nodes: BTreeMap<NodeId, String>,
    /// The workload's length, ms.
    pub duration_ms: u64,
    /// Per DC.
    pub dcs: BTreeMap<String, DcReport>,
    /// The writes.
    pub writes: WriteReport,
    /// The watchers.
    pub watch: WatchReport,
    /// One entry per heal step.
    pub converge: Vec<Convergence>,
    /// The timeline as applied.
    pub schedule: Vec<AppliedStep>,
    /// Each lossy link's first loss draws (`x` lost, `.` through).
    pub loss_patterns: BTreeMap<String, String>,
    /// Whether the final state settled on every live node within 30 s.
    pub settled: bool,
    /// What each consumer zone saw.
    pub consumers: Vec<ConsumerReport>,
    /// Per DC: from a provider's death to its removal from the DC's
    /// consumers' directories.
    pub stale_window: BTreeMap<String, StaleWindow>,
    /// Each provider fault, with when the registry removed the provider
    /// and when it came back.
    pub provider_faults: Vec<ProviderFault>,
    /// Each lossy call-network link's first loss draws.
    pub call_loss_patterns: BTreeMap<String, String>,
    /// The run window by window: what the charts draw.
    pub over_time: OverTime,
}

/// The workload's length cut into equal windows from its start, and what
/// was seen in each. Window `k` covers `[k·windowMs, (k+1)·windowMs)`;
/// every series has one value per window, `None` where there was nothing
/// to measure.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OverTime {
    /// Each window's width, ms.
    pub window_ms: u64,
    /// Per DC, the highest view lag sampled on its live nodes (every
    /// 20 ms) in each window, ms.
    pub view_lag_ms: BTreeMap<String, Vec<Option<f64>>>,
    /// Per consumer zone, its calls by the window they started in.
    pub consumers: BTreeMap<String, ZoneOverTime>,
}

/// One consumer zone's calls, window by window (by when each call
/// started). Shares and rates are fractions from 0 to 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneOverTime {
    /// Calls started.
    pub calls: Vec<u64>,
    /// Of those, the share that failed.
    pub error_rate: Vec<Option<f64>>,
    /// Of those answered, the share served in the caller's zone.
    pub same_zone_share: Vec<Option<f64>>,
}

impl OverTime {
    /// The window for a workload of `duration`: about 200 windows, a
    /// multiple of 50 ms, at least 100 ms.
    pub fn window_for(duration: Duration) -> Duration {
        let per = (duration.as_millis() as u64).div_ceil(200);
        Duration::from_millis(per.div_ceil(50).max(2) * 50)
    }

    /// How many windows of `window` cover `duration` (at least one).
    pub fn windows(duration: Duration, window: Duration) -> usize {
        (duration.as_millis() as u64)
            .div_ceil(window.as_millis().max(1) as u64)
            .max(1) as usize
    }
}

/// `part / all` rounded to 4 decimals, `None` when `all` is 0.
pub(crate) fn fraction(part: u64, all: u64) -> Option<f64> {
    (all > 0).then(|| (part as f64 / all as f64 * 10_000.0).round() / 10_000.0)
}

/// What one zone's consumers saw. Shares and rates are fractions from 0
/// to 1; latencies are of every call, answered or failed, from its start
/// to its outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerReport {
    /// The consumers' zone.
    pub zone: String,
    /// Calls made.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// errors / calls.
    pub error_rate: f64,
    /// Answered calls served in the caller's zone, over all answered.
    pub same_zone_share: f64,
    /// The same for calls started while no provider fault was in force.
    pub same_zone_share_healthy: f64,
    /// Idempotent calls started while a provider fault (kill, pause,
    /// slow) was in force anywhere, until its restore, that failed.
    pub idempotent_failed_during_fault: u64,
    /// Non-idempotent calls started then that failed.
    pub non_idempotent_failed_during_fault: u64,
    /// Calls that found no instance to call.
    pub no_provider: u64,
    /// Calls with an attempt sent to an instance the registry had already
    /// removed (from the leader's view: the first node to apply).
    pub stale_calls: u64,
    /// Median call latency, ms.
    pub p50_ms: f64,
    /// 99th percentile call latency, ms.
    pub p99_ms: f64,
    /// From the last provider restore until every later 100 ms window of
    /// the zone's answered calls was at least 99% same-zone; `None` when
    /// no restore happened or that never held.
    pub back_in_zone_after_restore_ms: Option<u64>,
}

/// How long dead providers stayed listed in one DC's consumers'
/// directories: one sample per provider death and consumer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StaleWindow {
    /// Deaths seen removed.
    pub count: u64,
    /// Median, ms.
    pub p50_ms: f64,
    /// Longest, ms.
    pub max_ms: f64,
}

/// One provider fault and what the registry made of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderFault {
    /// The provider, `zone/i`.
    pub provider: String,
    /// `kill`, `pause` or `slow`.
    pub fault: String,
    /// When it began, ms from the start.
    pub at_ms: u64,
    /// When it ended (restart, resume, end of slowness), ms.
    pub until_ms: Option<u64>,
    /// When the first node removed the provider, ms; `None`: never.
    pub removed_ms: Option<u64>,
    /// When it was listed again after that, ms; `None`: never.
    pub returned_ms: Option<u64>,
}

impl Report {
    /// Whether the run kept every promise: nothing acknowledged lost, no
    /// watcher event missed, every heal converged, the end settled.
    pub fn passed(&self) -> bool {
        self.writes.lost == 0
            && self.watch.missed == 0
            && self.settled
            && self.converge.iter().all(|c| c.converged_ms.is_some())
    }

    /// The report as a markdown document.
    pub fn markdown(&self) -> String {
        let mut md = format!(
            "# Chaos report: {}\n\nseed {}, scale {}, {} s, nodes {}\n\n",
            self.scenario,
            self.seed,
            self.scale,
            self.duration_ms as f64 / 1000.0,
            self.nodes
                .iter()
                .map(|(id, dc)| format!("{id} ({dc})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        md.push_str("| DC | view lag p50 | p99 | max | register-to-visible p50 | p99 | max |\n");
        md.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
        for (dc, r) in &self.dcs {
            md.push_str(&format!(
                "| {dc} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n",
                r.view_lag.p50_ms,
                r.view_lag.p99_ms,
                r.view_lag.max_ms,
                r.register_to_visible.p50_ms,
                r.register_to_visible.p99_ms,
                r.register_to_visible.max_ms
            ));
        }
        md.push_str(&self.image(LAG_CHART));
        let w = &self.writes;
        md.push_str(&format!(
            "\n| writes acknowledged | refused | unknown | **lost** | watcher events | **missed** | reconnects |\n\
             |---:|---:|---:|---:|---:|---:|---:|\n| {} | {} | {} | **{}** | {} | **{}** | {} |\n",
            w.acknowledged, w.refused, w.unknown, w.lost, self.watch.events, self.watch.missed,
            self.watch.reconnects
        ));
        if !self.converge.is_empty() {
            md.push_str("\n| heal at | converged after |\n|---:|---:|\n");
            for c in &self.converge {
                let after = c
                    .converged_ms
                    .map_or("not within 30 s".to_owned(), |ms| format!("{ms} ms"));
                md.push_str(&format!("| {} ms | {after} |\n", c.heal_at_ms));
            }
        }
        md.push_str("\n| planned | applied | action |\n|---:|---:|---|\n");
        for s in &self.schedule {
            md.push_str(&format!(
                "| {} ms | {} ms | {} |\n",
                s.at_ms, s.applied_ms, s.action
            ));
        }
        if !w.refusal_samples.is_empty() {
            md.push_str("\nRefusals seen by providers (samples):\n\n");
            for r in &w.refusal_samples {
                md.push_str(&format!("- `{r}`\n"));
            }
        }
        md.push_str(&self.consumers_markdown());
        md.push_str(&format!(
            "\nVerdict: **{}**\n",
            if self.passed() { "passed" } else { "FAILED" }
        ));
        md
    }
}

/// The charts drawn beside `report.md` (by [`chart`](crate::chart)), as
/// `(file, what it shows)`: the view lag chart, always.
pub const LAG_CHART: (&str, &str) = ("lag.svg", "view lag per DC");
/// The consumers' chart, when the scenario has consumers.
pub const CONSUMERS_CHART: (&str, &str) = (
    "consumers.svg",
    "same-zone share and error rate per consumer zone",
);

impl Report {
    /// Whether the report has the chart `file` (each chart but the
    /// consumers' always).
    pub fn has_chart(&self, file: &str) -> bool {
        file != CONSUMERS_CHART.0 || !self.consumers.is_empty()
    }

    /// The markdown image of `chart`, when the report has it.
    fn image(&self, (file, alt): (&str, &str)) -> String {
        if self.has_chart(file) {
            format!("\n![{alt}]({file})\n")
        } else {
            String::new()
        }
    }

    fn consumers_markdown(&self) -> String {
        let mut md = String::new();
        if self.consumers.is_empty() {
            return md;
        }
        let restored = self
            .schedule
            .iter()
            .any(|s| s.action.starts_with("restart-providers"));
        md.push_str(
            "\n## Consumers\n\n| zone | calls | errors | error rate | same-zone | same-zone healthy \
             | idempotent failed in faults | non-idempotent failed in faults | no provider | stale calls \
             | p50 | p99 | back in zone after restore |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for c in &self.consumers {
            md.push_str(&format!(
                "| {} | {} | {} | {:.2}% | {:.1}% | {:.1}% | {} | {} | {} | {} | {:.0} ms | {:.0} ms | {} |\n",
                c.zone,
                c.calls,
                c.errors,
                c.error_rate * 100.0,
                c.same_zone_share * 100.0,
                c.same_zone_share_healthy * 100.0,
                c.idempotent_failed_during_fault,
                c.non_idempotent_failed_during_fault,
                c.no_provider,
                c.stale_calls,
                c.p50_ms,
                c.p99_ms,
                match (restored, c.back_in_zone_after_restore_ms) {
                    (false, _) => "no restore".to_owned(),
                    (true, None) => "never".to_owned(),
                    (true, Some(ms)) => format!("{ms} ms"),
                },
            ));
        }
        md.push_str(&self.image(CONSUMERS_CHART));
        if !self.stale_window.is_empty() {
            md.push_str(
                "\n| DC | dead providers still listed: count | p50 | max |\n|---|---:|---:|---:|\n",
            );
            for (dc, w) in &self.stale_window {
                md.push_str(&format!(
                    "| {dc} | {} | {:.0} ms | {:.0} ms |\n",
                    w.count, w.p50_ms, w.max_ms
                ));
            }
        }
        if !self.provider_faults.is_empty() {
            md.push_str("\n| provider | fault | at | until | removed | listed again |\n|---|---|---:|---:|---:|---:|\n");
            let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{v} ms"));
            for f in &self.provider_faults {
                md.push_str(&format!(
                    "| {} | {} | {} ms | {} | {} | {} |\n",
                    f.provider,
                    f.fault,
                    f.at_ms,
                    ms(f.until_ms),
                    ms(f.removed_ms),
                    ms(f.returned_ms)
                ));
            }
        }
        md
    }
}
