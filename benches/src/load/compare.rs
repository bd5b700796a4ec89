//! The comparison: every mode against understudy, r-nacos (when its
//! binary is found), the Nacos servers the user started (when named) and
//! the bare transport ceilings, in one run, the servers alternating round
//! by round, each mode on a freshly started server process (a Nacos the
//! user started serves every mode of the run); then the ratios against
//! the targets.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::procfs::Watched;
use super::{Run, Target};

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Rounds; each runs every server once.
    pub rounds: usize,
    /// Seconds per throughput run.
    pub seconds: f64,
    /// Connections for the throughput runs.
    pub clients: usize,
    /// Services the register run spreads over.
    pub services: usize,
    /// Subscribers of the pushed service.
    pub subscribers: usize,
    /// Changes pushed to them.
    pub changes: usize,
    /// Services in the memory run.
    pub memory_services: usize,
    /// Instances per service in the memory run.
    pub memory_per_service: usize,
    /// Connections in the idle run.
    pub idle_connections: usize,
    /// Nodes of the cluster register run (below 2: none).
    pub cluster_nodes: usize,
    /// Leader kills in the failover run (0: none).
    pub kills: usize,
    /// The `understudy` binary.
    pub understudy: PathBuf,
    /// Extra arguments for every understudy process.
    pub server_args: Vec<String>,
    /// The `rnacos` binary, if there is one.
    pub rnacos: Option<PathBuf>,
    /// Nacos servers the user started.
    pub nacos: Vec<External>,
    /// This load generator's binary (it serves the ceilings).
    pub me: PathBuf,
}

/// A server the user started (a Nacos, in its own standalone JVM
/// settings): where it listens and which process it is. It is not
/// restarted between modes; its start-up is measured from its process'
/// start when the run finds it not yet ready.
#[derive(Debug, Clone)]
pub struct External {
    /// Its name in reports (`nacos-3.0.3`).
    pub name: String,
    /// Its HTTP address; gRPC is at the port + 1000.
    pub http: SocketAddr,
    /// Its process.
    pub pid: u32,
}

impl External {
    fn target(&self) -> Target {
        let mut grpc = self.http;
        grpc.set_port(self.http.port() + 1000);
        Target {
            name: self.name.clone(),
            grpc: vec![grpc],
            http: vec![self.http],
            watched: Watched::new(vec![self.pid]),
            echo: false,
            compact: None,
            jvm: Some(self.pid),
        }
    }
}

/// Which server a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ceiling,
    Understudy,
    RNacos,
    /// The user's Nacos, by its place in [`Plan::nacos`].
    Nacos(usize),
}

/// Child processes, killed and reaped when dropped (also when starting
/// them fails half-way).
#[derive(Default)]
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Started server processes, killed when dropped.
pub struct Spawned {
    children: Children,
    /// How each node was started, to start it again after a kill.
    launches: Vec<(PathBuf, Vec<String>)>,
    target: Target,
    startup: Duration,
    dir: Option<tempfile::TempDir>,
}

impl Spawned {
    /// The server as a load target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// From spawning to the first acknowledged registration.
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// Bytes in the servers' data directories (0 without one).
    pub fn disk_bytes(&self) -> u64 {
        self.dir.as_ref().map_or(0, |d| dir_bytes(d.path()))
    }

