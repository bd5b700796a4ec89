//! The registry workload: churning providers that register and deregister
//! persistent instances of [`SERVICE`] over the Nacos HTTP API on a node
//! of their DC (another node when theirs is killed), and watchers that
//! follow the service over the native watch API on a node of their DC,
//! resuming with their token when they must move. A sampler reads every
//! node's view lag every 20 ms, into each DC's histogram and the highest
//! per window of the report's `overTime`. At the end, [`Workload::finish`] checks
//! every acknowledged write against every live node and every watcher's
//! list against the registry's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, ResumeToken, WatchRequest};
use understudy_server::raft::NodeId;
use understudy_server::sim::Sim;
use understudy_server::view::DelaySummary;

use crate::report::{DcReport, OverTime, WatchReport, WriteReport};
use crate::{histogram, lock, ChaosError, Scenario};

/// The service the registry workload uses.
pub const SERVICE: &str = "chaos.svc";

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

/// The sim's nodes as the workload reaches them.
#[derive(Debug, Clone)]
pub(crate) struct Targets {
    /// `(id, dc, http, grpc)` in id order.
    pub(crate) nodes: Vec<(NodeId, String, std::net::SocketAddr, std::net::SocketAddr)>,
    pub(crate) killed: Arc<Mutex<BTreeSet<NodeId>>>,
}

