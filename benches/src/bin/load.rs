//! `load`: the load generator. Drives a Nacos-compatible server over its
//! gRPC and HTTP APIs as real clients do, one mode at a time, and prints a
//! human line and a JSON line per run; `compare` runs every mode against
//! understudy, r-nacos and the machine's ceilings in one run.
//!
//! ```text
//! load register --grpc 127.0.0.1:9848 --pid $(pidof understudy)
//! load limit                 # the bare tonic echo and hyper ceilings
//! load compare               # everything, against everyone, with ratios
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use understudy_benches::load::{self, compare, procfs::Watched, Run, Target};

#[derive(Debug, Parser)]
#[command(
    name = "load",
    about = "Load generator for Nacos-compatible registries"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// gRPC registrations, each a real change (through raft on understudy).
    Register {
        #[command(flatten)]
        server: Server,
        #[command(flatten)]
        load: Load,
        /// Services the registrations spread over.
        #[arg(long, default_value_t = 64)]
        services: usize,
    },
    /// gRPC queries of 16 services of 10 instances.
    Query {
        #[command(flatten)]
        server: Server,
        #[command(flatten)]
        load: Load,
    },
    /// HTTP v1 light beats.
    Beat {
        #[command(flatten)]
        server: Server,
        #[command(flatten)]
        load: Load,
    },
    /// Push latency from a write's acknowledgement to each subscriber.
    Push {
        #[command(flatten)]
        server: Server,
        /// Subscribers of the pushed service.
        #[arg(long, default_value_t = 1000)]
        subscribers: usize,
        /// Changes, one at a time.
        #[arg(long, default_value_t = 20)]
        changes: usize,
    },
    /// RSS per instance (needs --pid).
    Memory {
        #[command(flatten)]
        server: Server,
        /// Services.
        #[arg(long, default_value_t = 10_000)]
        services: usize,
        /// Instances per service.
        #[arg(long, default_value_t = 10)]
        per_service: usize,
    },
    /// RSS per idle gRPC connection (needs --pid).
    Idle {
        #[command(flatten)]
        server: Server,
        /// Connections.
        #[arg(long, default_value_t = 1000)]
        connections: usize,
    },
    /// Leader kills under paced writes on a 3-node durable understudy
    /// cluster it starts: how long writes are refused, and whether any
    /// acknowledged write is lost.
    Failover {
        /// Leader kills.
        #[arg(long, default_value_t = 5)]
        kills: usize,
        /// The `understudy` binary [default: `understudy` beside this one].
        #[arg(long)]
        understudy: Option<PathBuf>,
        /// Extra arguments for every node (e.g. `--server-arg=--raft-election-timeout-ms=500`).
        #[arg(long = "server-arg", allow_hyphen_values = true)]
        server_args: Vec<String>,
    },
    /// The cost curves: memory and query p99 by registry size, push p99
    /// by subscribers, register throughput by connections, on freshly
    /// started servers (understudy, and r-nacos when found); writes an SVG.
    Curves {
        /// Registry sizes, in instances (10 per service).
        #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
        instances: Vec<usize>,
        /// Subscriber counts.
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
        subscribers: Vec<usize>,
        /// Connection counts.
        #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
        connections: Vec<usize>,
        /// Seconds per throughput or latency run.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// The `understudy` binary [default: `understudy` beside this one].
        #[arg(long)]
        understudy: Option<PathBuf>,
        /// The r-nacos binary [default: `rnacos` on the PATH; none: skipped].
        #[arg(long)]
        rnacos: Option<PathBuf>,
        /// Where the SVG goes.
        #[arg(long, default_value = "docs/cost-curves.svg")]
        out: PathBuf,
        /// Where the points go, one JSON line each.
        #[arg(long, default_value = "target/curves.jsonl")]
        json: PathBuf,
        /// Measure nothing: draw the SVG from the points in --json.
        #[arg(long)]
        redraw: bool,
    },
    /// The machine's ceiling: register, query and beat shapes against a
    /// bare tonic echo and a bare hyper server, started as a child process.
    Limit {
        #[command(flatten)]
        load: Load,
    },
    /// Serves the bare tonic echo and hyper ceilings (used by `limit` and
    /// `compare`).
    Ceiling {
        /// gRPC port.
        #[arg(long, default_value_t = 0)]
        grpc_port: u16,
        /// HTTP port.
        #[arg(long, default_value_t = 0)]
        http_port: u16,
        /// Bi-streams push nothing and cost nothing per connection (the
        /// idle connection's ceiling).
        #[arg(long)]
        silent_streams: bool,
    },
    /// Every mode against understudy, r-nacos and the ceilings, in one run.
    Compare(CompareArgs),
}

