//! The load generator: drives a Nacos-compatible server over its gRPC and
//! HTTP APIs exactly as real clients do, one mode at a time, and reports
//! throughput, latency, missed pushes, memory and the server's CPU time
//! (read from `/proc`), so that servers can be compared per CPU-second
//! when the load generator, not the server, is the bottleneck.
//!
//! [`compare`] runs every mode against understudy, r-nacos and the bare
//! transport ceilings ([`ceiling`]) in one run and prints the ratios.

pub mod ceiling;
pub mod compare;
pub mod curves;
pub mod failover;
pub mod http;
pub mod nacos;
pub mod procfs;
pub mod summary;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::mpsc;

use self::http::HttpConn;
use self::nacos::Conn;
use self::procfs::Watched;

/// The server under load.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its name in reports (`understudy`, `r-nacos`, `ceiling`).
    pub name: String,
    /// gRPC addresses (several for a cluster; connections spread over them).
    pub grpc: Vec<SocketAddr>,
    /// HTTP addresses.
    pub http: Vec<SocketAddr>,
    /// Its processes, whose CPU time and memory are read.
    pub watched: Watched,
    /// The echo ceiling: answers are not checked.
    pub echo: bool,
    /// An HTTP path that compacts the server's log (POSTed before the
    /// memory reading, which the targets define as after compaction).
    pub compact: Option<String>,
    /// A JVM (its pid) to collect in full before each memory reading
    /// (`jcmd PID GC.run`), so its RSS holds what is live, not garbage.
    pub jvm: Option<u32>,
}

impl Target {
    fn grpc(&self, c: usize) -> SocketAddr {
        self.grpc[c % self.grpc.len()]
    }

    fn http(&self, c: usize) -> SocketAddr {
        self.http[c % self.http.len()]
    }

    /// The same servers, reached only through the nodes `nodes` (counting
    /// from 0), named `NAME via VIA`; every process is still measured.
    pub fn through(&self, nodes: &[usize], via: &str) -> Target {
        Target {
            name: format!("{} via {via}", self.name),
            grpc: nodes.iter().map(|n| self.grpc[*n]).collect(),
            http: nodes.iter().map(|n| self.http[*n]).collect(),
            ..self.clone()
        }
    }

    async fn connect(&self, c: usize) -> anyhow::Result<Conn> {
        if self.echo {
            Conn::connect_echo(self.grpc(c), None).await
        } else {
            Conn::connect(self.grpc(c), None).await
        }
    }
}

/// What one run measured. Fields that do not apply to a mode are absent.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Run {
    /// The mode.
    pub mode: String,
    /// The server.
    pub target: String,
    /// The parameters, in words.
    pub shape: String,
    /// Operations completed (registrations, queries, beats, deliveries).
    pub ops: u64,
    /// Wall-clock seconds of the measured part.
    pub seconds: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// The server's CPU seconds (user + system) in the measured part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_seconds: Option<f64>,
    /// Operations per server CPU-second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_cpu_second: Option<f64>,
    /// Median latency, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    /// 99th percentile latency, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// Largest latency, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    /// Pushes that never arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
    /// Resident memory added per instance, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes_per_instance: Option<f64>,
    /// Resident memory added per idle connection, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes_per_connection: Option<f64>,
    /// From spawning the server to its first acknowledged registration, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_ms: Option<f64>,
    /// The server's resident memory at the end of the run, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Bytes in the server's data directory after the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

impl Run {
    pub(crate) fn new(mode: &str, target: &Target, shape: String) -> Self {
        Self {
            mode: mode.to_owned(),
            target: target.name.clone(),
            shape,
            ..Self::default()
        }
    }

    pub(crate) fn timed(mut self, ops: u64, elapsed: Duration, cpu: Option<Duration>) -> Self {
        self.ops = ops;
        self.seconds = elapsed.as_secs_f64();
        self.ops_per_sec = ops as f64 / self.seconds.max(1e-9);
        if let Some(cpu) = cpu {
            let cpu = cpu.as_secs_f64();
            self.server_cpu_seconds = Some(cpu);
            self.ops_per_cpu_second = (cpu > 0.0).then(|| ops as f64 / cpu);
        }
        self
    }

