//! Consumers: per zone, N tasks that each use the bundled client as an
//! application would: a [`Client`] whose endpoints are the registry nodes
//! with their DCs (its own DC's first), a [`Directory`] of the serving
//! service, and a [`Cluster`] built from the scenario's router, balancer,
//! strategy, timeouts, breakers and retry budget. Each calls the
//! providers over TCP at Poisson arrivals, across the call network, and
//! records every call's outcome.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_client::cluster::balance::{
    ConsistentHash, LeastActive, PeakEwmaP2c, RoundRobin, ShortestResponse, WeightedRandom,
    ZoneFirstLeastActive,
};
use understudy_client::cluster::breaker::BreakerRules;
use understudy_client::cluster::limit::RetryBudget;
use understudy_client::cluster::route::{Level, ZoneMode, ZoneRouter};
use understudy_client::cluster::{CallFailure, Cluster, ClusterError, Invocation, Outcome};
use understudy_client::{Client, Directory, Instance};

use crate::callnet::{CallNet, Passage};
use crate::lock;
use crate::observe::{DirectoryLog, RegistryTimeline};
use crate::provider::{serving_key, RegistryNode};
use crate::scenario::{BalancerSpec, ConsumerGroup, RouterSpec};

/// One planned call: when, whether idempotent, what it hashes on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// From the start of the workload.
    pub at: Duration,
    /// Whether the call may run twice.
    pub idempotent: bool,
    /// The argument a consistent-hash balancer hashes.
    pub key: u32,
}

/// The calls of consumer `index` (from 1) of `group` within `horizon`:
/// Poisson arrivals at the group's rate, from a seed of its own, so one
/// seed gives the same arrivals in every run.
pub fn arrivals(seed: u64, group: &ConsumerGroup, index: u32, horizon: Duration) -> Vec<Arrival> {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ seed;
    for byte in group.zone.bytes().chain(index.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut rng = StdRng::seed_from_u64(hash);
    let mut at = 0.0;
    let mut out = Vec::new();
    loop {
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        at += -u.ln() / group.rate;
        if at >= horizon.as_secs_f64() {
            return out;
        }
        out.push(Arrival {
            at: Duration::from_secs_f64(at),
            idempotent: !rng.random_bool(group.non_idempotent),
            key: rng.random_range(0..10_000),
        });
    }
}

/// How a call failed, as the report counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No instance to call.
    NoProvider,
    /// An attempt or the deadline ran out.
    Timeout,
    /// Refused before it ran (connection refused, pool full).
    Refused,
    /// Lost after it may have run (reset, provider timeout).
    Transport,
    /// Every candidate's breaker open.
    CircuitOpen,
    /// A retry was needed, the budget was spent.
    Budget,
    /// Anything else (a limit).
    Other,
}

impl Failure {
    fn of(error: &ClusterError) -> Self {
        match error {
            ClusterError::NoProvider { .. } => Failure::NoProvider,
            ClusterError::Timeout { .. } | ClusterError::DeadlineExceeded { .. } => {
                Failure::Timeout
            }
            ClusterError::Failed { failure, .. } => match failure {
                CallFailure::NotSent { .. } => Failure::Refused,
                CallFailure::Transport { .. } | CallFailure::Application { .. } => {
                    Failure::Transport
                }
            },
            ClusterError::CircuitOpen { .. } => Failure::CircuitOpen,
            ClusterError::BudgetExhausted { .. } => Failure::Budget,
            _ => Failure::Other,
        }
    }
}

/// One finished call.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// When it started, from the start of the workload.
    pub(crate) at: Duration,
    pub(crate) idempotent: bool,
    pub(crate) latency: Duration,
    /// `Ok(same zone)` when a provider answered.
    pub(crate) outcome: Result<bool, Failure>,
    /// Whether an attempt went to an instance already removed from the
    /// leader's view.
    pub(crate) stale: bool,
}

/// Idle connections to providers, per address.
#[derive(Debug, Default)]
struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<TcpStream>>>,
}

impl Pool {
    /// A pooled connection that is still open, or a new one.
    async fn take(&self, address: SocketAddr) -> std::io::Result<TcpStream> {
        loop {
            let pooled = lock(&self.idle).get_mut(&address).and_then(Vec::pop);
            let Some(stream) = pooled else { break };
            // A provider that died or closed it shows as readable (EOF).
            let mut probe = [0u8; 1];
            if let Err(e) = stream.try_read(&mut probe) {
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    return Ok(stream);
                }
            }
        }
        let stream = TcpStream::connect(address).await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    fn put(&self, address: SocketAddr, stream: TcpStream) {
        lock(&self.idle).entry(address).or_default().push(stream);
    }
}

