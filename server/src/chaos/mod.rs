//! `understudy chaos run FILE`: runs a [scenario](scenario) against a sim
//! cluster ([`crate::sim`]) with synthetic providers and watchers in each
//! DC, and reports what each DC saw.
//!
//! Providers register and deregister persistent instances of one service
//! over the Nacos HTTP API on a node of their DC (another node when theirs
//! is killed); watchers follow the service over the native watch API on a
//! node of their DC, resuming with their token when they must move. A
//! sampler reads every node's view lag every 20 ms. The timeline's faults
//! act on the sim's shared fault model at their times.
//!
//! The report gives, per DC, view lag and register-to-visible (from a
//! provider's request to a watcher's event) p50 / p99 / max; writes
//! acknowledged, refused, of unknown outcome, and lost; watcher events
//! delivered and missed; how long each heal took to converge; the
//! schedule as planned and as applied; and each lossy link's first loss
//! draws, so two runs with one seed can be compared. A write is lost if it
//! was acknowledged and its effect is not on every live node at the end;
//! an event is missed if a watcher never saw an acknowledged registration,
//! or ended with a list that differs from the registry's.

pub mod scenario;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, ResumeToken, WatchRequest};

pub use scenario::{Action, Scenario, ScenarioError, Step};

use crate::raft::NodeId;
use crate::sim::{Sim, SimSpec};
use crate::view::DelaySummary;

/// The service the synthetic workload uses.
pub const SERVICE: &str = "chaos.svc";

/// `understudy chaos`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ChaosArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ChaosCommand,
}

/// The chaos commands.
#[derive(Debug, Clone, Subcommand)]
pub enum ChaosCommand {
    /// Run a scenario file against a sim cluster and write its report.
    Run(RunArgs),
}

/// `chaos run`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The scenario file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Multiply every time in the scenario by this (0.2 for a short run);
    /// link latencies are kept.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Use this seed instead of the scenario's.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write report.json and report.md here [default: target/chaos/NAME].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Log filter.
    #[arg(long, default_value = "error,openraft=off")]
    pub log: String,
}

/// Why a chaos run could not run or report (a run that breaks a promise
/// still reports: see [`Report::passed`]).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// `--scale` is not a positive number.
    #[error("--scale must be a positive number, got {0}")]
    Scale(f64),
    /// The scenario file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The scenario file is not a scenario.
    #[error("{path}: {source}")]
    Scenario {
        /// The file.
        path: PathBuf,
        /// The line and what is wrong with it.
        source: ScenarioError,
    },
    /// The sim cluster did not start.
    #[error(transparent)]
    Sim(#[from] crate::sim::SimError),
    /// The workload's HTTP client could not be built or a node did not
    /// answer a listing.
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    /// A watcher got no first snapshot.
    #[error("a watcher got no snapshot within 10 s")]
    WatchersNotReady,
    /// The report could not be written.
    #[error("cannot write the report to {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

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
        md.push_str(&format!(
            "\nVerdict: **{}**\n",
            if self.passed() { "passed" } else { "FAILED" }
        ));
        md
    }
}

// ---------------------------------------------------------------------------
// The workload's records

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Register,
    Deregister,
}

#[derive(Debug, Clone)]
enum Outcome {
    Acked,
    Refused(String),
    Unknown(String),
}

#[derive(Debug, Clone)]
struct Write {
    key: String,
    kind: Kind,
    sent: Instant,
    outcome: Outcome,
}

