//! `understudy-loadgen`: drives understudy's Nacos gRPC API as real
//! clients do and prints throughput and latency percentiles.
//!
//! Without `--grpc` it starts an in-process server on ephemeral ports.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use understudy_benches::loadgen;

#[derive(Debug, Parser)]
#[command(about = "Load generator for understudy's Nacos gRPC API")]
struct Args {
    /// gRPC address of a running server; an in-process one when absent.
    #[arg(long)]
    grpc: Option<SocketAddr>,
    /// Connections for the register and query runs.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds per register and query run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Subscribers of the pushed service.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Changes pushed to them.
    #[arg(long, default_value_t = 20)]
    changes: usize,
    /// Also measure registrations on an in-process cluster of this many
    /// nodes (connections spread over them), beside the single node.
    #[arg(long, default_value_t = 3)]
    cluster_nodes: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = match args.grpc {
        Some(_) => None,
        None => Some(
            understudy_tests::Server::start(understudy_server::config::Settings::default()).await?,
        ),
    };
    let grpc = args
        .grpc
        .or(server.as_ref().map(|s| s.grpc))
        .expect("an address");
    let run = Duration::from_secs_f64(args.seconds);
    println!("{}", loadgen::register(grpc, args.clients, run).await?);
    println!("{}", loadgen::query(grpc, args.clients, run).await?);
    println!(
        "{}",
        loadgen::push(grpc, args.subscribers, args.changes).await?
    );
    for watchers in [1, 100, 1000] {
        println!(
            "{}",
            loadgen::watch_fanout(grpc, watchers, args.changes).await?
        );
    }
    if let Some(server) = server {
        server.stop().await?;
    }
    if args.grpc.is_none() && args.cluster_nodes > 1 {
        let nodes = understudy_tests::Server::start_cluster(
            args.cluster_nodes,
            understudy_server::config::Settings::default(),
        )
        .await?;
        let grpcs: Vec<SocketAddr> = nodes.iter().map(|s| s.grpc).collect();
        let report = loadgen::register_spread(&grpcs, args.clients, run).await?;
        println!("{} nodes: {report}", args.cluster_nodes);
        for node in nodes {
            node.stop().await?;
        }
    }
    Ok(())
}