#[derive(Debug, Args)]
struct Server {
    /// gRPC address (several, comma-separated, for a cluster).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:9848")]
    grpc: Vec<SocketAddr>,
    /// HTTP address (several, comma-separated, for a cluster).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:8848")]
    http: Vec<SocketAddr>,
    /// The server's process ids, for its CPU time and memory.
    #[arg(long, value_delimiter = ',')]
    pid: Vec<u32>,
    /// Its name in the report.
    #[arg(long, default_value = "server")]
    name: String,
    /// The server is the echo ceiling (`load ceiling`): answers are not
    /// checked.
    #[arg(long)]
    echo: bool,
    /// HTTP path POSTed to compact the server's log before the memory
    /// reading (understudy: /understudy/v1/raft/compact).
    #[arg(long)]
    compact: Option<String>,
    /// The server is a JVM (Nacos): collect it in full (`jcmd PID GC.run`)
    /// before each memory reading.
    #[arg(long)]
    jvm: bool,
}

impl Server {
    fn target(self) -> Target {
        let jvm = self.jvm.then(|| self.pid.first().copied()).flatten();
        Target {
            name: self.name,
            grpc: self.grpc,
            http: self.http,
            watched: Watched::new(self.pid),
            echo: self.echo,
            compact: self.compact,
            jvm,
        }
    }
}

#[derive(Debug, Args)]
struct Load {
    /// Connections.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
}

impl Load {
    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

#[derive(Debug, Args)]
struct CompareArgs {
    /// Rounds (each runs every server once; the order alternates).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Seconds per throughput run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Connections for the throughput runs.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Subscribers in the push run.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Changes in the push run.
    #[arg(long, default_value_t = 20)]
    changes: usize,
    /// Services in the memory run (of 10 instances each).
    #[arg(long, default_value_t = 10_000)]
    memory_services: usize,
    /// Connections in the idle run.
    #[arg(long, default_value_t = 1000)]
    idle_connections: usize,
    /// Nodes of the cluster register run (below 2: none).
    #[arg(long, default_value_t = 3)]
    cluster_nodes: usize,
    /// Leader kills in the failover run of a 3-node durable cluster (0:
    /// no failover run).
    #[arg(long, default_value_t = 5)]
    kills: usize,
    /// The understudy binary [default: `understudy` beside this one].
    #[arg(long)]
    understudy: Option<PathBuf>,
    /// The r-nacos binary [default: `rnacos` on the PATH; none: skipped].
    #[arg(long)]
    rnacos: Option<PathBuf>,
    /// A Nacos you started, `NAME=HTTP_ADDRESS@PID` (gRPC at the HTTP
    /// port + 1000), e.g. `nacos-3.0.3=127.0.0.1:8848@12345`; repeat for
    /// several. Start it as the run starts to measure its start-up; its
    /// memory is read after `jcmd PID GC.run` (a JDK's jcmd on the PATH).
    #[arg(long, value_parser = parse_external)]
    nacos: Vec<compare::External>,
    /// Extra arguments for every understudy process (e.g.
    /// `--server-arg=--raft-election-timeout-ms=500`).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Where the JSON lines of every run go.
    #[arg(long, default_value = "target/compare.jsonl")]
    json: PathBuf,
}

/// `NAME=HTTP_ADDRESS@PID`.
fn parse_external(raw: &str) -> Result<compare::External, String> {
    let (name, rest) = raw
        .split_once('=')
        .ok_or("expected NAME=HTTP_ADDRESS@PID")?;
    let (http, pid) = rest
        .split_once('@')
        .ok_or("expected NAME=HTTP_ADDRESS@PID")?;
    Ok(compare::External {
        name: name.to_owned(),
        http: http
            .parse()
            .map_err(|e| format!("HTTP_ADDRESS {http}: {e}"))?,
        pid: pid.parse().map_err(|e| format!("PID {pid}: {e}"))?,
    })
}

/// The understudy binary: `given`, or `understudy` beside this one.
fn understudy_binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let binary = match given {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("understudy"),
    };
    anyhow::ensure!(
        binary.is_file(),
        "no understudy binary at {} (build it: cargo build --release -p understudy)",
        binary.display()
    );
    Ok(binary)
}

