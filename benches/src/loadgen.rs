//! The load generator: drives the Nacos gRPC API as real clients do (one
//! connection per client: setup, then register, query or subscribe) and
//! reports throughput and latency percentiles. It runs against a server
//! given by address, or an in-process one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use understudy_tests::nacos_grpc::RawClient;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// What was measured.
    pub name: String,
    /// Operations completed.
    pub ops: u64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Largest latency.
    pub max: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<40} {:>9} ops {:>10.0} ops/s   p50 {:>9.3?}   p99 {:>9.3?}   max {:>9.3?}",
            self.name, self.ops, self.ops_per_sec, self.p50, self.p99, self.max
        )
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn report(name: String, histogram: &Histogram<u64>, elapsed: Duration) -> Report {
    let us = |v: u64| Duration::from_micros(v);
    Report {
        name,
        ops: histogram.len(),
        ops_per_sec: histogram.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        p50: us(histogram.value_at_quantile(0.5)),
        p99: us(histogram.value_at_quantile(0.99)),
        max: us(histogram.max()),
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// `clients` connections each register instances (each registration
/// replaces the connection's entry) for `duration`.
pub async fn register(
    grpc: SocketAddr,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Report> {
    register_spread(&[grpc], clients, duration).await
}

/// [`register`] with the connections spread over several nodes of one
/// cluster (connection `c` goes to `nodes[c % len]`).
pub async fn register_spread(
    nodes: &[SocketAddr],
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Report> {
    closed_loop(
        nodes,
        clients,
        duration,
        "register",
        |client, c, i| async move {
            client
                .register(
                    &format!("load-{}", c % 16),
                    &format!("10.{}.{}.{}", c / 65536 % 256, c / 256 % 256, c % 256),
                    (i % 60000) as u16 + 1,
                )
                .await
        },
    )
    .await
}

/// `clients` connections query a populated service for `duration`.
pub async fn query(grpc: SocketAddr, clients: usize, duration: Duration) -> anyhow::Result<Report> {
    // The providers' connections own the instances: keep them for the run.
    let mut providers = Vec::new();
    for i in 0..10u16 {
        let provider = RawClient::connect(grpc, None).await?;
        provider
            .register("queried", &format!("10.9.0.{i}"), 8080)
            .await?;
        providers.push(provider);
    }
    let report = closed_loop(
        &[grpc],
        clients,
        duration,
        "query (10 instances)",
        |client, _, _| async move { client.query("queried").await.map(|_| ()) },
    )
    .await;
    drop(providers);
    report
}

async fn closed_loop<F, Fut>(
    nodes: &[SocketAddr],
    clients: usize,
    duration: Duration,
    name: &str,
    op: F,
) -> anyhow::Result<Report>
where
    F: Fn(Arc<RawClient>, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let mut connections = Vec::with_capacity(clients);
    for c in 0..clients {
        let grpc = nodes[c % nodes.len().max(1)];
        connections.push(Arc::new(RawClient::connect(grpc, None).await?));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, client) in connections.iter().enumerate() {
        let client = client.clone();
        let stop = stop.clone();
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                op(client.clone(), c, i).await?;
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
    Ok(report(
        format!("{name}, {clients} connections"),
        &all,
        started.elapsed(),
    ))
}

/// `subscribers` connections subscribe to one service; a provider then
/// changes it `changes` times, one change at a time. Latency is from the
/// change being sent to each subscriber receiving its push.
pub async fn push(grpc: SocketAddr, subscribers: usize, changes: usize) -> anyhow::Result<Report> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut watchers = Vec::with_capacity(subscribers);
    for _ in 0..subscribers {
        let watcher = RawClient::connect(grpc, Some(tx.clone())).await?;
        watcher.subscribe("pushed").await?;
        watchers.push(watcher);
    }
    let provider = RawClient::connect(grpc, None).await?;
    let mut h = histogram();
    let started = Instant::now();
    for change in 0..changes {
        let port = 10_000 + u16::try_from(change % 50_000).unwrap_or(0);
        let written = tokio::time::Instant::now();
        provider.register("pushed", "10.8.0.1", port).await?;
        let expected = format!("10.8.0.1:{port}");
        let mut reached = 0;
        let deadline = written + Duration::from_secs(30);
        while reached < subscribers {
            let push = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "only {reached} of {subscribers} subscribers got change {change}"
                    )
                })?
                .ok_or_else(|| anyhow::anyhow!("push channel closed"))?;
            let hosts = understudy_tests::nacos_grpc::endpoints(&push.info);
            if hosts == [expected.clone()] {
                reached += 1;
                h.record(micros(push.at.saturating_duration_since(written)))?;
            }
        }
    }
    let elapsed = started.elapsed();
    drop(watchers);
    let mut r = report(
        format!("push to {subscribers} subscribers of one service"),
        &h,
        elapsed,
    );
    r.ops_per_sec = (changes * subscribers) as f64 / elapsed.as_secs_f64().max(1e-9);
    Ok(r)
}

/// `watchers` native watches of one service; a provider changes it
/// `changes` times, one at a time. Latency is from the change being sent
/// to each watcher receiving it.
pub async fn watch_fanout(
    grpc: SocketAddr,
    watchers: usize,
    changes: usize,
) -> anyhow::Result<Report> {
    use tokio_stream::StreamExt as _;
    use understudy_proto::native::registry_client::RegistryClient;
    use understudy_proto::native::{change, watch_event, WatchRequest};

    let (tx, mut rx) = mpsc::unbounded_channel::<(u32, tokio::time::Instant)>();
    let mut tasks = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut client = RegistryClient::connect(format!("http://{grpc}")).await?;
        let request = WatchRequest {
            namespace: String::new(),
            group: String::new(),
            service: "fanned".to_owned(),
            resume: None,
        };
        let mut stream = client.watch(request).await?.into_inner();
        // The snapshot first, so the watch is installed before any change.
        stream
            .next()
            .await
            .ok_or_else(|| anyhow::anyhow!("no snapshot"))??;
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(event)) = stream.next().await {
                if let Some(watch_event::Event::Change(c)) = event.event {
                    if let Some(change::Kind::Upsert(instance)) = c.kind {
                        let _ = tx.send((instance.port, tokio::time::Instant::now()));
                    }
                }
            }
        }));
    }
    let provider = RawClient::connect(grpc, None).await?;
    let mut h = histogram();
    let started = Instant::now();
    for n in 0..changes {
        let port = 20_000 + u16::try_from(n % 40_000).unwrap_or(0);
        let sent = tokio::time::Instant::now();
        provider.register("fanned", "10.7.0.1", port).await?;
        let mut reached = 0;
        let deadline = sent + Duration::from_secs(30);
        while reached < watchers {
            let (got, at) = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .map_err(|_| {
                    anyhow::anyhow!("only {reached} of {watchers} watchers got change {n}")
                })?
                .ok_or_else(|| anyhow::anyhow!("watch channel closed"))?;
            if got == u32::from(port) {
                reached += 1;
                h.record(micros(at.saturating_duration_since(sent)))?;
            }
        }
    }
    let elapsed = started.elapsed();
    for task in tasks {
        task.abort();
    }
    let mut r = report(
        format!("native watch fan-out to {watchers} watchers"),
        &h,
        elapsed,
    );
    r.ops_per_sec = (changes * watchers) as f64 / elapsed.as_secs_f64().max(1e-9);
    Ok(r)
}
