//! Simulations of the client's cluster layer in virtual time: scripted
//! providers (a thread pool, a service-time distribution, a zone), a
//! network between zones (round-trip time, jitter, packet loss paid as TCP
//! retransmission delays), a registry list that changes after a push
//! delay, and consumers offering Poisson load through a real
//! [`Cluster`]. Everything runs on a paused tokio clock on one thread with
//! one seeded RNG, so minutes of traffic take seconds and a run replays
//! exactly from its seed.
//!
//! Two scenarios: [`zones`] (seed 000: a whole zone killed and restored
//! under cross-zone lag and loss) and [`balancers`] (seed 001: unequal
//! instances under the same offered load).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use understudy_client::cluster::balance::{
    ConsistentHash, LeastActive, LoadBalance, PeakEwmaP2c, RoundRobin, ShortestResponse,
    WeightedRandom, ZoneFirstLeastActive,
};
use understudy_client::cluster::breaker::BreakerRules;
use understudy_client::cluster::route::{Level, ZoneMode, ZoneRouter};
use understudy_client::cluster::{
    CallFailure, Cluster, ClusterBuilder, Invocation, Outcome, Strategy,
};
use understudy_client::Instance;

/// A log-normal service time: `median × e^(σ·N(0,1))`.
#[derive(Debug, Clone, Copy)]
pub struct ServiceTime {
    /// The median.
    pub median: Duration,
    /// The spread of the logarithm.
    pub sigma: f64,
}

impl ServiceTime {
    fn sample(self, rng: &mut StdRng) -> Duration {
        self.median.mul_f64((self.sigma * normal(rng)).exp())
    }
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// One simulated provider.
#[derive(Debug)]
struct Provider {
    ip: String,
    zone: String,
    threads: Arc<Semaphore>,
    service: ServiceTime,
    alive: AtomicBool,
    /// Bumped on every kill, so a call in flight across a kill fails.
    generation: AtomicU64,
}

/// The network between zones.
#[derive(Debug, Clone)]
pub struct Network {
    /// Round trip within a zone: uniform in this range.
    pub local_rtt: (Duration, Duration),
    /// Round trip across zones: uniform in this range.
    pub cross_rtt: (Duration, Duration),
    /// Packet loss across zones outside spikes.
    pub cross_loss: f64,
    /// Loss spikes: (from, to, loss) in seconds of the run.
    pub spikes: Vec<(f64, f64, f64)>,
    /// The minimum TCP retransmission timeout a lost packet costs (it
    /// doubles for each further loss of the same packet).
    pub min_rto: Duration,
}

/// The world the calls run in.
#[derive(Debug)]
struct World {
    start: Instant,
    network: Network,
    providers: BTreeMap<String, Arc<Provider>>,
    rng: Mutex<StdRng>,
    /// A provider gives up on a call after this long (Dubbo's provider
    /// timeout) and answers with a failure.
    provider_timeout: Duration,
}

impl World {
    fn rng(&self) -> std::sync::MutexGuard<'_, StdRng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One way of one packet from `a` to `b`, retransmissions included.
    fn one_way(&self, a: &str, b: &str) -> Duration {
        let elapsed = self.start.elapsed().as_secs_f64();
        let (range, loss) = if a == b {
            (self.network.local_rtt, 0.0)
        } else {
            let spike = self
                .network
                .spikes
                .iter()
                .find(|(from, to, _)| (*from..*to).contains(&elapsed))
                .map(|s| s.2);
            (
                self.network.cross_rtt,
                spike.unwrap_or(self.network.cross_loss),
            )
        };
        let mut rng = self.rng();
        let rtt = if range.1 > range.0 {
            rng.random_range(range.0..range.1)
        } else {
            range.0
        };
        let mut delay = rtt / 2;
        let mut rto = self.network.min_rto.max(rtt);
        while loss > 0.0 && rng.random_bool(loss.min(1.0)) {
            delay += rto;
            rto *= 2;
        }
        delay
    }