    /// Kills node `n` (counting from 0) with SIGKILL and reaps it.
    pub fn kill(&mut self, n: usize) -> anyhow::Result<()> {
        let child = &mut self.children.0[n];
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Starts node `n` again as it was first started (same ports, same
    /// data directory).
    pub fn restart(&mut self, n: usize) -> anyhow::Result<()> {
        let (program, args) = &self.launches[n];
        self.children.0[n] = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(())
    }
}

/// Bytes of the files under `dir`, recursively.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Starts r-nacos from `path` on free ports, with its data in a fresh
/// temporary directory.
pub async fn start_rnacos(path: &Path) -> anyhow::Result<Spawned> {
    let plan = Plan {
        rnacos: Some(path.to_owned()),
        ..Plan::empty()
    };
    spawn(&plan, Kind::RNacos, Shape::single(), &mut Ports::default()).await
}

/// Starts `nodes` understudy processes from `binary` as one cluster on
/// free ports, each on its own data dir when `durable`.
pub async fn start_understudy(
    binary: &Path,
    nodes: usize,
    durable: bool,
    extra: &[String],
) -> anyhow::Result<Spawned> {
    let plan = Plan {
        understudy: binary.to_owned(),
        server_args: extra.to_vec(),
        ..Plan::empty()
    };
    let shape = Shape {
        durable,
        ..Shape::cluster(nodes)
    };
    spawn(&plan, Kind::Understudy, shape, &mut Ports::default()).await
}

impl Plan {
    /// A plan that runs nothing, for starting single servers.
    pub(crate) fn empty() -> Self {
        Self {
            rounds: 0,
            seconds: 0.0,
            clients: 0,
            services: 64,
            subscribers: 0,
            changes: 0,
            memory_services: 0,
            memory_per_service: 0,
            idle_connections: 0,
            cluster_nodes: 0,
            kills: 0,
            understudy: PathBuf::new(),
            server_args: Vec::new(),
            rnacos: None,
            nacos: Vec::new(),
            me: std::env::current_exe().unwrap_or_default(),
        }
    }
}

/// Ports, never handing the same one out twice in a run.
#[derive(Default)]
struct Ports(BTreeSet<u16>);

impl Ports {
    fn one(&mut self) -> anyhow::Result<u16> {
        loop {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            if self.0.insert(port) {
                return Ok(port);
            }
        }
    }

    /// A Nacos pair: HTTP on P, gRPC on P + 1000, as every SDK expects.
    fn nacos_pair(&mut self) -> anyhow::Result<(u16, u16)> {
        loop {
            let http = self.one()?;
            let Some(grpc) = http.checked_add(1000) else {
                continue;
            };
            if std::net::TcpListener::bind(("127.0.0.1", grpc)).is_ok() && self.0.insert(grpc) {
                return Ok((http, grpc));
            }
        }
    }
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn pid(child: &Child) -> u32 {
    child.id()
}

/// How many nodes, and whether they keep their data on disk.
#[derive(Debug, Clone, Copy)]
struct Shape {
    nodes: usize,
    durable: bool,
    /// The ceiling's bi-streams push nothing (for idle connections).
    silent: bool,
}

impl Shape {
    fn single() -> Self {
        Self::cluster(1)
    }

    fn cluster(nodes: usize) -> Self {
        Self {
            nodes,
            durable: false,
            silent: false,
        }
    }
}

async fn spawn(
    plan: &Plan,
    kind: Kind,
    shape: Shape,
    ports: &mut Ports,
) -> anyhow::Result<Spawned> {
    let nodes = shape.nodes.max(1);
    let mut pairs = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        let (http, grpc) = ports.nacos_pair()?;
        pairs.push((http, grpc, ports.one()?));
    }
    let mut dir = None;
    if shape.durable && kind == Kind::Understudy {
        dir = Some(tempfile::tempdir()?);
    }
    let mut launches = Vec::new();
    let spawned_at = Instant::now();
    let mut children = Children::default();
    for (n, (http, grpc, raft)) in pairs.iter().enumerate() {
        let mut command = match kind {
            Kind::Ceiling => {
                let mut c = Command::new(&plan.me);
                c.args([
                    "ceiling",
                    "--grpc-port",
                    &grpc.to_string(),
                    "--http-port",
                    &http.to_string(),
                ]);
                if shape.silent {
                    c.arg("--silent-streams");
                }
                c
            }
            Kind::Understudy => {
                let mut args = vec![
                    "--http-port".to_owned(),
                    http.to_string(),
                    "--grpc-port".to_owned(),
                    grpc.to_string(),
                    "--log".to_owned(),
                    "error,openraft=off".to_owned(),
                ];
                if let Some(dir) = &dir {
                    let path = dir.path().join(format!("node-{}", n + 1));
                    args.extend(["--data-dir".to_owned(), path.display().to_string()]);
                }
                if nodes > 1 {
                    args.extend([
                        "--node-id".to_owned(),
                        (n + 1).to_string(),
                        "--raft-port".to_owned(),
                        raft.to_string(),
                    ]);
                    for (p, (_, _, peer_raft)) in pairs.iter().enumerate() {
                        if p != n {
                            args.extend([
                                "--peer".to_owned(),
                                format!("{}=127.0.0.1:{peer_raft}", p + 1),
                            ]);
                        }
                    }
                }
                args.extend(plan.server_args.iter().cloned());
                let mut c = Command::new(&plan.understudy);
                for (key, _) in std::env::vars() {
                    if key.starts_with("UNDERSTUDY_") {
                        c.env_remove(key);
                    }
                }
                c.args(&args);
                launches.push((plan.understudy.clone(), args));
                c
            }
            Kind::RNacos => {
                let path = plan.rnacos.as_ref().expect("r-nacos runs only when found");
                let data = tempfile::tempdir()?;
                let mut c = Command::new(path);
                c.current_dir(data.path())
                    .env("RNACOS_HTTP_PORT", http.to_string())
                    .env("RNACOS_GRPC_PORT", grpc.to_string())
                    .env("RNACOS_HTTP_CONSOLE_PORT", raft.to_string())
                    .env("RNACOS_DATA_DIR", data.path())
                    .env("RNACOS_RAFT_NODE_ADDR", format!("127.0.0.1:{grpc}"))
                    .env("RUST_LOG", "error");
                dir = Some(data);
                c
            }
            Kind::Nacos(_) => anyhow::bail!("a Nacos the user started is not spawned"),
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {kind:?}: {e}"))?;
        children.0.push(child);
    }
    let grpc: Vec<SocketAddr> = pairs.iter().map(|p| local(p.1)).collect();
    let http: Vec<SocketAddr> = pairs.iter().map(|p| local(p.0)).collect();
    let startup = match kind {
        Kind::Ceiling => {
            let deadline = spawned_at + Duration::from_secs(20);
            for addr in grpc.iter().chain(&http) {
                while tokio::net::TcpStream::connect(addr).await.is_err() {
                    anyhow::ensure!(
                        Instant::now() < deadline,
                        "the ceiling never listened on {addr}"
                    );
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            spawned_at.elapsed()
        }
        _ => {
            let mut slowest = Duration::ZERO;
            for addr in &grpc {
                slowest =
                    slowest.max(super::ready(*addr, spawned_at, Duration::from_secs(60)).await?);
            }
            slowest
        }
    };
    let name = match (kind, nodes, shape.durable) {
        (Kind::Ceiling, _, _) => "ceiling".to_owned(),
        (Kind::Understudy, 1, false) => "understudy".to_owned(),
        (Kind::Understudy, 1, true) => "understudy-disk".to_owned(),
        (Kind::Understudy, n, false) => format!("understudy×{n}"),
        (Kind::Understudy, n, true) => format!("understudy-disk×{n}"),
        (Kind::RNacos, _, _) => "r-nacos".to_owned(),
        (Kind::Nacos(n), _, _) => plan.nacos[n].name.clone(),
    };
    let watched = Watched::new(children.0.iter().map(pid).collect());
    Ok(Spawned {
        children,
        launches,
        target: Target {
            name,
            grpc,
            http,
            watched,
            echo: kind == Kind::Ceiling,
            compact: (kind == Kind::Understudy).then(|| "/understudy/v1/raft/compact".to_owned()),
            jvm: None,
        },
        startup,
        dir,
    })
}

/// Runs the plan; every run is printed as it ends (a human line, then
/// its JSON line) and written to `json`; the summary table follows.
pub async fn run(plan: &Plan, json: &Path) -> anyhow::Result<Vec<Run>> {
    let mut kinds = vec![Kind::Ceiling, Kind::Understudy];
    match &plan.rnacos {
        Some(path) => {
            println!("r-nacos: {}", path.display());
            kinds.push(Kind::RNacos);
        }
        None => println!(
            "\n!!! r-nacos NOT FOUND: its columns stay empty. Install it with \
             `cargo install rnacos --locked` (or pass --rnacos PATH) to compare. !!!\n"
        ),
    }
    for (n, nacos) in plan.nacos.iter().enumerate() {
        println!("{}: {} (pid {})", nacos.name, nacos.http, nacos.pid);
        kinds.push(Kind::Nacos(n));
    }
    let mut out = std::fs::File::create(json)?;
    let mut runs = Vec::new();
    // A Nacos the user started is still starting now: its start-up is
    // measured first, before anything else loads the machine.
    for nacos in &plan.nacos {
        let run = external_startup(nacos, &nacos.target()).await?;
        println!("{run}");
        writeln!(out, "{}", run.json())?;
        runs.push(run);
    }
    let mut ports = Ports::default();
    let seconds = Duration::from_secs_f64(plan.seconds);
    for round in 1..=plan.rounds {
        println!("-- round {round} of {}", plan.rounds);
        // Alternate the order, so neither server always runs first.
        let mut order = kinds.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for &kind in &order {
            let mut record = |run: Run| -> anyhow::Result<()> {
                println!("{run}");
                writeln!(out, "{}", run.json())?;
                runs.push(run);
                Ok(())
            };
            if let Kind::Nacos(n) = kind {
                let nacos = &plan.nacos[n];
                let t = nacos.target();
                record(super::register(&t, plan.clients, plan.services, seconds).await?)?;
                record(super::query(&t, plan.clients, seconds).await?)?;
                record(super::beat(&t, plan.clients, seconds).await?)?;
                record(super::push(&t, plan.subscribers, plan.changes).await?)?;
                record(super::idle(&t, plan.idle_connections).await?)?;
                let memory = super::memory(&t, plan.memory_services, plan.memory_per_service);
                record(memory.await?)?;
                continue;
            }
            let server = spawn(plan, kind, Shape::single(), &mut ports).await?;
            let t = &server.target;
            if kind != Kind::Ceiling {
                let mut startup = Run::new("startup", t, "spawn to first registration".into());
                startup.startup_ms = Some(server.startup.as_secs_f64() * 1000.0);
                startup.rss_bytes = Some(super::settled_rss(t).await?);
                record(startup)?;
            }
            record(super::register(t, plan.clients, plan.services, seconds).await?)?;
            record(super::query(t, plan.clients, seconds).await?)?;
            record(super::beat(t, plan.clients, seconds).await?)?;
            if kind == Kind::Ceiling {
                // The same fan-out with no registry behind it.
                record(super::push(t, plan.subscribers, plan.changes).await?)?;
                // What an idle connection costs the transport alone.
                drop(server);
                let silent = Shape {
                    silent: true,
                    ..Shape::single()
                };
                let server = spawn(plan, kind, silent, &mut ports).await?;
                record(super::idle(&server.target, plan.idle_connections).await?)?;
                continue;
            }
            record(super::push(t, plan.subscribers, plan.changes).await?)?;
            drop(server);
            let server = spawn(plan, kind, Shape::single(), &mut ports).await?;
            record(super::idle(&server.target, plan.idle_connections).await?)?;
            drop(server);
            let server = spawn(plan, kind, Shape::single(), &mut ports).await?;
            let memory = super::memory(
                &server.target,
                plan.memory_services,
                plan.memory_per_service,
            );
            record(memory.await?)?;
            drop(server);
            if kind != Kind::Understudy {
                continue;
            }
            // Durable: the same register and memory runs with a data dir.
            let durable = Shape {
                durable: true,
                ..Shape::single()
            };
            let server = spawn(plan, kind, durable, &mut ports).await?;
            let run = super::register(&server.target, plan.clients, plan.services, seconds);
            let mut run = run.await?;
            run.disk_bytes = Some(server.disk_bytes());
            record(run)?;
            drop(server);
            let server = spawn(plan, kind, durable, &mut ports).await?;
            let memory = super::memory(
                &server.target,
                plan.memory_services,
                plan.memory_per_service,
            );
            let mut run = memory.await?;
            run.disk_bytes = Some(server.disk_bytes());
            record(run)?;
            drop(server);
            if plan.cluster_nodes > 1 {
                let shape = Shape::cluster(plan.cluster_nodes);
                let cluster = spawn(plan, kind, shape, &mut ports).await?;
                // The CPU counted is every node's.
                for (_, t) in leader_and_followers(&cluster.target).await? {
                    record(super::register(&t, plan.clients, plan.services, seconds).await?)?;
                }
                drop(cluster);
            }
            if plan.kills > 0 {
                let shape = Shape {
                    durable: true,
                    ..Shape::cluster(3)
                };
                let mut cluster = spawn(plan, kind, shape, &mut ports).await?;
                record(super::failover::run(&mut cluster, plan.kills).await?)?;
            }
        }
    }
    println!("\n{}", super::summary::summary(&runs, plan));
    Ok(runs)
}

/// A cluster reached through its leader alone, then through its followers
/// alone (each forwards its writes to the leader), once it names one
/// leader: `("leader", …)` and `("followers", …)`.
pub(super) async fn leader_and_followers(
    cluster: &Target,
) -> anyhow::Result<[(&'static str, Target); 2]> {
    let (leader, _) = super::failover::steady(&cluster.http, None).await?;
    let followers: Vec<usize> = (0..cluster.http.len()).filter(|n| *n != leader).collect();
    Ok([
        ("leader", cluster.through(&[leader], "leader")),
        ("followers", cluster.through(&followers, "followers")),
    ])
}

/// The start-up of a Nacos the user started: from its process' start to
/// its first acknowledged registration, when the run finds it not ready
/// yet (else not measured, and said so), and its idle RSS after a full GC.
async fn external_startup(nacos: &External, t: &Target) -> anyhow::Result<Run> {
    let mut run = Run::new("startup", t, "process start to first registration".into());
    // Nacos opens its ports at the end of its start-up: one open already
    // means it was up before the run looked.
    let was_up = tokio::net::TcpStream::connect(t.grpc[0]).await.is_ok();
    super::ready(t.grpc[0], Instant::now(), Duration::from_secs(180)).await?;
    let age = super::procfs::age(nacos.pid)?;
    if !was_up {
        run.startup_ms = Some(age.as_secs_f64() * 1000.0);
    } else {
        println!(
            "\n!!! {} was up {:.1} s before this run looked: its start-up is not measured; \
             start it as the run starts to measure it !!!\n",
            nacos.name,
            age.as_secs_f64()
        );
    }
    run.rss_bytes = Some(super::settled_rss(t).await?);
    Ok(run)
}

/// `rnacos` on the PATH, if it is there.
pub fn find_rnacos() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("rnacos"))
        .find(|candidate| candidate.is_file())
}

/// The ceilings alone: register, query and beat shapes against a freshly
/// started ceiling process.
pub async fn ceiling_only(clients: usize, seconds: Duration) -> anyhow::Result<Vec<Run>> {
    let plan = Plan::empty();
    let server = spawn(&plan, Kind::Ceiling, Shape::single(), &mut Ports::default()).await?;
    let t = &server.target;
    Ok(vec![
        super::register(t, clients, plan.services, seconds).await?,
        super::query(t, clients, seconds).await?,
        super::beat(t, clients, seconds).await?,
    ])
}
