//! Soak: clients registering, beating, subscribing and going away at
//! random against a 3-node, 2-DC cluster of `understudy` processes whose
//! nodes are SIGKILLed and restarted and whose DC link is given lag, loss
//! and cuts. At the end it prints a report and asserts it: no acknowledged
//! write lost, no watch missing an event, every node's memory back within
//! a bound of where it started, no task or connection left behind.
//!
//! CI runs it for 40 s. The long run:
//! `UNDERSTUDY_SOAK_SECS=1800 cargo test -p understudy --test soak_processes -- --nocapture`;
//! `UNDERSTUDY_SOAK_SEED=N` replays a run's choices.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Proc;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use understudy_proto::grpc::bi_request_stream_client::BiRequestStreamClient;
use understudy_proto::grpc::request_client::RequestClient;
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_rpc::{seal, Envelope};
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, ResumeToken, WatchRequest};

const DCS: [&str; 3] = ["hz", "hz", "sh"];
const WRITERS: usize = 4;
const BEATERS: usize = 6;
const CHURNERS: usize = 8;
const WATCHERS: usize = 3;
/// How far a node's memory may end above where it started.
const MEMORY_BOUND: u64 = 64 << 20;
/// Tasks a node may have beyond its start (a leader runs a few more than
/// a follower, and leadership may have moved).
const TASK_SLACK: u64 = 16;

