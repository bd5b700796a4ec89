//! Serving providers: per zone, N real TCP servers on loopback, each
//! answering a small request after a service time drawn from its
//! distribution, with a bounded worker pool that refuses at once when full
//! (Dubbo's fixed pool, no queue), an optional execute limit, and a
//! provider-side timeout. Each registers on the registry nodes of its own
//! DC first, through the bundled client's native session (or the Nacos
//! gRPC API), after its `delay`.
//!
//! Provider `ZONE/I` listens on `127.0.Z.I` (Z the zone's place among the
//! DCs, from 1), so each has an address of its own on one machine (Linux
//! routes all of 127/8 to loopback); its port is kept across restarts.
//!
//! Its registration reaches the registry through a gate of its own: a
//! TCP relay per registry node, so that faults act on it as they would on
//! a process:
//! - kill: the listener closes (new connections refused), calls in flight
//!   are reset, and its registry connections drop as a crashed process's;
//! - pause (a long GC): no call is answered and no byte crosses its gate,
//!   so keepalives stop; a pause longer than three keepalive periods ends
//!   the session, and the registry removes the instance; then everything
//!   resumes and the client registers again;
//! - slow: each service time is multiplied for a while.
//!
//! The call protocol is one line each way: `C` asks; `OK`, `BUSY`
//! (refused at once: pool or execute limit full) or `TIMEOUT` (the
//! provider gave up) answers.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_client::cluster::InFlight;
use understudy_client::{Client, InstanceSpec};
use understudy_core::ServiceKey;

use crate::lock;
use crate::scenario::{Api, ProviderGroup, ServiceTime};

/// The service serving providers register and consumers call.
pub const SERVING: &str = "chaos.serving";

/// The key of [`SERVING`] in the default namespace and group.
pub(crate) fn serving_key() -> ServiceKey {
    ServiceKey::parse("", "", SERVING).expect("a valid service key")
}

/// A registry node as providers and consumers reach it.
#[derive(Debug, Clone)]
pub(crate) struct RegistryNode {
    pub(crate) dc: String,
    pub(crate) grpc: SocketAddr,
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

impl ServiceTime {
    /// One draw.
    pub(crate) fn sample(self, rng: &mut StdRng) -> Duration {
        self.median.mul_f64((self.sigma * normal(rng)).exp())
    }
}

/// One life of a provider, from a start to a kill.
struct Life {
    stop: CancellationToken,
    tasks: TaskTracker,
    client: Option<Client>,
}

/// One serving provider.
pub(crate) struct Provider {
    /// `zone/i`.
    pub(crate) name: String,
    pub(crate) zone: String,
    pub(crate) address: SocketAddr,
    group: ProviderGroup,
    workers: Arc<Semaphore>,
    executes: InFlight,
    paused: watch::Sender<bool>,
    /// The service-time factor, as f64 bits.
    slow: AtomicU64,
    rng: Mutex<StdRng>,
    life: Mutex<Option<Life>>,
    registry: Vec<RegistryNode>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// Every serving provider of a run.
#[derive(Debug, Default)]
pub(crate) struct Providers {
    pub(crate) all: Vec<Arc<Provider>>,
}

impl Providers {
    /// Binds and starts every provider of `groups`; each registers after
    /// its delay.
    pub(crate) async fn start(
        groups: &[ProviderGroup],
        zones: &[String],
        registry: &[RegistryNode],
        seed: u64,
    ) -> std::io::Result<Self> {
        let mut all = Vec::new();
        for group in groups {
            let z = zones.iter().position(|z| *z == group.zone).unwrap_or(0) as u8 + 1;
            for i in 1..=group.count {
                let ip = Ipv4Addr::new(127, 0, z, u8::try_from(i).unwrap_or(u8::MAX));
                let listener = TcpListener::bind((ip, 0)).await?;
                let address = listener.local_addr()?;
                let provider = Arc::new(Provider {
                    name: format!("{}/{i}", group.zone),
                    zone: group.zone.clone(),
                    address,
                    group: group.clone(),
                    workers: Arc::new(Semaphore::new(group.threads as usize)),
                    executes: InFlight::new(),
                    paused: watch::channel(false).0,
                    slow: AtomicU64::new(1f64.to_bits()),
                    rng: Mutex::new(StdRng::seed_from_u64(
                        seed ^ (u64::from(z) << 40) ^ (u64::from(i) << 20) ^ 0x5e17,
                    )),
                    life: Mutex::new(None),
                    registry: registry.to_vec(),
                });
                provider.clone().live(listener).await?;
                all.push(provider);
            }
        }
        Ok(Self { all })
    }