    pub(crate) fn latencies(mut self, h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        if !h.is_empty() {
            self.p50_ms = Some(ms(h.value_at_quantile(0.5)));
            self.p99_ms = Some(ms(h.value_at_quantile(0.99)));
            self.max_ms = Some(ms(h.max()));
        }
        self
    }

    /// The run as one JSON line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a run serializes")
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<10} {:<16} {:<34}",
            self.target, self.mode, self.shape
        )?;
        if self.ops > 0 {
            write!(f, " {:>9.0} ops/s", self.ops_per_sec)?;
        }
        if let Some(per_cpu) = self.ops_per_cpu_second {
            write!(f, " {per_cpu:>9.0} ops/cpu-s")?;
        }
        if let (Some(p50), Some(p99)) = (self.p50_ms, self.p99_ms) {
            write!(f, "  p50 {p50:.2} ms  p99 {p99:.2} ms")?;
        }
        if let Some(missed) = self.missed {
            write!(f, "  missed {missed}")?;
        }
        if let Some(b) = self.rss_bytes_per_instance {
            write!(f, "  {b:.0} B/instance")?;
        }
        if let Some(b) = self.rss_bytes_per_connection {
            write!(f, "  {:.1} kB/connection", b / 1024.0)?;
        }
        if let Some(ms) = self.startup_ms {
            write!(f, "  ready in {ms:.0} ms")?;
        }
        if let Some(bytes) = self.disk_bytes {
            write!(f, "  {:.1} MB on disk", bytes as f64 / 1e6)?;
        }
        Ok(())
    }
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// CPU time of the target over a measured part, if it is watched.
struct Meter {
    watched: Watched,
    cpu: Option<Duration>,
    started: Instant,
}

impl Meter {
    fn start(target: &Target) -> anyhow::Result<Self> {
        let cpu = if target.watched.is_empty() {
            None
        } else {
            Some(target.watched.cpu()?)
        };
        Ok(Self {
            watched: target.watched.clone(),
            cpu,
            started: Instant::now(),
        })
    }

    fn stop(&self) -> anyhow::Result<(Duration, Option<Duration>)> {
        let elapsed = self.started.elapsed();
        let cpu = match self.cpu {
            Some(before) => Some(self.watched.cpu()?.saturating_sub(before)),
            None => None,
        };
        Ok((elapsed, cpu))
    }
}