fn soak_time() -> Duration {
    let secs = std::env::var("UNDERSTUDY_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    Duration::from_secs(secs)
}

fn seed() -> u64 {
    std::env::var("UNDERSTUDY_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// A node's resident memory, bytes.
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The unlabelled gauges of a node's `/metrics`.
async fn gauges(http: &reqwest::Client, port: u16) -> Option<BTreeMap<String, f64>> {
    let text = http
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.contains('{'))
            .filter_map(|l| {
                let (name, value) = l.split_once(' ')?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect(),
    )
}

/// `ip:port` of every instance of `service` as node `port` lists it.
async fn listed(http: &reqwest::Client, port: u16, service: &str) -> Option<BTreeSet<String>> {
    let reply: Value = http
        .get(format!(
            "http://127.0.0.1:{port}/nacos/v1/ns/instance/list?serviceName={service}&healthyOnly=false"
        ))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    Some(
        reply["hosts"]
            .as_array()?
            .iter()
            .map(|h| format!("{}:{}", h["ip"].as_str().unwrap_or(""), h["port"]))
            .collect(),
    )
}

/// What the last acknowledged write of an instance says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Present,
    Absent,
    /// The last write's outcome is unknown (a timeout, a node killed mid-call).
    Unknown,
}

#[derive(Default)]
struct Counts {
    writes_acknowledged: AtomicU64,
    writes_unknown: AtomicU64,
    beats: AtomicU64,
    connections: AtomicU64,
    pushes: AtomicU64,
    events: AtomicU64,
    watch_reconnects: AtomicU64,
}

/// Registers and deregisters persistent instances of its own service,
/// keeping a ledger of what each acknowledged write says.
async fn writer(
    w: usize,
    ports: Vec<u16>,
    seed: u64,
    stop: CancellationToken,
    ledger: Arc<Mutex<BTreeMap<(String, u16), Known>>>,
    counts: Arc<Counts>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let service = format!("soak-w{w}");
    let ip = format!("10.8.{w}.1");
    while !stop.is_cancelled() {
        let port: u16 = rng.random_range(1..=40);
        let node = ports[rng.random_range(0..ports.len())];
        let register = rng.random_range(0..10) < 7;
        let form = [
            ("serviceName", service.as_str()),
            ("ip", ip.as_str()),
            ("port", &port.to_string()),
            ("ephemeral", "false"),
        ];
        let url = format!("http://127.0.0.1:{node}/nacos/v1/ns/instance");
        let sent = if register {
            http.post(url).form(&form).send().await
        } else {
            http.delete(url).query(&form).send().await
        };
        let outcome = match sent {
            // Never reached the node: nothing changed.
            Err(e) if e.is_connect() => None,
            Ok(reply) if reply.status() == 200 => Some(if register {
                Known::Present
            } else {
                Known::Absent
            }),
            // A deregistration of what is not there.
            Ok(reply) if reply.status() == 404 && !register => Some(Known::Absent),
            _ => Some(Known::Unknown),
        };
        if let Some(known) = outcome {
            let counter = if known == Known::Unknown {
                &counts.writes_unknown
            } else {
                &counts.writes_acknowledged
            };
            counter.fetch_add(1, Ordering::Relaxed);
            ledger
                .lock()
                .unwrap()
                .insert((service.clone(), port), known);
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
    }
}

/// Registers an ephemeral instance over HTTP and beats for it; now and
/// then deregisters, or just goes silent and lets it expire.
async fn beater(
    b: usize,
    ports: Vec<u16>,
    seed: u64,
    stop: CancellationToken,
    counts: Arc<Counts>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let ip = format!("10.9.{b}.1");
    let mut port = 0_u16;
    while !stop.is_cancelled() {
        port = port % 500 + 1;
        let form = [
            ("serviceName", "soak-beat"),
            ("ip", ip.as_str()),
            ("port", &port.to_string()),
        ];
        let node = ports[rng.random_range(0..ports.len())];
        let _ = http
            .post(format!("http://127.0.0.1:{node}/nacos/v1/ns/instance"))
            .form(&form)
            .send()
            .await;
        let until = Instant::now() + Duration::from_millis(rng.random_range(2_000..6_000));
        while Instant::now() < until && !stop.is_cancelled() {
            let node = ports[rng.random_range(0..ports.len())];
            let beat = http
                .put(format!("http://127.0.0.1:{node}/nacos/v1/ns/instance/beat"))
                .query(&form)
                .send()
                .await;
            if beat.is_ok_and(|r| r.status() == 200) {
                counts.beats.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if stop.is_cancelled() || rng.random_range(0..2) == 0 {
            let node = ports[rng.random_range(0..ports.len())];
            let _ = http
                .delete(format!("http://127.0.0.1:{node}/nacos/v1/ns/instance"))
                .query(&form)
                .send()
                .await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1_500))).await;
    }
}

/// A Nacos gRPC client that connects to a node, registers, subscribes,
/// answers pushes, and drops its connection after a while, over and over.
async fn churner(
    c: usize,
    ports: Vec<u16>,
    seed: u64,
    stop: CancellationToken,
    counts: Arc<Counts>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut port = 0_u16;
    while !stop.is_cancelled() {
        port = port % 500 + 1;
        let grpc = ports[rng.random_range(0..ports.len())] + 1000;
        let life = Duration::from_millis(rng.random_range(500..4_000));
        if nacos_session(c, grpc, port, life, &stop, &counts)
            .await
            .is_ok()
        {
            counts.connections.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..500))).await;
    }
}

async fn nacos_session(
    c: usize,
    grpc: u16,
    port: u16,
    life: Duration,
    stop: &CancellationToken,
    counts: &Counts,
) -> anyhow::Result<()> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{grpc}"))?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(3))
        .connect()
        .await?;
    let (outgoing, rx) = tokio::sync::mpsc::channel::<Payload>(64);
    let mut inbound = BiRequestStreamClient::new(channel.clone())
        .request_bi_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    outgoing
        .send(seal(
            "ConnectionSetupRequest",
            &json!({"headers":{},"clientVersion":"soak","labels":{"source":"sdk"}}),
        ))
        .await?;
    let unary = RequestClient::new(channel);
    let call = |kind: &'static str, body: Value| {
        let mut unary = unary.clone();
        async move {
            let answer = unary.request(seal(kind, &body)).await?.into_inner();
            anyhow::Ok(
                Envelope::open(answer)
                    .decode::<Value>()
                    .map_err(anyhow::Error::msg)?,
            )
        }
    };
    let register = json!({"headers":{},"namespace":"public","serviceName":"soak-grpc",
        "groupName":"DEFAULT_GROUP","type":"registerInstance",
        "instance":{"ip":format!("10.10.{c}.1"),"port":port,"ephemeral":true}});
    // The setup travels on the stream; the first unary call may beat it.
    let mut registered = false;
    for _ in 0..20 {
        if call("InstanceRequest", register.clone()).await?["success"] == true {
            registered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::ensure!(registered, "not registered");
    call(
        "SubscribeServiceRequest",
        json!({"headers":{},"namespace":"public","serviceName":"soak-w0",
            "groupName":"DEFAULT_GROUP","subscribe":true,"clusters":""}),
    )
    .await?;
    let ends = tokio::time::sleep(life);
    tokio::pin!(ends);
    loop {
        let message = tokio::select! {
            () = &mut ends => break,
            () = stop.cancelled() => break,
            message = inbound.next() => message,
        };
        let Some(Ok(payload)) = message else { break };
        let envelope = Envelope::open(payload);
        let request: Value = envelope.decode().unwrap_or_default();
        let answer = match envelope.kind.as_str() {
            "NotifySubscriberRequest" => {
                counts.pushes.fetch_add(1, Ordering::Relaxed);
                "NotifySubscriberResponse"
            }
            "ClientDetectionRequest" => "ClientDetectionResponse",
            _ => continue,
        };
        let ack =
            json!({"resultCode":200,"errorCode":0,"success":true,"requestId":request["requestId"]});
        let _ = outgoing.send(seal(answer, &ack)).await;
    }
    // Dropping the channel and the stream closes the connection.
    drop(unary);
    Ok(())
}

/// What a watcher has built from its events: service -> instances.
type View = BTreeMap<String, BTreeSet<String>>;

/// Watches the default namespace from one node, moving to the next and
/// resuming from its last token whenever its stream breaks.
async fn watcher(
    first: usize,
    ports: Vec<u16>,
    finish: CancellationToken,
    view: Arc<Mutex<View>>,
    counts: Arc<Counts>,
) {
    let mut node = first;
    let mut token: Option<ResumeToken> = None;
    while !finish.is_cancelled() {
        let grpc = ports[node] + 1000;
        let stream = async {
            let mut client = RegistryClient::connect(format!("http://127.0.0.1:{grpc}")).await?;
            let request = WatchRequest {
                resume: token.clone(),
                ..WatchRequest::default()
            };
            anyhow::Ok(client.watch(request).await?.into_inner())
        };
        let Ok(mut stream) = tokio::time::timeout(Duration::from_secs(2), stream)
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("connect timed out")))
        else {
            node = (node + 1) % ports.len();
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut snapshot: Option<View> = None;
        loop {
            let event = tokio::select! {
                () = finish.cancelled() => return,
                event = stream.next() => event,
            };
            let Some(Ok(event)) = event else { break };
            match event.event {
                Some(watch_event::Event::Reset(reset)) => {
                    let part = snapshot.get_or_insert_with(View::new);
                    for state in reset.services {
                        let name = state.service.map(|s| s.name).unwrap_or_default();
                        let instances = state
                            .instances
                            .iter()
                            .map(|i| format!("{}:{}", i.ip, i.port))
                            .collect();
                        part.insert(name, instances);
                    }
                    if reset.last {
                        *view.lock().unwrap() = snapshot.take().unwrap_or_default();
                        token = event.token;
                    }
                }
                Some(watch_event::Event::Change(c)) => {
                    counts.events.fetch_add(1, Ordering::Relaxed);
                    let name = c.service.map(|s| s.name).unwrap_or_default();
                    let mut view = view.lock().unwrap();
                    match c.kind {
                        Some(change::Kind::Upsert(i)) => {
                            view.entry(name)
                                .or_default()
                                .insert(format!("{}:{}", i.ip, i.port));
                        }
                        Some(change::Kind::Removed(r)) => {
                            if let Some(i) = r.instance {
                                view.entry(name)
                                    .or_default()
                                    .remove(&format!("{}:{}", i.ip, i.port));
                            }
                        }
                        Some(change::Kind::Created(_)) => {
                            view.entry(name).or_default();
                        }
                        Some(change::Kind::DoesNotExist(_)) => {
                            view.remove(&name);
                        }
                        None => {}
                    }
                    token = event.token;
                }
                Some(watch_event::Event::Progress(_)) | None => {}
            }
        }
        counts.watch_reconnects.fetch_add(1, Ordering::Relaxed);
        node = (node + 1) % ports.len();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Per-node memory and task figures.
#[derive(Debug, Default, Clone, Copy)]
struct NodeFigures {
    rss_start: u64,
    rss_peak: u64,
    rss_end: u64,
    tasks_start: u64,
    tasks_end: u64,
}

async fn post(http: &reqwest::Client, port: u16, path: &str) {
    let reply = http
        .post(format!("http://127.0.0.1:{port}{path}"))
        .send()
        .await;
    if let Ok(reply) = reply {
        assert!(
            reply.status().is_success() || reply.status() == 503,
            "{path}: {}",
            reply.status()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_under_churn_kills_and_link_faults_loses_nothing_and_leaks_nothing() {
    let soak = soak_time();
    let seed = seed();
    println!("soak: {soak:?}, seed {seed} (UNDERSTUDY_SOAK_SEED replays it)");
    let data = tempfile::tempdir().unwrap();
    let data_dir = format!("{}/node-{{id}}", data.path().display());
    let mut procs: Vec<Proc> = common::start(
        &DCS,
        &[
            "--data-dir",
            &data_dir,
            "--beat-interval-ms",
            "1000",
            "--unhealthy-timeout-ms",
            "3000",
            "--delete-timeout-ms",
            "6000",
            "--owner-grace-ms",
            "3000",
            "--quorum-loss-reset-ms",
            "1500",
        ],
    );
    let ports: Vec<u16> = procs.iter().map(|p| p.http).collect();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    common::agreed_leader(
        &http,
        &mut procs.iter_mut().collect::<Vec<_>>(),
        Duration::from_secs(15),
    )
    .await;

    let mut figures: Vec<NodeFigures> = Vec::new();
    for p in &procs {
        let rss = rss(p.pid().unwrap()).unwrap();
        let tasks = gauges(&http, p.http).await.unwrap()["understudy_tasks_alive"] as u64;
        figures.push(NodeFigures {
            rss_start: rss,
            rss_peak: rss,
            tasks_start: tasks,
            ..NodeFigures::default()
        });
    }

    let counts = Arc::new(Counts::default());
    let ledger: Arc<Mutex<BTreeMap<(String, u16), Known>>> = Arc::default();
    let stop = CancellationToken::new();
    let finish = CancellationToken::new();
    let mut workload = Vec::new();
    for w in 0..WRITERS {
        workload.push(tokio::spawn(writer(
            w,
            ports.clone(),
            seed ^ (w as u64 + 1),
            stop.clone(),
            ledger.clone(),
            counts.clone(),
        )));
    }
    for b in 0..BEATERS {
        workload.push(tokio::spawn(beater(
            b,
            ports.clone(),
            seed ^ (100 + b as u64),
            stop.clone(),
            counts.clone(),
        )));
    }
    for c in 0..CHURNERS {
        workload.push(tokio::spawn(churner(
            c,
            ports.clone(),
            seed ^ (200 + c as u64),
            stop.clone(),
            counts.clone(),
        )));
    }
    let views: Vec<Arc<Mutex<View>>> = (0..WATCHERS).map(|_| Arc::default()).collect();
    let watchers: Vec<_> = views
        .iter()
        .enumerate()
        .map(|(i, view)| {
            tokio::spawn(watcher(
                i % ports.len(),
                ports.clone(),
                finish.clone(),
                view.clone(),
                counts.clone(),
            ))
        })
        .collect();

    // Faults, one every few seconds, while sampling memory.
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut kills, mut link_faults, mut cuts) = (0, 0, 0);
    let started = Instant::now();
    let sample = |procs: &[Proc], figures: &mut [NodeFigures]| {
        for (p, f) in procs.iter().zip(figures.iter_mut()) {
            if let Some(rss) = p.pid().and_then(rss) {
                f.rss_peak = f.rss_peak.max(rss);
            }
        }
    };
    while started.elapsed() < soak {
        let pause = |ms: u64| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        };
        pause(rng.random_range(2_000..4_000)).await;
        sample(&procs, &mut figures);
        let live = ports[rng.random_range(0..ports.len())];
        match rng.random_range(0..3) {
            0 => {
                let victim = rng.random_range(0..procs.len());
                procs[victim].kill();
                kills += 1;
                pause(rng.random_range(1_000..3_000)).await;
                procs[victim].restart();
            }
            1 => {
                let node = if procs.iter().any(|p| p.http == live && p.child.is_some()) {
                    live
                } else {
                    ports[0]
                };
                post(
                    &http,
                    node,
                    "/understudy/v1/chaos/links?link=hz-sh=60ms~20ms,loss=5%",
                )
                .await;
                link_faults += 1;
                pause(rng.random_range(2_000..4_000)).await;
                post(&http, node, "/understudy/v1/chaos/links?link=hz-sh=perfect").await;
            }
            _ => {
                post(&http, live, "/understudy/v1/chaos/partition?a=hz&b=sh").await;
                cuts += 1;
                pause(rng.random_range(1_000..3_000)).await;
                for port in &ports {
                    post(&http, *port, "/understudy/v1/chaos/heal").await;
                }
            }
        }
        sample(&procs, &mut figures);
    }

    // Stop the clients, heal everything, let the cluster settle.
    stop.cancel();
    for task in workload {
        task.await.unwrap();
    }
    for p in procs.iter_mut().filter(|p| p.child.is_none()) {
        p.restart();
    }
    for port in &ports {
        post(&http, *port, "/understudy/v1/chaos/heal").await;
        post(
            &http,
            *port,
            "/understudy/v1/chaos/links?link=hz-sh=perfect",
        )
        .await;
    }
    common::agreed_leader(
        &http,
        &mut procs.iter_mut().collect::<Vec<_>>(),
        Duration::from_secs(30),
    )
    .await;

    // No acknowledged write lost: every node ends where the ledger says.
    let ledger = ledger.lock().unwrap().clone();
    let known: Vec<_> = ledger
        .iter()
        .filter(|(_, k)| **k != Known::Unknown)
        .collect();
    let lost_writes = |lists: &BTreeMap<(u16, String), BTreeSet<String>>| {
        let mut lost = 0;
        for ((service, port), state) in &known {
            let endpoint = format!("10.8.{}.1:{port}", &service["soak-w".len()..]);
            for node in &ports {
                let present = lists
                    .get(&(*node, service.clone()))
                    .is_some_and(|l| l.contains(&endpoint));
                if present != (**state == Known::Present) {
                    lost += 1;
                }
            }
        }
        lost
    };
    let services: Vec<String> = (0..WRITERS)
        .map(|w| format!("soak-w{w}"))
        .chain(["soak-beat".to_owned(), "soak-grpc".to_owned()])
        .collect();
    let snapshot_lists = || async {
        let mut lists = BTreeMap::new();
        for node in &ports {
            for service in &services {
                if let Some(list) = listed(&http, *node, service).await {
                    lists.insert((*node, service.clone()), list);
                }
            }
        }
        lists
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lost = usize::MAX;
    while Instant::now() < deadline {
        lost = lost_writes(&snapshot_lists().await);
        if lost == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // No watch missed an event: each watcher's view is what the nodes
    // list, once the ephemeral instances have all gone.
    let missed_events = |lists: &BTreeMap<(u16, String), BTreeSet<String>>| {
        let truth: View = services
            .iter()
            .map(|s| {
                (
                    s.clone(),
                    lists
                        .get(&(ports[0], s.clone()))
                        .cloned()
                        .unwrap_or_default(),
                )
            })
            .collect();
        views
            .iter()
            .map(|view| {
                let view = view.lock().unwrap();
                truth
                    .iter()
                    .map(|(service, expected)| {
                        let seen = view.get(service).cloned().unwrap_or_default();
                        expected.symmetric_difference(&seen).count()
                    })
                    .sum::<usize>()
            })
            .sum::<usize>()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut missed = usize::MAX;
    let mut ephemeral_left = usize::MAX;
    while Instant::now() < deadline {
        let lists = snapshot_lists().await;
        ephemeral_left = ports
            .iter()
            .flat_map(|node| {
                ["soak-beat", "soak-grpc"]
                    .map(|s| lists.get(&(*node, s.to_owned())).map_or(0, BTreeSet::len))
            })
            .sum();
        missed = missed_events(&lists);
        if missed == 0 && ephemeral_left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    finish.cancel();
    for task in watchers {
        task.await.unwrap();
    }

    // Nothing left behind: connections, subscriptions and watches at zero,
    // tasks and memory back near where they started.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut open_left = Vec::new();
    loop {
        open_left.clear();
        for (p, f) in procs.iter().zip(figures.iter_mut()) {
            let g = gauges(&http, p.http).await.unwrap_or_default();
            let open = [
                "understudy_grpc_connections",
                "understudy_subscriptions",
                "understudy_watches",
            ]
            .map(|name| g.get(name).copied().unwrap_or(f64::NAN) as u64);
            f.tasks_end = g.get("understudy_tasks_alive").copied().unwrap_or(f64::NAN) as u64;
            f.rss_end = p.pid().and_then(rss).unwrap_or(0);
            if open != [0, 0, 0] {
                open_left.push((p.id, open));
            }
        }
        let tasks_back = figures
            .iter()
            .all(|f| f.tasks_end <= f.tasks_start + TASK_SLACK);
        if (open_left.is_empty() && tasks_back) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let acknowledged = counts.writes_acknowledged.load(Ordering::Relaxed);
    println!("soak report: {soak:?} on 3 nodes, seed {seed}; {kills} kills, {link_faults} lossy links, {cuts} DC cuts");
    println!(
        "  writes acknowledged {acknowledged}, lost {lost} (outcome unknown {}, instances checked {})",
        counts.writes_unknown.load(Ordering::Relaxed),
        known.len()
    );
    println!(
        "  watch events delivered {}, missed {missed} (watch reconnects {}); pushes {}, beats {}, Nacos connections {}",
        counts.events.load(Ordering::Relaxed),
        counts.watch_reconnects.load(Ordering::Relaxed),
        counts.pushes.load(Ordering::Relaxed),
        counts.beats.load(Ordering::Relaxed),
        counts.connections.load(Ordering::Relaxed),
    );
    for (p, f) in procs.iter().zip(&figures) {
        println!(
            "  node {}: rss start {} MiB, peak {} MiB, end {} MiB; tasks start {}, end {} (leaked {}, {TASK_SLACK} allowed for leadership moves)",
            p.id,
            f.rss_start >> 20,
            f.rss_peak >> 20,
            f.rss_end >> 20,
            f.tasks_start,
            f.tasks_end,
            f.tasks_end.saturating_sub(f.tasks_start)
        );
    }
    assert!(acknowledged > 100, "the soak did real work");
    assert!(
        counts.events.load(Ordering::Relaxed) > 0,
        "the watchers saw changes"
    );
    assert!(
        kills + link_faults + cuts > 0 || soak < Duration::from_secs(5),
        "faults were injected"
    );
    assert_eq!(lost, 0, "acknowledged writes lost");
    assert_eq!(
        ephemeral_left, 0,
        "ephemeral instances of gone clients remain"
    );
    assert_eq!(missed, 0, "watch views differ from the registry");
    assert!(
        open_left.is_empty(),
        "connections, subscriptions or watches left open: {open_left:?}"
    );
    for (p, f) in procs.iter().zip(&figures) {
        assert!(
            f.tasks_end <= f.tasks_start + TASK_SLACK,
            "node {} leaked tasks: {} at the start, {} at the end",
            p.id,
            f.tasks_start,
            f.tasks_end
        );
        assert!(
            f.rss_end <= f.rss_start + MEMORY_BOUND,
            "node {} memory did not come back: {} MiB at the start, {} MiB at the end",
            p.id,
            f.rss_start >> 20,
            f.rss_end >> 20
        );
    }
}