/// Everything one consumer's calls need.
#[derive(Debug)]
struct Caller {
    zone: String,
    net: CallNet,
    pool: Pool,
    registry: RegistryTimeline,
}

impl Caller {
    /// One attempt on `instance`: across the network, one request line,
    /// one answer line, back across the network.
    async fn call(&self, instance: &Instance, stale: &AtomicBool) -> Result<(), CallFailure> {
        let Ok(ip) = instance.ip.parse::<std::net::IpAddr>() else {
            return Err(CallFailure::NotSent {
                message: format!("no such host {}", instance.ip),
            });
        };
        let address = SocketAddr::new(ip, instance.port);
        let key = format!("{}:{}", instance.ip, instance.port);
        if self.registry.removed(&key, Instant::now()) {
            stale.store(true, Ordering::Relaxed);
        }
        cross(self.net.send(&self.zone, &instance.zone)).await;
        let stream = self
            .pool
            .take(address)
            .await
            .map_err(|e| CallFailure::NotSent {
                message: format!("connect {address}: {e}"),
            })?;
        let (read, mut write) = stream.into_split();
        if let Err(e) = write.write_all(b"C\n").await {
            return Err(CallFailure::NotSent {
                message: format!("send to {address}: {e}"),
            });
        }
        let mut reader = BufReader::new(read);
        let mut answer = String::new();
        let read = reader.read_line(&mut answer).await;
        let reset = || CallFailure::Transport {
            message: format!("{address} reset the connection with the call in flight"),
        };
        match read {
            Ok(0) | Err(_) => return Err(reset()),
            Ok(_) => {}
        }
        let stream = reader.into_inner().reunite(write).map_err(|_| reset())?;
        match answer.trim() {
            "OK" => {
                self.pool.put(address, stream);
                cross(self.net.send(&instance.zone, &self.zone)).await;
                Ok(())
            }
            "BUSY" => {
                self.pool.put(address, stream);
                Err(CallFailure::NotSent {
                    message: format!("{address} is busy: refused before it ran"),
                })
            }
            _ => Err(CallFailure::Transport {
                message: format!("{address} gave up at its timeout"),
            }),
        }
    }
}

/// Waits out one way of a packet; a cut link never delivers.
async fn cross(passage: Passage) {
    match passage {
        Passage::After(delay) if delay.is_zero() => {}
        Passage::After(delay) => tokio::time::sleep(delay).await,
        Passage::Cut => std::future::pending().await,
    }
}

/// A consumer ready to call: its client, directory and cluster.
pub(crate) struct Consumer {
    pub(crate) zone: String,
    client: Client,
    pub(crate) directory: Directory,
    cluster: Cluster,
    arrivals: Vec<Arrival>,
    caller: Arc<Caller>,
    pub(crate) log: DirectoryLog,
}

impl Consumer {
    /// Builds consumer `index` of `group`; its directory starts following
    /// the serving service at once.
    #[allow(clippy::too_many_arguments)] // the parts of one consumer, each used once
    pub(crate) fn build(
        group: &ConsumerGroup,
        index: u32,
        seed: u64,
        horizon: Duration,
        registry: &[RegistryNode],
        net: CallNet,
        timeline: RegistryTimeline,
        observers: (&CancellationToken, &TaskTracker),
    ) -> Result<Self, understudy_client::ClientError> {
        let mut builder = Client::builder()
            .local_dc(group.zone.clone())
            .backoff(Duration::from_millis(50), Duration::from_secs(1))
            .connect_timeout(Duration::from_millis(500))
            .home_probe(Duration::from_millis(500), Duration::from_secs(5));
        for node in registry {
            builder = builder.endpoint(node.grpc.to_string(), Some(&node.dc));
        }
        let client = builder.build()?;
        let directory = client.directory(serving_key());
        let arrivals = arrivals(seed, group, index, horizon);
        let cluster = cluster(group, seed ^ u64::from(index))?.build(&directory)?;
        let log = DirectoryLog::follow(&directory, observers.0, observers.1);
        Ok(Self {
            zone: group.zone.clone(),
            client,
            directory,
            cluster,
            arrivals,
            caller: Arc::new(Caller {
                zone: group.zone.clone(),
                net,
                pool: Pool::default(),
                registry: timeline,
            }),
            log,
        })
    }