    /// The caller's call to one instance.
    async fn call(self: Arc<Self>, from: String, to: Arc<Instance>) -> Result<(), CallFailure> {
        let Some(p) = self.providers.get(&to.ip).cloned() else {
            return Err(CallFailure::NotSent {
                message: "no such host".into(),
            });
        };
        let generation = p.generation.load(Ordering::SeqCst);
        if !p.alive.load(Ordering::SeqCst) {
            // The host answers a connection to a dead port with a reset.
            tokio::time::sleep(self.one_way(&from, &p.zone) * 2).await;
            return Err(CallFailure::NotSent {
                message: "connection refused".into(),
            });
        }
        let killed =
            || !p.alive.load(Ordering::SeqCst) || p.generation.load(Ordering::SeqCst) != generation;
        let reset = || CallFailure::Transport {
            message: "connection reset: the provider died with the call in flight".into(),
        };
        // Tokio's timer ticks in whole milliseconds, so the request's way
        // and its service are one sleep (and the answer's way another):
        // fewer sleeps, less rounding. The thread is taken when the call
        // is sent rather than when it lands, a sub-millisecond shift.
        // Dubbo's fixed pool has no queue: a full pool refuses the call
        // before running it.
        let request = self.one_way(&from, &p.zone);
        let Ok(_thread) = p.threads.clone().try_acquire_owned() else {
            tokio::time::sleep(request + self.one_way(&p.zone, &from)).await;
            return Err(CallFailure::NotSent {
                message: "thread pool exhausted; the call was refused before it ran".into(),
            });
        };
        let work = p.service.sample(&mut self.rng());
        if work > self.provider_timeout {
            tokio::time::sleep(request + self.provider_timeout).await;
            return Err(CallFailure::Transport {
                message: "the provider gave up at its timeout".into(),
            });
        }
        tokio::time::sleep(request + work).await;
        if killed() {
            return Err(reset());
        }
        tokio::time::sleep(self.one_way(&p.zone, &from)).await;
        Ok(())
    }
}

fn instance(p: &Provider) -> Instance {
    Instance {
        instance_id: format!("{}#20880", p.ip),
        ip: p.ip.clone(),
        port: 20880,
        weight: 1.0,
        healthy: true,
        enabled: true,
        cluster: "DEFAULT".into(),
        zone: p.zone.clone(),
        metadata: BTreeMap::new(),
    }
}

/// One finished call.
#[derive(Debug, Clone)]
struct Record {
    /// Seconds into the run when the call started.
    at: f64,
    zone: String,
    idempotent: bool,
    latency: Duration,
    /// `Some(same zone)` when a provider answered.
    answered: Option<bool>,
}

/// One consumer zone's load.
#[derive(Debug, Clone)]
struct Load {
    zone: String,
    /// Calls per second (Poisson arrivals).
    rate: f64,
    seconds: f64,
    /// Share of calls that are not idempotent.
    writes: f64,
}

/// Offers a zone's load through its cluster.
async fn offer(world: Arc<World>, cluster: Cluster, load: Load, records: Arc<Mutex<Vec<Record>>>) {
    let Load {
        zone,
        rate,
        seconds,
        writes,
    } = load;
    let mut calls = tokio::task::JoinSet::new();
    let mut next = 0.0;
    loop {
        let (gap, write, key) = {
            let mut rng = world.rng();
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            (
                -u.ln() / rate,
                rng.random_bool(writes),
                rng.random_range(0..10_000u32),
            )
        };
        // Arrivals are kept on an absolute schedule: sleeping each gap
        // would round every one up to the timer's millisecond.
        next += gap;
        if next >= seconds {
            break;
        }
        tokio::time::sleep_until(world.start + Duration::from_secs_f64(next)).await;
        let at = next;
        let mut invocation = Invocation::new(if write { "update" } else { "get" })
            .argument(key.to_string())
            .attach("zone", zone.clone());
        if write {
            invocation = invocation.not_idempotent();
        }
        let (world, cluster, zone, records) = (
            world.clone(),
            cluster.clone(),
            zone.clone(),
            records.clone(),
        );
        calls.spawn(async move {
            let started = Instant::now();
            let from = zone.clone();
            let w = world.clone();
            let result = cluster
                .invoke(invocation, move |i| w.clone().call(from.clone(), i))
                .await;
            let answered = match &result {
                Ok(Outcome::Answered { instance, .. }) => Some(instance.zone == zone),
                _ => None,
            };
            records
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Record {
                    at,
                    zone,
                    idempotent: !write,
                    latency: started.elapsed(),
                    answered,
                });
        });
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}

/// Runs `body` on a paused clock on one thread.
fn virtual_time<F: std::future::Future>(body: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap_or_else(|e| panic!("a current-thread runtime: {e}"));
    runtime.block_on(body)
}

fn percentile(h: &Histogram<u64>, q: f64) -> Duration {
    Duration::from_micros(if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).unwrap_or_else(|e| panic!("histogram: {e}"))
}

/// The seed-000 scenario's parameters.
#[derive(Debug, Clone)]
pub struct ZoneParams {
    /// Providers per zone.
    pub per_zone: usize,
    /// Threads per provider.
    pub threads: usize,
    /// Service time of every provider.
    pub service: ServiceTime,
    /// The network.
    pub network: Network,
    /// Normal load per consumer zone, calls per second.
    pub normal_rate: f64,
    /// The load factor applied (the seed tested 3× normal).
    pub load_factor: f64,
    /// Share of calls that are not idempotent.
    pub writes: f64,
    /// When the hz zone is killed, and when it is restored, in seconds.
    pub kill_at: f64,
    /// When hz comes back.
    pub restore_at: f64,
    /// The run's length in seconds.
    pub seconds: f64,
    /// Delay between a provider dying or starting and the consumers'
    /// lists showing it.
    pub push_delay: Duration,
    /// The consumer's timeout (Dubbo `timeout`).
    pub consumer_timeout: Duration,
    /// The provider's timeout.
    pub provider_timeout: Duration,
    /// Failover retries.
    pub retries: u32,
}

impl ZoneParams {
    /// The scenario as the seed describes it; what the seed leaves open is
    /// stated in docs/client.md ("Simulations") beside the results.
    pub fn seed() -> Self {
        Self {
            per_zone: 4,
            threads: 200,
            service: ServiceTime {
                median: Duration::from_millis(8),
                sigma: 0.5,
            },
            network: Network {
                local_rtt: (Duration::from_micros(200), Duration::from_micros(500)),
                cross_rtt: (Duration::from_millis(10), Duration::from_millis(30)),
                cross_loss: 0.001,
                spikes: vec![(20.0, 50.0, 0.03)],
                min_rto: Duration::from_millis(200),
            },
            normal_rate: 100.0,
            load_factor: 3.0,
            writes: 0.2,
            kill_at: 60.0,
            restore_at: 90.0,
            seconds: 120.0,
            push_delay: Duration::from_millis(100),
            consumer_timeout: Duration::from_millis(3000),
            provider_timeout: Duration::from_millis(2500),
            retries: 2,
        }
    }