    /// Stops every provider (a graceful end of the run).
    pub(crate) async fn stop(&self) {
        for p in &self.all {
            p.kill().await;
        }
    }
}

impl Provider {
    /// Starts a life on `listener`: serving at once, registering after
    /// the delay.
    async fn live(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        // The gate: one relay per registry node.
        let mut builder = Client::builder()
            .local_dc(self.zone.clone())
            .keepalive(self.group.keepalive)
            .backoff(Duration::from_millis(50), Duration::from_secs(1))
            .connect_timeout(Duration::from_millis(500));
        let mut endpoints = Vec::new();
        for node in &self.registry {
            let relay = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
            let at = relay.local_addr()?;
            tasks.spawn(relay_loop(
                relay,
                node.grpc,
                self.paused.subscribe(),
                stop.clone(),
            ));
            builder = builder.endpoint(at.to_string(), Some(&node.dc));
            endpoints.push((at, node.dc.clone()));
        }
        tasks.spawn(serve(self.clone(), listener, stop.clone()));
        let client = match self.group.api {
            Api::Native => {
                let client = builder
                    .build()
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                let provider = self.clone();
                let registering = client.clone();
                tasks.spawn(async move {
                    let spec = provider.instance();
                    let _ = registering
                        .register_after(provider.group.delay, serving_key(), vec![spec])
                        .await;
                });
                Some(client)
            }
            Api::Nacos => {
                tasks.spawn(crate::nacos::register(
                    SERVING,
                    self.instance(),
                    self.zone.clone(),
                    endpoints,
                    self.group.delay,
                    self.group.keepalive,
                    stop.clone(),
                ));
                None
            }
        };
        *lock(&self.life) = Some(Life {
            stop,
            tasks,
            client,
        });
        Ok(())
    }

    /// What the provider registers.
    fn instance(&self) -> InstanceSpec {
        let mut spec = InstanceSpec::new(self.address.ip().to_string(), self.address.port());
        spec.metadata.insert("zone".into(), self.zone.clone());
        spec
    }

    /// `ip:port`.
    pub(crate) fn key(&self) -> String {
        format!("{}:{}", self.address.ip(), self.address.port())
    }

    /// Kills the provider as a crash would.
    pub(crate) async fn kill(&self) {
        let Some(life) = lock(&self.life).take() else {
            return;
        };
        life.stop.cancel();
        if let Some(client) = life.client {
            client.shutdown().await;
        }
        life.tasks.close();
        life.tasks.wait().await;
    }

    /// Starts a killed provider again on its old address.
    pub(crate) async fn restart(self: &Arc<Self>) -> std::io::Result<()> {
        if lock(&self.life).is_some() {
            return Ok(());
        }
        // Its port may linger a moment after the kill.
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(self.address).await {
                Ok(listener) => break listener,
                Err(e) if tries >= 50 => return Err(e),
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        self.clone().live(listener).await
    }

    /// Pauses (or resumes) the provider: calls and registry traffic stop.
    pub(crate) fn pause(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// Multiplies the service time by `factor` (1 to end).
    pub(crate) fn slow(&self, factor: f64) {
        self.slow.store(factor.to_bits(), Ordering::Relaxed);
    }

    /// Serves one call: the answer line.
    async fn call(&self) -> &'static str {
        let Ok(_worker) = self.workers.clone().try_acquire_owned() else {
            return "BUSY";
        };
        let Some(_executing) = self.executes.try_enter(self.group.executes as usize) else {
            return "BUSY";
        };
        let factor = f64::from_bits(self.slow.load(Ordering::Relaxed));
        let work = self
            .group
            .service
            .sample(&mut lock(&self.rng))
            .mul_f64(factor);
        if work > self.group.timeout {
            tokio::time::sleep(self.group.timeout).await;
            return "TIMEOUT";
        }
        tokio::time::sleep(work).await;
        "OK"
    }
}

/// Waits while the provider is paused.
async fn unpaused(paused: &mut watch::Receiver<bool>) {
    let _ = paused.wait_for(|p| !*p).await;
}

/// Accepts calls until the provider is killed.
async fn serve(provider: Arc<Provider>, listener: TcpListener, stop: CancellationToken) {
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let provider = provider.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            // A kill resets the connection rather than closing it.
            let _ = stream.set_zero_linger();
            let _ = stream.set_nodelay(true);
            let mut paused = provider.paused.subscribe();
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            let serve = async {
                loop {
                    unpaused(&mut paused).await;
                    let Ok(Some(_)) = lines.next_line().await else {
                        return;
                    };
                    unpaused(&mut paused).await;
                    let answer = provider.call().await;
                    unpaused(&mut paused).await;
                    if write
                        .write_all(format!("{answer}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            };
            tokio::select! {
                () = stop.cancelled() => {}
                () = serve => {}
            }
        });
    }
    // Dropping the listener refuses new connections; the connections end
    // with the stop.
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Relays a provider's registry connections to `upstream`, holding every
/// byte while the provider is paused.
async fn relay_loop(
    relay: TcpListener,
    upstream: SocketAddr,
    paused: watch::Receiver<bool>,
    stop: CancellationToken,
) {
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = relay.accept() => accepted,
        };
        let Ok((inbound, _)) = accepted else { continue };
        let (paused, stop) = (paused.clone(), stop.clone());
        connections.spawn(async move {
            let Ok(outbound) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = inbound.set_zero_linger();
            let _ = outbound.set_zero_linger();
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            tokio::select! {
                () = stop.cancelled() => {}
                () = pipe(in_read, out_write, paused.clone()) => {}
                () = pipe(out_read, in_write, paused) => {}
            }
        });
    }
    drop(relay);
    connections.close();
    connections.wait().await;
}

/// Copies `from` to `to`, chunk by chunk, none while paused.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    use tokio::io::AsyncReadExt;
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        unpaused(&mut paused).await;
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        unpaused(&mut paused).await;
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