#[derive(Debug, Default)]
struct WatcherLog {
    dc: String,
    /// When each instance was first seen present.
    seen: HashMap<String, Instant>,
    current: BTreeSet<String>,
    events: u64,
    reconnects: u64,
    resets: BTreeMap<String, u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sim's nodes as the workload reaches them.
#[derive(Debug, Clone)]
struct Targets {
    /// `(id, dc, http, grpc)` in id order.
    nodes: Vec<(NodeId, String, std::net::SocketAddr, std::net::SocketAddr)>,
    killed: Arc<Mutex<BTreeSet<NodeId>>>,
}

impl Targets {
    /// The `n`-th live node of `dc` (any live node if `dc` has none).
    fn pick(
        &self,
        dc: &str,
        n: usize,
    ) -> Option<(NodeId, std::net::SocketAddr, std::net::SocketAddr)> {
        let killed = lock(&self.killed);
        let live: Vec<_> = self
            .nodes
            .iter()
            .filter(|(id, ..)| !killed.contains(id))
            .collect();
        let local: Vec<_> = live.iter().filter(|(_, d, ..)| d == dc).collect();
        let pool: Vec<_> = if local.is_empty() {
            live.iter().collect()
        } else {
            local
        };
        if pool.is_empty() {
            return None;
        }
        let (id, _, http, grpc) = pool[n % pool.len()];
        Some((*id, *http, *grpc))
    }
}

// ---------------------------------------------------------------------------
// The run

/// Runs `scenario` and reports.
pub async fn run(scenario: &Scenario, scale: f64) -> Result<Report, ChaosError> {
    let settings = crate::config::Settings {
        log: None,
        ..crate::sim::raft_timings(crate::sim::heartbeat_for(scenario.all_links()))
    };
    let spec = SimSpec {
        dcs: scenario.dcs.clone(),
        links: scenario.links.clone(),
        apply_delays: scenario.apply_delays.clone(),
        seed: scenario.seed,
        bind: std::net::IpAddr::from([127, 0, 0, 1]),
        base_port: 0,
        settings,
    };
    let mut sim = Sim::start(&spec, Duration::from_secs(30)).await?;
    let targets = Targets {
        nodes: sim
            .nodes()
            .values()
            .map(|n| (n.id, n.dc.clone(), n.http, n.grpc))
            .collect(),
        killed: Arc::default(),
    };
    let nodes: BTreeMap<NodeId, String> =
        sim.nodes().values().map(|n| (n.id, n.dc.clone())).collect();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let stop_watchers = CancellationToken::new();
    let stop_providers = CancellationToken::new();
    let stop_sampler = CancellationToken::new();

    // Watchers first, so they see every registration.
    let mut watchers = Vec::new();
    for (dc_index, (dc, _)) in scenario.dcs.iter().enumerate() {
        for w in 0..scenario.watchers {
            let log = Arc::new(Mutex::new(WatcherLog {
                dc: dc.clone(),
                ..WatcherLog::default()
            }));
            let n = dc_index + w as usize;
            let task = tokio::spawn(watch(
                targets.clone(),
                dc.clone(),
                n,
                log.clone(),
                stop_watchers.clone(),
            ));
            watchers.push((log, task));
        }
    }
    // Wait until each watcher has its first snapshot.
    let deadline = Instant::now() + Duration::from_secs(10);
    while watchers.iter().any(|(log, _)| lock(log).events == 0) {
        if Instant::now() > deadline {
            return Err(ChaosError::WatchersNotReady);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let start = Instant::now();
    let lags: Arc<Mutex<BTreeMap<String, Histogram<u64>>>> = Arc::default();
    let sampler = tokio::spawn(sample(
        sim_views(&sim),
        targets.killed.clone(),
        lags.clone(),
        stop_sampler.clone(),
    ));

    let writes: Arc<Mutex<Vec<Write>>> = Arc::default();
    let mut providers = Vec::new();
    for (dc_index, (dc, _)) in scenario.dcs.iter().enumerate() {
        for p in 0..scenario.providers {
            let seed = scenario.seed ^ ((dc_index as u64) << 32) ^ u64::from(p);
            providers.push(tokio::spawn(provide(
                http.clone(),
                targets.clone(),
                dc.clone(),
                (dc_index, p),
                scenario.write_interval,
                StdRng::seed_from_u64(seed),
                writes.clone(),
                stop_providers.clone(),
            )));
        }
    }

    // The timeline.
    let mut schedule = Vec::new();
    let mut heals = Vec::new();
    for step in &scenario.steps {
        tokio::time::sleep_until(start + step.at).await;
        let applied = start.elapsed();
        eprintln!(
            "understudy chaos: {:>7.1} s of {:.1} s: {}",
            applied.as_secs_f64(),
            scenario.duration.as_secs_f64(),
            step.action
        );
        apply_step(&mut sim, &targets, &step.action).await;
        if matches!(step.action, Action::Heal(_)) {
            heals.push((
                step.at,
                tokio::spawn(converge(
                    sim_views(&sim),
                    targets.killed.clone(),
                    sim.faults().clone(),
                )),
            ));
        }
        schedule.push(AppliedStep {
            at_ms: step.at.as_millis() as u64,
            action: step.action.to_string(),
            applied_ms: applied.as_millis() as u64,
        });
    }
    tokio::time::sleep_until(start + scenario.duration).await;
    eprintln!(
        "understudy chaos: {:>7.1} s: the timeline is over; stopping the clients and waiting for convergence",
        start.elapsed().as_secs_f64()
    );
    stop_providers.cancel();
    for p in providers {
        let _ = p.await;
    }
    let mut converge_report = Vec::new();
    for (at, task) in heals {
        converge_report.push(Convergence {
            heal_at_ms: at.as_millis() as u64,
            converged_ms: task.await.ok().flatten().map(|d| d.as_millis() as u64),
        });
    }
    // The end: every live node settles on the same log, then the
    // watchers on the registry's list.
    let settled = converge(
        sim_views(&sim),
        targets.killed.clone(),
        sim.faults().clone(),
    )
    .await
    .is_some();
    stop_sampler.cancel();
    let _ = sampler.await;
    let writes = std::mem::take(&mut *lock(&writes));
    let expected = expected_state(&writes);
    let mut lists = BTreeMap::new();
    for (id, _, addr, _) in &targets.nodes {
        if lock(&targets.killed).contains(id) {
            continue;
        }
        lists.insert(*id, list(&http, *addr).await?);
    }
    let reference = lists.values().next().cloned().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline
        && watchers
            .iter()
            .any(|(log, _)| lock(log).current != reference)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop_watchers.cancel();
    for (_, task) in &watchers {
        task.abort();
    }

    let mut lost = BTreeSet::new();
    for list in lists.values() {
        for (key, present) in &expected {
            if list.contains(key) != *present {
                lost.insert(key.clone());
            }
        }
    }
    let mut report_writes = WriteReport::default();
    for w in &writes {
        match &w.outcome {
            Outcome::Acked => report_writes.acknowledged += 1,
            Outcome::Refused(why) => {
                report_writes.refused += 1;
                if report_writes.refusal_samples.len() < 3
                    && !report_writes.refusal_samples.contains(why)
                {
                    report_writes.refusal_samples.push(why.clone());
                }
            }
            Outcome::Unknown(why) => {
                report_writes.unknown += 1;
                let why = format!("outcome unknown: {why}");
                if report_writes.refusal_samples.len() < 6
                    && !report_writes.refusal_samples.contains(&why)
                {
                    report_writes.refusal_samples.push(why);
                }
            }
        }
    }
    report_writes.lost = lost.len() as u64;

    let mut dcs: BTreeMap<String, DcReport> = BTreeMap::new();
    for (dc, h) in lock(&lags).iter() {
        dcs.entry(dc.clone()).or_default().view_lag = DelaySummary::of_micros(h);
    }
    let mut watch_report = WatchReport {
        watchers: watchers.len() as u64,
        ..WatchReport::default()
    };
    let mut r2v: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let registered: Vec<&Write> = writes
        .iter()
        .filter(|w| w.kind == Kind::Register && matches!(w.outcome, Outcome::Acked))
        .filter(|w| expected.contains_key(&w.key))
        .collect();
    for (log, _) in &watchers {
        let log = lock(log);
        watch_report.events += log.events;
        watch_report.reconnects += log.reconnects;
        for (reason, n) in &log.resets {
            *watch_report.resets.entry(reason.clone()).or_default() += n;
        }
        let h = r2v.entry(log.dc.clone()).or_insert_with(histogram);
        for w in &registered {
            match log.seen.get(&w.key) {
                Some(seen) => {
                    let us = seen.saturating_duration_since(w.sent).as_micros() as u64;
                    let _ = h.record(us.max(1));
                }
                None => watch_report.missed_unseen += 1,
            }
        }
        watch_report.missed_final += log.current.symmetric_difference(&reference).count() as u64;
        watch_report.missed = watch_report.missed_unseen + watch_report.missed_final;
    }
    for (dc, h) in r2v {
        dcs.entry(dc).or_default().register_to_visible = DelaySummary::of_micros(&h);
    }
    let loss_patterns = sim
        .faults()
        .loss_patterns()
        .into_iter()
        .map(|(from, to, pattern)| (format!("{from}->{to}"), pattern))
        .collect();
    sim.stop().await;
    Ok(Report {
        scenario: scenario.name.clone(),
        seed: scenario.seed,
        scale,
        nodes,
        duration_ms: scenario.duration.as_millis() as u64,
        dcs,
        writes: report_writes,
        watch: watch_report,
        converge: converge_report,
        schedule,
        loss_patterns,
        settled,
    })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

/// Each node's id, DC and handle (views and raft metrics).
fn sim_views(sim: &Sim) -> Vec<(NodeId, String, crate::Node)> {
    sim.nodes()
        .values()
        .filter_map(|n| n.node().map(|node| (n.id, n.dc.clone(), node.clone())))
        .collect()
}

async fn apply_step(sim: &mut Sim, targets: &Targets, action: &Action) {
    let faults = sim.faults().clone();
    match action {
        Action::Partition(a, b) => faults.partition(a, b),
        Action::Heal(Some((a, b))) => faults.heal_dcs(a, b),
        Action::Heal(None) => faults.heal_all(),
        Action::Link(spec) => {
            // Validated when the scenario was parsed.
            let _ = faults.apply(spec);
        }
        Action::ApplyDelay(dc, delay) => faults.set_apply_delay(dc, *delay),
        Action::Push(dc, fault) => {
            let _ = faults.set_push_fault(dc, *fault);
        }
        Action::Kill(id) => {
            lock(&targets.killed).insert(*id);
            sim.kill(*id);
        }
        Action::Pause(id) => faults.pause(*id),
        Action::Resume(id) => faults.resume(*id),
    }
}

/// Samples every live node's view lag every 20 ms into its DC's histogram.
async fn sample(
    views: Vec<(NodeId, String, crate::Node)>,
    killed: Arc<Mutex<BTreeSet<NodeId>>>,
    lags: Arc<Mutex<BTreeMap<String, Histogram<u64>>>>,
    stop: CancellationToken,
) {
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let killed = lock(&killed).clone();
        let mut lags = lock(&lags);
        for (id, dc, node) in &views {
            if killed.contains(id) {
                continue;
            }
            if let Some(lag) = node.view().lag() {
                let us = (lag.as_micros() as u64).max(1);
                let _ = lags.entry(dc.clone()).or_insert_with(histogram).record(us);
            }
        }
    }
}

/// Waits until every live node has applied what the most advanced one had
/// now and its view is fresh (lag under a tick plus the slowest link plus
/// 100 ms); answers how long that took, or `None` after 30 s.
async fn converge(
    views: Vec<(NodeId, String, crate::Node)>,
    killed: Arc<Mutex<BTreeSet<NodeId>>>,
    faults: crate::raft::links::LinkFaults,
) -> Option<Duration> {
    let started = Instant::now();
    let live = |killed: &BTreeSet<NodeId>| {
        views
            .iter()
            .filter(|(id, ..)| !killed.contains(id))
            .map(|(_, _, n)| n.clone())
            .collect::<Vec<_>>()
    };
    let target = live(&lock(&killed))
        .iter()
        .map(|n| n.cluster_status().last_applied)
        .max()
        .unwrap_or(0);
    let slowest = faults
        .dc_links()
        .iter()
        .map(|l| l.link.delay + l.link.jitter)
        .max()
        .unwrap_or_default();
    loop {
        let nodes = live(&lock(&killed));
        let fresh = nodes.iter().all(|n| {
            let limit = n.config().chaos.tick + slowest + Duration::from_millis(100);
            n.cluster_status().last_applied >= target && n.view().lag().is_some_and(|l| l <= limit)
        });
        if fresh {
            return Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(30) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The instances the acknowledged writes leave: `true` present, `false`
/// absent. Instances with a write of unknown outcome are left out.
fn expected_state(writes: &[Write]) -> BTreeMap<String, bool> {
    let mut state: BTreeMap<String, Option<bool>> = BTreeMap::new();
    for w in writes {
        let entry = state.entry(w.key.clone()).or_insert(Some(false));
        match (&w.outcome, entry.as_mut()) {
            (Outcome::Unknown(_), _) => *entry = None,
            (Outcome::Acked, Some(present)) => *present = w.kind == Kind::Register,
            // Refused as invalid: nothing changed.
            (Outcome::Refused(_), _) | (Outcome::Acked, None) => {}
        }
    }
    state
        .into_iter()
        .filter_map(|(key, present)| present.map(|p| (key, p)))
        .collect()
}

/// The instances of [`SERVICE`] on the node at `http`.
async fn list(
    client: &reqwest::Client,
    http: std::net::SocketAddr,
) -> Result<BTreeSet<String>, reqwest::Error> {
    let answer: serde_json::Value = client
        .get(format!(
            "http://{http}/nacos/v1/ns/instance/list?serviceName={SERVICE}&healthyOnly=false"
        ))
        .send()
        .await?
        .json()
        .await?;
    Ok(answer["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| format!("{}:{}", h["ip"].as_str().unwrap_or(""), h["port"]))
        .collect())
}

/// One provider: registers a new instance, or now and then deregisters its
/// oldest, every `interval` (±50%, seeded).
#[allow(clippy::too_many_arguments)]
async fn provide(
    client: reqwest::Client,
    targets: Targets,
    dc: String,
    (dc_index, p): (usize, u32),
    interval: Duration,
    mut rng: StdRng,
    writes: Arc<Mutex<Vec<Write>>>,
    stop: CancellationToken,
) {
    let mut live: std::collections::VecDeque<String> = Default::default();
    let mut next = 0u32;
    let mut node_choice = p as usize;
    loop {
        let pause = interval.mul_f64(rng.random_range(0.5..1.5));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        let Some((_, http, _)) = targets.pick(&dc, node_choice) else {
            continue;
        };
        let deregister = live.len() >= 3 && rng.random::<f64>() < 0.3;
        let (kind, key) = if deregister {
            (Kind::Deregister, live.pop_front().expect("three live"))
        } else {
            next += 1;
            (
                Kind::Register,
                format!("10.{}.{}.1:{}", dc_index + 1, p + 1, 10_000 + next),
            )
        };
        let (ip, port) = key.split_once(':').expect("ip:port");
        let url = format!(
            "http://{http}/nacos/v1/ns/instance?serviceName={SERVICE}&ip={ip}&port={port}&ephemeral=false"
        );
        let sent = Instant::now();
        let request = match kind {
            Kind::Register => client.post(format!("{url}&metadata=%7B%22zone%22%3A%22{dc}%22%7D")),
            Kind::Deregister => client.delete(url),
        };
        let outcome = match request.send().await {
            Ok(answer) => {
                let status = answer.status();
                let body = answer.text().await.unwrap_or_default();
                if status.is_success() && body.trim() == "ok" {
                    Outcome::Acked
                } else if status.is_client_error() {
                    Outcome::Refused(format!("{status}: {}", body.trim()))
                } else {
                    Outcome::Unknown(format!("{status}: {}", body.trim()))
                }
            }
            Err(e) => Outcome::Unknown(e.to_string()),
        };
        if matches!(outcome, Outcome::Unknown(_)) {
            // Try another node of the DC (if it has one) next time.
            node_choice += 1;
        }
        // Only instances whose every write was acknowledged are touched
        // again, so each stays checkable.
        if let (Outcome::Acked, Kind::Register) = (&outcome, kind) {
            live.push_back(key.clone());
        }
        lock(&writes).push(Write {
            key,
            kind,
            sent,
            outcome,
        });
    }
}

/// One watcher: follows [`SERVICE`] on a node of `dc`, moving to another
/// node with its resume token when its stream ends.
async fn watch(
    targets: Targets,
    dc: String,
    mut n: usize,
    log: Arc<Mutex<WatcherLog>>,
    stop: CancellationToken,
) {
    let mut token: Option<ResumeToken> = None;
    let mut resetting: Option<BTreeSet<String>> = None;
    loop {
        if stop.is_cancelled() {
            return;
        }
        let Some((_, _, grpc)) = targets.pick(&dc, n) else {
            return;
        };
        let request = WatchRequest {
            namespace: String::new(),
            group: String::new(),
            service: SERVICE.to_owned(),
            resume: token.clone(),
        };
        let stream = async {
            let mut client = RegistryClient::connect(format!("http://{grpc}"))
                .await
                .ok()?;
            client.watch(request).await.ok().map(|r| r.into_inner())
        };
        let Some(mut stream) = tokio::time::timeout(Duration::from_secs(2), stream)
            .await
            .ok()
            .flatten()
        else {
            n += 1;
            lock(&log).reconnects += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = stream.next() => event,
            };
            let Some(Ok(event)) = event else {
                break;
            };
            let now = Instant::now();
            let mut log = lock(&log);
            log.events += 1;
            match event.event {
                Some(watch_event::Event::Reset(reset)) => {
                    let set = resetting.get_or_insert_with(BTreeSet::new);
                    for state in &reset.services {
                        for i in &state.instances {
                            set.insert(format!("{}:{}", i.ip, i.port));
                        }
                    }
                    if reset.last {
                        let set = resetting.take().unwrap_or_default();
                        for key in &set {
                            log.seen.entry(key.clone()).or_insert(now);
                        }
                        log.current = set;
                        let reason = format!("{:?}", reset.reason());
                        *log.resets.entry(reason).or_default() += 1;
                    }
                }
                Some(watch_event::Event::Change(c)) => match c.kind {
                    Some(change::Kind::Upsert(i)) => {
                        let key = format!("{}:{}", i.ip, i.port);
                        log.seen.entry(key.clone()).or_insert(now);
                        log.current.insert(key);
                    }
                    Some(change::Kind::Removed(r)) => {
                        if let Some(i) = r.instance {
                            log.current.remove(&format!("{}:{}", i.ip, i.port));
                        }
                    }
                    _ => {}
                },
                None => {}
            }
            if event.token.is_some() && resetting.is_none() {
                token = event.token;
            }
        }
        n += 1;
        lock(&log).reconnects += 1;
        resetting = None;
    }
}

/// Runs `chaos run` and exits 0 when the report passed.
pub async fn main(args: RunArgs) -> Result<bool, ChaosError> {
    if !(args.scale > 0.0 && args.scale.is_finite()) {
        return Err(ChaosError::Scale(args.scale));
    }
    let text = std::fs::read_to_string(&args.file).map_err(|source| ChaosError::Read {
        path: args.file.clone(),
        source,
    })?;
    let mut scenario = Scenario::parse(&text)
        .map_err(|source| ChaosError::Scenario {
            path: args.file.clone(),
            source,
        })?
        .scaled(args.scale);
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    eprintln!(
        "understudy chaos: running {} ({} s, seed {})",
        scenario.name,
        scenario.duration.as_secs_f64(),
        scenario.seed
    );
    let report = run(&scenario, args.scale).await?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("target/chaos").join(&scenario.name));
    let write = |path: PathBuf, bytes: &[u8]| {
        std::fs::create_dir_all(&out)
            .and_then(|()| std::fs::write(&path, bytes))
            .map_err(|source| ChaosError::Write { path, source })
    };
    let json = serde_json::to_vec_pretty(&report).expect("a report serialises");
    write(out.join("report.json"), &json)?;
    let md = report.markdown();
    write(out.join("report.md"), md.as_bytes())?;
    println!("{md}");
    println!("report: {}", out.join("report.json").display());
    Ok(report.passed())
}