    /// The same timeline, `factor` times as long.
    pub fn scaled(mut self, factor: f64) -> Self {
        self.kill_at *= factor;
        self.restore_at *= factor;
        self.seconds *= factor;
        for spike in &mut self.network.spikes {
            spike.0 *= factor;
            spike.1 *= factor;
        }
        self
    }
}

/// One consumer configuration of the zone scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combination {
    /// Dubbo's defaults: no zone routing, weighted random, failover.
    DubboDefaults,
    /// The seed's extension: prefer-local router, zone-first least
    /// active, zone-aware with the consumer timeout on both sides.
    SeedExtension,
    /// understudy's recommendation: threshold zone router with
    /// hysteresis, peak-EWMA power of two choices, zone-aware with a
    /// short local timeout, breakers on.
    Understudy,
}

impl Combination {
    /// All, in table order.
    pub const ALL: [Combination; 3] = [
        Combination::DubboDefaults,
        Combination::SeedExtension,
        Combination::Understudy,
    ];

    /// The row's label.
    pub fn label(self) -> &'static str {
        match self {
            Combination::DubboDefaults => "no router + random + failover(2)",
            Combination::SeedExtension => "prefer-local + zone-first least active + zone-aware",
            Combination::Understudy => "threshold zone + p2c peak-EWMA + zone-aware, breakers",
        }
    }

    fn builder(self, p: &ZoneParams, zone: &str) -> ClusterBuilder {
        let base = Cluster::builder()
            .local_zone(zone)
            .timeout(p.consumer_timeout)
            .breaker(BreakerRules::disabled());
        match self {
            Combination::DubboDefaults => base
                .balancer(WeightedRandom::new())
                .strategy(Strategy::Failover { retries: p.retries }),
            Combination::SeedExtension => base
                .router(ZoneRouter::prefer_local())
                .balancer(ZoneFirstLeastActive::new())
                .strategy(Strategy::zone_aware(p.consumer_timeout, p.consumer_timeout)),
            Combination::Understudy => {
                let threshold = ZoneMode::Threshold {
                    fall_below: Level {
                        count: 2,
                        share: 0.25,
                    },
                    recover_at: Level {
                        count: 3,
                        share: 0.35,
                    },
                };
                base.router(ZoneRouter::new(threshold).unwrap_or_else(|e| panic!("{e}")))
                    .balancer(PeakEwmaP2c)
                    .breaker(BreakerRules::default())
                    .strategy(Strategy::ZoneAware {
                        local_timeout: Duration::from_millis(500),
                        cross_timeout: Duration::from_millis(1500),
                        local_retries: 1,
                    })
            }
        }
    }
}