/// Runs `op` in a closed loop on every connection for `duration`.
async fn closed_loop<C, F, Fut>(
    connections: Vec<C>,
    duration: Duration,
    target: &Target,
    op: F,
) -> anyhow::Result<(u64, Histogram<u64>, Duration, Option<Duration>)>
where
    C: Send + 'static,
    F: Fn(C, usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<C>> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let meter = Meter::start(target)?;
    let mut tasks = Vec::with_capacity(connections.len());
    for (c, conn) in connections.into_iter().enumerate() {
        let stop = stop.clone();
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut i = 0u64;
            // Each call takes the connection and gives it back.
            let mut conn = Some(conn);
            while let Some(taken) = conn.take().filter(|_| !stop.load(Ordering::Relaxed)) {
                let t = Instant::now();
                conn = Some(op(taken, c, i).await?);
                h.record(micros(t.elapsed()))?;
                i += 1;
            }
            anyhow::Ok(h)
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = histogram();
    for task in tasks {
        all.add(task.await??)?;
    }
    let (elapsed, cpu) = meter.stop()?;
    Ok((all.len(), all, elapsed, cpu))
}

fn ip(a: usize, b: usize, c: usize) -> String {
    format!("10.{}.{}.{}", a % 256, b % 256, c % 256)
}

/// Registrations (gRPC `InstanceRequest`): `clients` connections, each
/// registering its own instance in one of `services` services in turn,
/// with a new weight every time, so every request is a real change that
/// goes through raft.
pub async fn register(
    target: &Target,
    clients: usize,
    services: usize,
    duration: Duration,
) -> anyhow::Result<Run> {
    let mut connections = Vec::with_capacity(clients);
    for c in 0..clients {
        connections.push(target.connect(c).await?);
    }
    let services = services.max(1);
    let (ops, h, elapsed, cpu) = closed_loop(
        connections,
        duration,
        target,
        move |conn, c, i| async move {
            let service = format!("load-{}", (c + i as usize) % services);
            let weight = 1 + i / services as u64 % 100;
            let body = nacos::register_weighted(&service, &ip(1, c / 256, c), 8080, weight, "");
            conn.request("InstanceRequest", body).await?;
            Ok(conn)
        },
    )
    .await?;
    let shape = format!("{clients} conns, {services} services");
    Ok(Run::new("register", target, shape)
        .timed(ops, elapsed, cpu)
        .latencies(&h))
}

/// Queries (gRPC `ServiceQueryRequest`) of 16 services of 10 instances,
/// from `clients` connections.
pub async fn query(target: &Target, clients: usize, duration: Duration) -> anyhow::Result<Run> {
    const SERVICES: usize = 16;
    const INSTANCES: usize = 10;
    // The providers' connections own the instances: keep them for the run.
    let mut providers = Vec::with_capacity(INSTANCES);
    for p in 0..INSTANCES {
        let provider = target.connect(p).await?;
        for s in 0..SERVICES {
            let body = nacos::register_body(&format!("query-{s}"), &ip(2, s, p), 8080, "");
            provider.request("InstanceRequest", body).await?;
        }
        providers.push(provider);
    }
    let mut connections = Vec::with_capacity(clients);
    for c in 0..clients {
        connections.push(target.connect(c).await?);
    }
    if !target.echo {
        // Every node of a cluster answers with all the instances.
        let deadline = Instant::now() + Duration::from_secs(10);
        for (c, conn) in connections.iter().enumerate().take(target.grpc.len()) {
            loop {
                let answer = conn.request("ServiceQueryRequest", nacos::query_body("query-0"));
                let found = nacos::hosts(&answer.await?.json()?).len();
                if found == INSTANCES {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "node {c} lists {found} of {INSTANCES} instances"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let (ops, h, elapsed, cpu) = closed_loop(
        connections,
        duration,
        target,
        move |conn, c, i| async move {
            let service = format!("query-{}", (c + i as usize) % SERVICES);
            conn.request("ServiceQueryRequest", nacos::query_body(&service))
                .await?;
            Ok(conn)
        },
    )
    .await?;
    drop(providers);
    let shape = format!("{clients} conns, {SERVICES}×{INSTANCES} instances");
    Ok(Run::new("query", target, shape)
        .timed(ops, elapsed, cpu)
        .latencies(&h))
}

/// HTTP v1 beats: `clients` kept-alive connections, each registering one
/// ephemeral instance, then beating it as the 1.x Java client does once
/// the server has answered `lightBeatEnabled` (no beat body).
pub async fn beat(target: &Target, clients: usize, duration: Duration) -> anyhow::Result<Run> {
    let mut connections = Vec::with_capacity(clients);
    for c in 0..clients {
        let mut conn = HttpConn::connect(target.http(c)).await?;
        let service = format!("beat-{}", c % 16);
        let instance = format!("ip={}&port=8080", ip(3, c / 256, c));
        let (status, body) = conn
            .send(
                hyper::Method::POST,
                &format!("/nacos/v1/ns/instance?serviceName={service}&{instance}&ephemeral=true"),
            )
            .await?;
        anyhow::ensure!(
            target.echo || (status.is_success() && &body[..] == b"ok"),
            "registering for beats answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
        let path = format!(
            "/nacos/v1/ns/instance/beat?namespaceId=public&serviceName=DEFAULT_GROUP%40%40{service}&clusterName=DEFAULT&{instance}"
        );
        connections.push((conn, path));
    }
    let echo = target.echo;
    let (ops, h, elapsed, cpu) = closed_loop(
        connections,
        duration,
        target,
        move |(mut conn, path): (HttpConn, String), _, _| async move {
            let (status, body) = conn.send(hyper::Method::PUT, &path).await?;
            anyhow::ensure!(
                echo || (status.is_success() && contains(&body, b"10200")),
                "beat answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
            Ok((conn, path))
        },
    )
    .await?;
    let shape = format!("{clients} conns, light beats");
    Ok(Run::new("beat", target, shape)
        .timed(ops, elapsed, cpu)
        .latencies(&h))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Push latency: `subscribers` connections subscribe to one service; a
/// writer changes it `changes` times, one change at a time. Latency runs
/// from the writer's acknowledgement to each subscriber's push carrying
/// the change (each change sets the writer's weight to its number); a
/// subscriber without it after 5 s counts as missed.
pub async fn push(target: &Target, subscribers: usize, changes: usize) -> anyhow::Result<Run> {
    const SERVICE: &str = "pushed";
    const WRITER_IP: &str = "10.4.0.1";
    let (tx, mut rx) = mpsc::unbounded_channel::<nacos::Pushed>();
    let watchers = Shards::subscribe(target, subscribers, SERVICE, tx).await?;
    let writer = target.connect(0).await?;
    let mut h = histogram();
    let mut missed = 0u64;
    let meter = Meter::start(target)?;
    for change in 1..=changes {
        let body = nacos::register_weighted(SERVICE, WRITER_IP, 8080, change as u64, "");
        writer.request("InstanceRequest", body).await?;
        let acked = tokio::time::Instant::now();
        let mut reached = vec![false; subscribers];
        let mut count = 0;
        let deadline = acked + Duration::from_secs(5);
        while count < subscribers {
            let Ok(Some(pushed)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
                break;
            };
            let s = pushed.tag;
            if reached[s] || pushed_seq(&pushed.body, WRITER_IP) < Some(change as u64) {
                continue;
            }
            reached[s] = true;
            count += 1;
            h.record(micros(pushed.at.saturating_duration_since(acked)))?;
        }
        missed += (subscribers - count) as u64;
    }
    let (elapsed, cpu) = meter.stop()?;
    watchers.close().await;
    let mut run = Run::new(
        "push",
        target,
        format!("{subscribers} subscribers, {changes} changes"),
    )
    .timed(h.len(), elapsed, cpu)
    .latencies(&h);
    run.missed = Some(missed);
    Ok(run)
}

/// Subscriber connections spread over one single-threaded runtime per
/// core, as a fleet of separate clients would be: each runtime's
/// connections never wake a task on another thread. On the shared
/// multi-threaded runtime the load generator spent about as much CPU
/// per push as the server did (cross-thread wake-ups, work stealing),
/// on the same two cores.
struct Shards {
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Shards {
    /// Connects `subscribers` connections (subscriber `s` on the target's
    /// address for `s`), each subscribed to `service` and handing its
    /// pushes to `pushes`; returns once all are subscribed.
    async fn subscribe(
        target: &Target,
        subscribers: usize,
        service: &'static str,
        pushes: mpsc::UnboundedSender<nacos::Pushed>,
    ) -> anyhow::Result<Self> {
        let count = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut shards = Self {
            stops: Vec::new(),
            threads: Vec::new(),
        };
        let mut ready = Vec::new();
        for shard in 0..count {
            let mine: Vec<(usize, SocketAddr)> = (shard..subscribers)
                .step_by(count)
                .map(|s| (s, target.grpc(s)))
                .collect();
            let (echo, pushes) = (target.echo, pushes.clone());
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<anyhow::Result<()>>();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            shards.threads.push(std::thread::spawn(move || {
                runtime.block_on(async move {
                    let mut conns = Vec::with_capacity(mine.len());
                    let connected: anyhow::Result<()> = async {
                        for (s, grpc) in mine {
                            let tagged = Some((s, pushes.clone()));
                            let conn = if echo {
                                Conn::connect_echo(grpc, tagged).await?
                            } else {
                                Conn::connect(grpc, tagged).await?
                            };
                            conn.request("SubscribeServiceRequest", nacos::subscribe_body(service))
                                .await?;
                            conns.push(conn);
                        }
                        Ok(())
                    }
                    .await;
                    let failed = connected.is_err();
                    let _ = ready_tx.send(connected);
                    if !failed {
                        let _ = stop_rx.await;
                    }
                    drop(conns);
                });
            }));
            shards.stops.push(stop_tx);
            ready.push(ready_rx);
        }
        for ready in ready {
            match ready.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    shards.close().await;
                    return Err(e);
                }
                Err(_) => {
                    shards.close().await;
                    anyhow::bail!("a subscriber thread ended before subscribing");
                }
            }
        }
        Ok(shards)
    }

    /// Closes every connection and waits for the threads.
    async fn close(self) {
        drop(self.stops);
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
    }
}

/// The writer's weight (its change number) in a pushed ServiceInfo, if
/// it is listed.
fn pushed_seq(body: &[u8], writer_ip: &str) -> Option<u64> {
    // Only the fields needed: the load generator parses every push.
    #[derive(serde::Deserialize)]
    struct Push<'a> {
        #[serde(rename = "serviceInfo", borrow)]
        info: Info<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Info<'a> {
        #[serde(borrow)]
        hosts: Vec<Host<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Host<'a> {
        ip: &'a str,
        weight: f64,
    }
    let push: Push<'_> = serde_json::from_slice(body).ok()?;
    let host = push.info.hosts.iter().find(|h| h.ip == writer_ip)?;
    Some(host.weight as u64)
}

/// RSS once it has settled (after a full collection for a JVM, so a
/// reading holds what is live): three readings half a second apart within
/// 0.5% of each other (or after 20 s). An allocator gives freed pages back
/// gradually (jemalloc over its decay time), and a server may still be
/// finishing work the last request started (a snapshot): one pair of
/// close readings caught RSS mid-descent, 25% above where it settled.
pub(crate) async fn settled_rss(target: &Target) -> anyhow::Result<u64> {
    if let Some(pid) = target.jvm {
        full_gc(pid).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut readings = vec![target.watched.rss()?];
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        readings.push(target.watched.rss()?);
        let last = &readings[readings.len().saturating_sub(3)..];
        let (low, high) = (
            *last.iter().min().expect("readings"),
            *last.iter().max().expect("readings"),
        );
        if (last.len() == 3 && (high - low) * 200 <= high) || Instant::now() >= deadline {
            return Ok(*readings.last().expect("readings"));
        }
    }
}

/// A full collection of the JVM `pid`, through `jcmd` (the JDK's).
async fn full_gc(pid: u32) -> anyhow::Result<()> {
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("jcmd")
            .args([pid.to_string().as_str(), "GC.run"])
            .output()
    })
    .await?
    .map_err(|e| anyhow::anyhow!("running jcmd {pid} GC.run (a JDK's jcmd on the PATH): {e}"))?;
    anyhow::ensure!(
        output.status.success(),
        "jcmd {pid} GC.run failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    Ok(())
}

/// Memory per instance: `services` services of `per_service` instances
/// (one owner connection per instance slot), each with 64 bytes of
/// metadata; RSS added over the RSS with the connections open, read after
/// the server's log is compacted (when it says how).
pub async fn memory(target: &Target, services: usize, per_service: usize) -> anyhow::Result<Run> {
    let (run, owners) = memory_kept(target, services, per_service).await?;
    drop(owners);
    Ok(run)
}

/// [`memory`], handing back the owner connections, so the instances stay
/// registered for whatever is measured next.
pub async fn memory_kept(
    target: &Target,
    services: usize,
    per_service: usize,
) -> anyhow::Result<(Run, Vec<Arc<Conn>>)> {
    anyhow::ensure!(!target.watched.is_empty(), "memory needs the server's pid");
    let mut owners = Vec::with_capacity(per_service);
    for p in 0..per_service {
        owners.push(Arc::new(target.connect(p).await?));
    }
    let before = settled_rss(target).await?;
    let meter = Meter::start(target)?;
    let mut writes = Vec::with_capacity(per_service);
    for (p, owner) in owners.iter().enumerate() {
        let owner = owner.clone();
        writes.push(tokio::spawn(async move {
            futures_util::stream::iter(0..services)
                .map(|s| {
                    let owner = owner.clone();
                    async move {
                        // 64 bytes of metadata, keys and values as JSON text.
                        let metadata = format!(
                            r#""version":"1.4.2","zone":"hz-a","app":"svc-{s:05}","owner":"team-{p:02}""#
                        );
                        let body =
                            nacos::register_body(&format!("mem-{s:05}"), &ip(5, s / 256, s), 8080 + p as u16, &metadata);
                        owner.request("InstanceRequest", body).await.map(drop)
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<anyhow::Result<()>>>()
                .await
                .into_iter()
                .collect::<anyhow::Result<()>>()
        }));
    }
    for write in writes {
        write.await??;
    }
    let (elapsed, cpu) = meter.stop()?;
    if !target.echo {
        let answer = owners[0]
            .request("ServiceQueryRequest", nacos::query_body("mem-00000"))
            .await?;
        let found = nacos::hosts(&answer.json()?).len();
        anyhow::ensure!(
            found == per_service,
            "mem-00000 lists {found} of {per_service}"
        );
    }
    if let Some(path) = &target.compact {
        let mut http = HttpConn::connect(target.http(0)).await?;
        let (status, body) = http.send(hyper::Method::POST, path).await?;
        anyhow::ensure!(
            status.is_success(),
            "compacting answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let after = settled_rss(target).await?;
    let instances = services * per_service;
    let mut run = Run::new(
        "memory",
        target,
        format!("{services}×{per_service} instances, 64 B metadata"),
    )
    .timed(instances as u64, elapsed, cpu);
    run.rss_bytes_per_instance = Some(after.saturating_sub(before) as f64 / instances as f64);
    run.rss_bytes = Some(after);
    Ok((run, owners))
}

/// Memory per idle connection: RSS added by `connections` set-up gRPC
/// connections that then do nothing.
pub async fn idle(target: &Target, connections: usize) -> anyhow::Result<Run> {
    anyhow::ensure!(!target.watched.is_empty(), "idle needs the server's pid");
    let before = settled_rss(target).await?;
    let meter = Meter::start(target)?;
    let opened: Vec<anyhow::Result<Conn>> = futures_util::stream::iter(0..connections)
        .map(|c| target.connect(c))
        .buffer_unordered(32)
        .collect()
        .await;
    let opened = opened.into_iter().collect::<anyhow::Result<Vec<Conn>>>()?;
    let (elapsed, cpu) = meter.stop()?;
    let after = settled_rss(target).await?;
    let mut run = Run::new("idle", target, format!("{connections} gRPC connections")).timed(
        connections as u64,
        elapsed,
        cpu,
    );
    run.rss_bytes_per_connection = Some(after.saturating_sub(before) as f64 / connections as f64);
    drop(opened);
    Ok(run)
}

/// Waits until `grpc` takes a connection and acknowledges a registration;
/// returns the time since `spawned`.
pub async fn ready(
    grpc: SocketAddr,
    spawned: Instant,
    within: Duration,
) -> anyhow::Result<Duration> {
    let deadline = spawned + within;
    let mut last = String::new();
    while Instant::now() < deadline {
        let attempt = async {
            let conn = Conn::connect(grpc, None).await?;
            conn.request(
                "InstanceRequest",
                nacos::register_body("ready", "10.6.0.1", 8080, ""),
            )
            .await
        };
        match tokio::time::timeout(Duration::from_secs(2), attempt).await {
            Ok(Ok(_)) => return Ok(spawned.elapsed()),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "an attempt took over 2 s".into(),
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    anyhow::bail!("{grpc} was not ready within {within:?}: {last}")
}