fn print(run: &Run) {
    use std::io::Write as _;
    // A closed pipe (`| head`) is no error worth a panic.
    let _ = writeln!(std::io::stdout(), "{run}\n{}", run.json());
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().mode {
        Mode::Register {
            server,
            load,
            services,
        } => {
            print(&load::register(&server.target(), load.clients, services, load.duration()).await?)
        }
        Mode::Query { server, load } => {
            print(&load::query(&server.target(), load.clients, load.duration()).await?)
        }
        Mode::Beat { server, load } => {
            print(&load::beat(&server.target(), load.clients, load.duration()).await?)
        }
        Mode::Push {
            server,
            subscribers,
            changes,
        } => print(&load::push(&server.target(), subscribers, changes).await?),
        Mode::Memory {
            server,
            services,
            per_service,
        } => print(&load::memory(&server.target(), services, per_service).await?),
        Mode::Idle {
            server,
            connections,
        } => print(&load::idle(&server.target(), connections).await?),
        Mode::Failover {
            kills,
            understudy,
            server_args,
        } => {
            let binary = understudy_binary(understudy)?;
            let mut cluster = compare::start_understudy(&binary, 3, true, &server_args).await?;
            print(&load::failover::run(&mut cluster, kills).await?);
        }
        Mode::Curves {
            instances,
            subscribers,
            connections,
            seconds,
            understudy,
            rnacos,
            out,
            json,
            redraw,
        } => {
            if redraw {
                let points = std::fs::read_to_string(&json)?
                    .lines()
                    .map(serde_json::from_str)
                    .collect::<Result<Vec<load::curves::Point>, _>>()?;
                std::fs::write(&out, load::curves::svg(&points))?;
                println!("drew {} from {}", out.display(), json.display());
                return Ok(());
            }
            let plan = load::curves::Plan {
                understudy: understudy_binary(understudy)?,
                rnacos: rnacos.or_else(compare::find_rnacos),
                instances,
                subscribers,
                connections,
                seconds,
            };
            let points = load::curves::run(&plan).await?;
            let lines: Vec<String> = points
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<_, _>>()?;
            std::fs::write(&json, lines.join("\n") + "\n")?;
            std::fs::write(&out, load::curves::svg(&points))?;
            println!("wrote {} and {}", out.display(), json.display());
        }
        Mode::Limit { load } => {
            for run in compare::ceiling_only(load.clients, load.duration()).await? {
                print(&run);
            }
        }
        Mode::Ceiling {
            grpc_port,
            http_port,
            silent_streams,
        } => {
            let (grpc, http) = load::ceiling::bind(grpc_port, http_port).await?;
            println!(
                "ceiling: gRPC echo on {}, HTTP on {}",
                grpc.local_addr()?,
                http.local_addr()?
            );
            load::ceiling::serve(grpc, http, silent_streams).await?;
        }
        Mode::Compare(args) => {
            let me = std::env::current_exe()?;
            let understudy = understudy_binary(args.understudy)?;
            let plan = compare::Plan {
                rounds: args.rounds,
                seconds: args.seconds,
                clients: args.clients,
                services: 64,
                subscribers: args.subscribers,
                changes: args.changes,
                memory_services: args.memory_services,
                memory_per_service: 10,
                idle_connections: args.idle_connections,
                cluster_nodes: args.cluster_nodes,
                kills: args.kills,
                understudy,
                server_args: args.server_args,
                rnacos: args.rnacos.or_else(compare::find_rnacos),
                nacos: args.nacos,
                me,
            };
            compare::run(&plan, &args.json).await?;
        }
    }
    Ok(())
}