/// One row of the zone table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ZoneRow {
    /// The combination.
    pub combination: &'static str,
    /// Calls made.
    pub calls: usize,
    /// Answered calls served in the caller's zone while every zone was
    /// healthy (before the kill, and from one second after the restore).
    pub same_zone_healthy: f64,
    /// The same over the whole run.
    pub same_zone_all: f64,
    /// Failed calls over all calls.
    pub error_rate: f64,
    /// Idempotent calls that failed while hz was down.
    pub idempotent_failed_during_outage: usize,
    /// Non-idempotent calls that failed while hz was down (those whose
    /// request may have reached a provider that then died).
    pub writes_failed_during_outage: usize,
    /// Median latency of answered calls, ms.
    pub p50_ms: f64,
    /// 99th percentile latency of answered calls, ms.
    pub p99_ms: f64,
    /// From the kill until the last failed call, s (0 if none failed).
    pub failing_after_kill_s: f64,
    /// From the restore until every later 100 ms window of hz consumers'
    /// calls was at least 99% same-zone, s; `None` if that never happened.
    pub recover_after_restore_s: Option<f64>,
}

/// Runs the seed-000 scenario for one combination.
pub fn zone_run(p: &ZoneParams, combination: Combination, seed: u64) -> ZoneRow {
    virtual_time(async {
        let mut providers = BTreeMap::new();
        for (z, zone) in ["hz", "sh"].iter().enumerate() {
            for k in 0..p.per_zone {
                let ip = format!("10.{z}.0.{}", k + 1);
                providers.insert(
                    ip.clone(),
                    Arc::new(Provider {
                        ip,
                        zone: (*zone).into(),
                        threads: Arc::new(Semaphore::new(p.threads)),
                        service: p.service,
                        alive: AtomicBool::new(true),
                        generation: AtomicU64::new(0),
                    }),
                );
            }
        }
        let world = Arc::new(World {
            start: Instant::now(),
            network: p.network.clone(),
            providers,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            provider_timeout: p.provider_timeout,
        });
        let list = {
            let world = world.clone();
            move |with_hz: bool| -> Arc<[Instance]> {
                world
                    .providers
                    .values()
                    .filter(|p| with_hz || p.zone != "hz")
                    .map(|p| instance(p))
                    .collect()
            }
        };
        let (tx, rx) = watch::channel(list(true));
        let records = Arc::new(Mutex::new(Vec::new()));
        let mut load = tokio::task::JoinSet::new();
        for zone in ["hz", "sh"] {
            let cluster = combination
                .builder(p, zone)
                .seed(seed ^ zone.len() as u64)
                .build_on("com.example.UserService", rx.clone())
                .unwrap_or_else(|e| panic!("{e}"));
            let consumers = Load {
                zone: zone.into(),
                rate: p.normal_rate * p.load_factor,
                seconds: p.seconds,
                writes: p.writes,
            };
            load.spawn(offer(world.clone(), cluster, consumers, records.clone()));
        }
        // The zone dies: processes killed, their sessions close, the
        // registry pushes the removal after the push delay.
        let timeline = {
            let world = world.clone();
            let p = p.clone();
            async move {
                tokio::time::sleep(Duration::from_secs_f64(p.kill_at)).await;
                for pr in world.providers.values().filter(|pr| pr.zone == "hz") {
                    pr.alive.store(false, Ordering::SeqCst);
                    pr.generation.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(p.push_delay).await;
                tx.send_replace(list(false));
                tokio::time::sleep(Duration::from_secs_f64(p.restore_at - p.kill_at)).await;
                for pr in world.providers.values().filter(|pr| pr.zone == "hz") {
                    pr.alive.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(p.push_delay).await;
                tx.send_replace(list(true));
            }
        };
        load.spawn(timeline);
        while load.join_next().await.is_some() {}
        let records = std::mem::take(&mut *records.lock().unwrap_or_else(|e| e.into_inner()));
        summarise_zones(p, combination, &records)
    })
}

fn share(hits: usize, all: usize) -> f64 {
    if all == 0 {
        1.0
    } else {
        hits as f64 / all as f64
    }
}

fn summarise_zones(p: &ZoneParams, combination: Combination, records: &[Record]) -> ZoneRow {
    let healthy = |r: &Record| r.at < p.kill_at || r.at >= p.restore_at + 1.0;
    let outage = |r: &Record| r.at >= p.kill_at && r.at < p.restore_at;
    let answered: Vec<&Record> = records.iter().filter(|r| r.answered.is_some()).collect();
    let same = |rs: &[&Record]| {
        share(
            rs.iter().filter(|r| r.answered == Some(true)).count(),
            rs.len(),
        )
    };
    let healthy_answered: Vec<&Record> = answered.iter().copied().filter(|r| healthy(r)).collect();
    let mut h = histogram();
    for r in &answered {
        let _ = h.record(r.latency.as_micros().max(1) as u64);
    }
    let failed: Vec<&Record> = records.iter().filter(|r| r.answered.is_none()).collect();
    let last_failure = failed
        .iter()
        .filter(|r| r.at >= p.kill_at)
        .map(|r| r.at)
        .fold(None, |m: Option<f64>, at| Some(m.map_or(at, |m| m.max(at))));
    // Recovery: the first second after the restore from which every
    // window of hz consumers' calls stays at or above 99% same-zone.
    let mut windows: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for r in answered
        .iter()
        .filter(|r| r.zone == "hz" && r.at >= p.restore_at)
    {
        let w = windows
            .entry(((r.at - p.restore_at) * 10.0) as u64)
            .or_default();
        w.1 += 1;
        if r.answered == Some(true) {
            w.0 += 1;
        }
    }
    let recovered_from = windows
        .iter()
        .rev()
        .take_while(|(_, (same, all))| share(*same, *all) >= 0.99)
        .last()
        .map(|(w, _)| *w as f64 / 10.0);
    ZoneRow {
        combination: combination.label(),
        calls: records.len(),
        same_zone_healthy: same(&healthy_answered),
        same_zone_all: same(&answered),
        error_rate: share(failed.len(), records.len()),
        idempotent_failed_during_outage: failed
            .iter()
            .filter(|r| outage(r) && r.idempotent)
            .count(),
        writes_failed_during_outage: failed.iter().filter(|r| outage(r) && !r.idempotent).count(),
        p50_ms: percentile(&h, 0.5).as_secs_f64() * 1000.0,
        p99_ms: percentile(&h, 0.99).as_secs_f64() * 1000.0,
        failing_after_kill_s: last_failure.map_or(0.0, |at| at - p.kill_at),
        recover_after_restore_s: recovered_from,
    }
}

/// The seed-001 scenario's parameters.
#[derive(Debug, Clone)]
pub struct BalancerParams {
    /// Each instance's service time.
    pub instances: Vec<ServiceTime>,
    /// Threads per instance (a full pool refuses).
    pub threads: usize,
    /// Offered load, calls per second.
    pub rate: f64,
    /// Seconds of load.
    pub seconds: f64,
    /// The consumer's timeout.
    pub timeout: Duration,
    /// Failover retries.
    pub retries: u32,
}

impl BalancerParams {
    /// Four unequal instances at the seed's 1000 calls per second.
    pub fn seed() -> Self {
        let ms = Duration::from_millis;
        Self {
            instances: vec![
                ServiceTime {
                    median: ms(8),
                    sigma: 0.4,
                },
                ServiceTime {
                    median: ms(8),
                    sigma: 0.4,
                },
                ServiceTime {
                    median: ms(16),
                    sigma: 0.5,
                },
                ServiceTime {
                    median: ms(30),
                    sigma: 0.8,
                },
            ],
            threads: 10,
            rate: 1000.0,
            seconds: 60.0,
            timeout: Duration::from_millis(1000),
            retries: 2,
        }
    }
}

/// One row of the balancer table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BalancerRow {
    /// The balancer.
    pub balancer: &'static str,
    /// Mean latency of answered calls, ms.
    pub mean_ms: f64,
    /// 99th percentile latency of answered calls, ms.
    pub p99_ms: f64,
    /// Answered calls per second.
    pub throughput: f64,
    /// Failed calls over all calls.
    pub error_rate: f64,
    /// Share of answered calls served by each instance.
    pub shares: Vec<f64>,
}

/// Makes a fresh balancer for a run.
pub type MakeBalancer = Arc<dyn Fn() -> Box<dyn LoadBalance> + Send + Sync>;

/// The balancers compared, by name.
pub fn balancers() -> Vec<(&'static str, MakeBalancer)> {
    fn entry<B: LoadBalance + 'static>(
        name: &'static str,
        make: fn() -> B,
    ) -> (&'static str, MakeBalancer) {
        (name, Arc::new(move || Box::new(make())))
    }
    vec![
        entry("weighted random", WeightedRandom::new),
        entry("smooth weighted round robin", RoundRobin::new),
        entry("least active", LeastActive::new),
        entry("shortest response", ShortestResponse::new),
        entry("consistent hash (160 vnodes)", ConsistentHash::new),
        entry("p2c peak-EWMA", || PeakEwmaP2c),
        entry("zone-first least active", ZoneFirstLeastActive::new),
    ]
}