impl Targets {
    /// The `n`-th live node of `dc` (any live node if `dc` has none).
    pub(crate) fn pick(
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

impl Targets {
    /// The sim's nodes, none killed yet.
    pub(crate) fn of(sim: &Sim) -> Self {
        Targets {
            nodes: sim
                .nodes()
                .values()
                .map(|n| (n.id, n.dc.clone(), n.http, n.grpc))
                .collect(),
            killed: Arc::default(),
        }
    }
}

/// Each node's id, DC and handle (views and raft metrics).
pub(crate) fn sim_views(sim: &Sim) -> Vec<(NodeId, String, understudy_server::Node)> {
    sim.nodes()
        .values()
        .filter_map(|n| n.node().map(|node| (n.id, n.dc.clone(), node.clone())))
        .collect()
}

/// The registry workload while it runs.
pub(crate) struct Workload {
    http: reqwest::Client,
    targets: Targets,
    watchers: Vec<(Arc<Mutex<WatcherLog>>, tokio::task::JoinHandle<()>)>,
    providers: Vec<tokio::task::JoinHandle<()>>,
    writes: Arc<Mutex<Vec<Write>>>,
    lags: Arc<Mutex<BTreeMap<String, Histogram<u64>>>>,
    lag_windows: Arc<Mutex<LagWindows>>,
    sampler: Option<tokio::task::JoinHandle<()>>,
    stop_watchers: CancellationToken,
    stop_providers: CancellationToken,
    stop_sampler: CancellationToken,
}

impl Workload {
    /// Starts the watchers and waits until each has its first snapshot,
    /// so they see every registration.
    pub(crate) async fn watch(scenario: &Scenario, targets: Targets) -> Result<Self, ChaosError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let stop_watchers = CancellationToken::new();
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while watchers.iter().any(|(log, _)| lock(log).events == 0) {
            if Instant::now() > deadline {
                return Err(ChaosError::WatchersNotReady);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            http,
            targets,
            watchers,
            providers: Vec::new(),
            writes: Arc::default(),
            lags: Arc::default(),
            lag_windows: Arc::default(),
            sampler: None,
            stop_watchers,
            stop_providers: CancellationToken::new(),
            stop_sampler: CancellationToken::new(),
        })
    }

    /// Starts the view-lag sampler, its windows of `window` from `start`,
    /// and the churning providers.
    pub(crate) fn start(
        &mut self,
        scenario: &Scenario,
        sim: &Sim,
        start: Instant,
        window: Duration,
    ) {
        *lock(&self.lag_windows) = LagWindows {
            start: Some(start),
            window,
            count: OverTime::windows(scenario.duration, window),
            highest: BTreeMap::new(),
        };
        self.sampler = Some(tokio::spawn(sample(
            sim_views(sim),
            self.targets.killed.clone(),
            self.lags.clone(),
            self.lag_windows.clone(),
            self.stop_sampler.clone(),
        )));
        for (dc_index, (dc, _)) in scenario.dcs.iter().enumerate() {
            for p in 0..scenario.providers {
                let seed = scenario.seed ^ ((dc_index as u64) << 32) ^ u64::from(p);
                self.providers.push(tokio::spawn(provide(
                    self.http.clone(),
                    self.targets.clone(),
                    dc.clone(),
                    (dc_index, p),
                    scenario.write_interval,
                    StdRng::seed_from_u64(seed),
                    self.writes.clone(),
                    self.stop_providers.clone(),
                )));
            }
        }
    }

    /// Stops the churning providers and waits for their last writes.
    pub(crate) async fn stop_writing(&mut self) {
        self.stop_providers.cancel();
        for p in self.providers.drain(..) {
            let _ = p.await;
        }
    }

    /// Stops the sampler; then checks every acknowledged write against
    /// every live node, and waits (up to 10 s) for the watchers to settle
    /// on the registry's list before judging them.
    pub(crate) async fn finish(mut self) -> Result<Finished, ChaosError> {
        self.stop_sampler.cancel();
        if let Some(sampler) = self.sampler.take() {
            let _ = sampler.await;
        }
        let view_lag_ms = lock(&self.lag_windows).series();
        let writes = std::mem::take(&mut *lock(&self.writes));
        let expected = expected_state(&writes);
        let mut lists = BTreeMap::new();
        for (id, _, addr, _) in &self.targets.nodes {
            if lock(&self.targets.killed).contains(id) {
                continue;
            }
            lists.insert(*id, list(&self.http, *addr).await?);
        }
        let reference = lists.values().next().cloned().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && self
                .watchers
                .iter()
                .any(|(log, _)| lock(log).current != reference)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.stop_watchers.cancel();
        for (_, task) in &self.watchers {
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
        for (dc, h) in lock(&self.lags).iter() {
            dcs.entry(dc.clone()).or_default().view_lag = DelaySummary::of_micros(h);
        }
        let mut watch_report = WatchReport {
            watchers: self.watchers.len() as u64,
            ..WatchReport::default()
        };
        let mut r2v: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
        let registered: Vec<&Write> = writes
            .iter()
            .filter(|w| w.kind == Kind::Register && matches!(w.outcome, Outcome::Acked))
            .filter(|w| expected.contains_key(&w.key))
            .collect();
        for (log, _) in &self.watchers {
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
            watch_report.missed_final +=
                log.current.symmetric_difference(&reference).count() as u64;
            watch_report.missed = watch_report.missed_unseen + watch_report.missed_final;
        }
        for (dc, h) in r2v {
            dcs.entry(dc).or_default().register_to_visible = DelaySummary::of_micros(&h);
        }
        Ok(Finished {
            dcs,
            writes: report_writes,
            watch: watch_report,
            view_lag_ms,
        })
    }
}

/// The registry workload's part of the report.
pub(crate) struct Finished {
    pub(crate) dcs: BTreeMap<String, DcReport>,
    pub(crate) writes: WriteReport,
    pub(crate) watch: WatchReport,
    /// The report's `overTime.viewLagMs`.
    pub(crate) view_lag_ms: BTreeMap<String, Vec<Option<f64>>>,
}

/// The highest view lag sampled per DC in each window of the workload.
#[derive(Debug, Default)]
struct LagWindows {
    start: Option<Instant>,
    window: Duration,
    count: usize,
    /// Per DC, per window, µs (0: no sample).
    highest: BTreeMap<String, Vec<u64>>,
}

impl LagWindows {
    /// Records a sample of `dc` taken at `at`; one past the last window is
    /// left out.
    fn record(&mut self, dc: &str, at: Instant, us: u64) {
        let Some(start) = self.start else { return };
        let k = (at.saturating_duration_since(start).as_micros() / self.window.as_micros().max(1))
            as usize;
        if k >= self.count {
            return;
        }
        let count = self.count;
        let windows = self
            .highest
            .entry(dc.to_owned())
            .or_insert_with(|| vec![0; count]);
        windows[k] = windows[k].max(us);
    }

    /// Per DC, per window, ms to a tenth; `None` where nothing was sampled.
    fn series(&self) -> BTreeMap<String, Vec<Option<f64>>> {
        self.highest
            .iter()
            .map(|(dc, windows)| {
                let values = windows
                    .iter()
                    .map(|us| (*us > 0).then(|| (*us as f64 / 100.0).round() / 10.0))
                    .collect();
                (dc.clone(), values)
            })
            .collect()
    }
}

/// Samples every live node's view lag every 20 ms into its DC's histogram
/// and windows.
async fn sample(
    views: Vec<(NodeId, String, understudy_server::Node)>,
    killed: Arc<Mutex<BTreeSet<NodeId>>>,
    lags: Arc<Mutex<BTreeMap<String, Histogram<u64>>>>,
    windows: Arc<Mutex<LagWindows>>,
    stop: CancellationToken,
) {
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let killed = lock(&killed).clone();
        let now = Instant::now();
        let mut lags = lock(&lags);
        let mut windows = lock(&windows);
        for (id, dc, node) in &views {
            if killed.contains(id) {
                continue;
            }
            if let Some(lag) = node.view().lag() {
                let us = (lag.as_micros() as u64).max(1);
                let _ = lags.entry(dc.clone()).or_insert_with(histogram).record(us);
                windows.record(dc, now, us);
            }
        }
    }
}

/// Waits until every live node has applied what the most advanced one had
/// now and its view is fresh (lag under a tick plus the slowest link plus
/// its DC's apply delay plus 100 ms); answers how long that took, or
/// `None` after 30 s.
pub(crate) async fn converge(
    views: Vec<(NodeId, String, understudy_server::Node)>,
    killed: Arc<Mutex<BTreeSet<NodeId>>>,
    faults: understudy_server::faults::LinkFaults,
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
            let limit = n.config().chaos.tick
                + slowest
                + faults.apply_delay(&n.config().dc)
                + Duration::from_millis(100);
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
            progress_ms: 0,
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
                Some(watch_event::Event::Progress(_)) | None => {}
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