    /// Offers the planned calls from `start`; returns when the last one
    /// has finished.
    pub(crate) async fn run(self, start: Instant, records: Arc<Mutex<Vec<Record>>>) -> Self {
        let calls = TaskTracker::new();
        for arrival in &self.arrivals {
            tokio::time::sleep_until(start + arrival.at).await;
            let mut invocation = Invocation::new(if arrival.idempotent { "get" } else { "update" })
                .argument(arrival.key.to_string())
                .attach("zone", self.zone.clone());
            if !arrival.idempotent {
                invocation = invocation.not_idempotent();
            }
            let (cluster, caller, records, zone) = (
                self.cluster.clone(),
                self.caller.clone(),
                records.clone(),
                self.zone.clone(),
            );
            let (at, idempotent) = (arrival.at, arrival.idempotent);
            calls.spawn(async move {
                let stale = Arc::new(AtomicBool::new(false));
                let began = Instant::now();
                let attempt = {
                    let (caller, stale) = (caller.clone(), stale.clone());
                    move |instance: Arc<Instance>| {
                        let (caller, stale) = (caller.clone(), stale.clone());
                        async move { caller.call(&instance, &stale).await }
                    }
                };
                let result = cluster.invoke(invocation, attempt).await;
                let outcome = match &result {
                    Ok(Outcome::Answered { instance, .. }) => Ok(instance.zone == zone),
                    Ok(_) => Err(Failure::Other),
                    Err(e) => Err(Failure::of(e)),
                };
                lock(&records).push(Record {
                    at,
                    idempotent,
                    latency: began.elapsed(),
                    outcome,
                    stale: stale.load(Ordering::Relaxed),
                });
            });
        }
        calls.close();
        calls.wait().await;
        self
    }

    /// Stops the consumer's client.
    pub(crate) async fn stop(&self) {
        self.cluster.shutdown().await;
        self.client.shutdown().await;
    }
}

/// The cluster a group's consumers call through.
fn cluster(
    group: &ConsumerGroup,
    seed: u64,
) -> Result<understudy_client::cluster::ClusterBuilder, understudy_client::ClientError> {
    let mut builder = Cluster::builder()
        .local_zone(group.zone.clone())
        .strategy(group.strategy.clone())
        .timeout(group.timeout)
        .breaker(if group.breaker {
            BreakerRules::default()
        } else {
            BreakerRules::disabled()
        })
        .retry_budget(if group.budget {
            RetryBudget::default()
        } else {
            RetryBudget::unlimited()
        })
        .seed(seed);
    if let Some(deadline) = group.deadline {
        builder = builder.deadline(deadline);
    }
    builder = match group.router {
        RouterSpec::None => builder,
        RouterSpec::PreferLocal => builder.router(ZoneRouter::prefer_local()),
        RouterSpec::Strict => builder.router(ZoneRouter::new(ZoneMode::Strict)?),
        RouterSpec::Threshold {
            fall_count,
            fall_share,
            recover_count,
            recover_share,
        } => builder.router(ZoneRouter::new(ZoneMode::Threshold {
            fall_below: Level {
                count: fall_count,
                share: fall_share,
            },
            recover_at: Level {
                count: recover_count,
                share: recover_share,
            },
        })?),
    };
    Ok(match group.balancer {
        BalancerSpec::Random => builder.balancer(WeightedRandom::new()),
        BalancerSpec::RoundRobin => builder.balancer(RoundRobin::new()),
        BalancerSpec::LeastActive => builder.balancer(LeastActive::new()),
        BalancerSpec::ShortestResponse => builder.balancer(ShortestResponse::new()),
        BalancerSpec::ConsistentHash => builder.balancer(ConsistentHash::new()),
        BalancerSpec::P2c => builder.balancer(PeakEwmaP2c),
        BalancerSpec::ZoneFirst => builder.balancer(ZoneFirstLeastActive::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::serving;

    #[test]
    fn one_seed_gives_the_same_arrivals_and_another_seed_others() {
        let group = serving::consumer_group(&["hz", "2", "rate=200/s", "non-idempotent=20%"])
            .expect("a consumer line");
        let horizon = Duration::from_secs(5);
        let first = arrivals(7, &group, 1, horizon);
        assert_eq!(first, arrivals(7, &group, 1, horizon));
        assert_ne!(first, arrivals(8, &group, 1, horizon));
        assert_ne!(
            first,
            arrivals(7, &group, 2, horizon),
            "each consumer its own"
        );
        // About rate × horizon calls, a fifth of them not idempotent.
        assert!((850..1150).contains(&first.len()), "{}", first.len());
        let writes = first.iter().filter(|a| !a.idempotent).count() as f64;
        assert!((writes / first.len() as f64 - 0.2).abs() < 0.05);
        assert!(first.windows(2).all(|w| w[0].at <= w[1].at));
    }
}