/// Runs the seed-001 scenario for one balancer.
pub fn balancer_run(
    p: &BalancerParams,
    name: &'static str,
    make: &(dyn Fn() -> Box<dyn LoadBalance> + Send + Sync),
    seed: u64,
) -> BalancerRow {
    virtual_time(async {
        let providers: BTreeMap<String, Arc<Provider>> = p
            .instances
            .iter()
            .enumerate()
            .map(|(k, service)| {
                let ip = format!("10.0.0.{}", k + 1);
                (
                    ip.clone(),
                    Arc::new(Provider {
                        ip,
                        zone: "hz".into(),
                        threads: Arc::new(Semaphore::new(p.threads)),
                        service: *service,
                        alive: AtomicBool::new(true),
                        generation: AtomicU64::new(0),
                    }),
                )
            })
            .collect();
        let list: Arc<[Instance]> = providers.values().map(|p| instance(p)).collect();
        let world = Arc::new(World {
            start: Instant::now(),
            network: Network {
                local_rtt: (Duration::from_micros(200), Duration::from_micros(500)),
                cross_rtt: (Duration::ZERO, Duration::ZERO),
                cross_loss: 0.0,
                spikes: Vec::new(),
                min_rto: Duration::from_millis(200),
            },
            providers,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            provider_timeout: p.timeout,
        });
        let (_tx, rx) = watch::channel(list);
        let cluster = Cluster::builder()
            .local_zone("hz")
            .balancer(Boxed(make()))
            .timeout(p.timeout)
            .breaker(BreakerRules::disabled())
            .strategy(Strategy::Failover { retries: p.retries })
            .seed(seed)
            .build_on("com.example.UserService", rx)
            .unwrap_or_else(|e| panic!("{e}"));
        let records = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
        let counting = CountingCluster {
            cluster,
            served: served.clone(),
        };
        offer_counted(world.clone(), counting, p.rate, p.seconds, records.clone()).await;
        let records = std::mem::take(&mut *records.lock().unwrap_or_else(|e| e.into_inner()));
        let mut h = histogram();
        let mut sum = 0.0;
        let answered: Vec<&Record> = records.iter().filter(|r| r.answered.is_some()).collect();
        for r in &answered {
            let _ = h.record(r.latency.as_micros().max(1) as u64);
            sum += r.latency.as_secs_f64();
        }
        let served = served.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = served.values().sum();
        BalancerRow {
            balancer: name,
            mean_ms: if answered.is_empty() {
                0.0
            } else {
                sum / answered.len() as f64 * 1000.0
            },
            p99_ms: percentile(&h, 0.99).as_secs_f64() * 1000.0,
            throughput: answered.len() as f64 / p.seconds,
            error_rate: share(records.len() - answered.len(), records.len()),
            shares: (1..=p.instances.len())
                .map(|k| {
                    share(
                        served.get(&format!("10.0.0.{k}")).copied().unwrap_or(0),
                        total,
                    )
                })
                .collect(),
        }
    })
}

/// A boxed balancer as a balancer.
#[derive(Debug)]
struct Boxed(Box<dyn LoadBalance>);

impl LoadBalance for Boxed {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn pick(
        &self,
        targets: &[understudy_client::cluster::Target],
        invocation: &Invocation,
        cx: &mut understudy_client::cluster::balance::PickContext<'_>,
    ) -> usize {
        self.0.pick(targets, invocation, cx)
    }
}

struct CountingCluster {
    cluster: Cluster,
    served: Arc<Mutex<BTreeMap<String, usize>>>,
}

/// Offers Poisson load to one cluster and counts who served each call.
async fn offer_counted(
    world: Arc<World>,
    target: CountingCluster,
    rate: f64,
    seconds: f64,
    records: Arc<Mutex<Vec<Record>>>,
) {
    let mut calls = tokio::task::JoinSet::new();
    let mut next = 0.0;
    loop {
        let (gap, key) = {
            let mut rng = world.rng();
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            (-u.ln() / rate, rng.random_range(0..10_000u32))
        };
        // Arrivals are kept on an absolute schedule: sleeping each gap
        // would round every one up to the timer's millisecond.
        next += gap;
        if next >= seconds {
            break;
        }
        tokio::time::sleep_until(world.start + Duration::from_secs_f64(next)).await;
        let at = next;
        let invocation = Invocation::new("get").argument(key.to_string());
        let (w, cluster, served, records) = (
            world.clone(),
            target.cluster.clone(),
            target.served.clone(),
            records.clone(),
        );
        calls.spawn(async move {
            let started = Instant::now();
            let result = cluster
                .invoke(invocation, move |i| w.clone().call("hz".into(), i))
                .await;
            let answered = match &result {
                Ok(Outcome::Answered { instance, .. }) => {
                    *served
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(instance.ip.clone())
                        .or_default() += 1;
                    Some(true)
                }
                _ => None,
            };
            records
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Record {
                    at,
                    zone: "hz".into(),
                    idempotent: true,
                    latency: started.elapsed(),
                    answered,
                });
        });
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}
