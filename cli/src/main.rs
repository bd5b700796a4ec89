//! The `understudy` binary: parse and validate configuration (exit code 64
//! on invalid values), set up logging, bind, serve until SIGINT or SIGTERM;
//! or run an admin command (`understudy ctl ...`) against a running node,
//! a whole cluster in this process (`understudy sim`), or a chaos scenario
//! with its providers and consumers (`understudy chaos run`).
//!
//! It is a package of its own because it joins two libraries that must
//! not depend on each other: the server (`understudy-server`) and the
//! chaos rig (`understudy-rig`), which depends on the server and on the
//! bundled client.

use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use understudy_server::cli::{Command as NodeCommand, ServeArgs};
use understudy_server::Listeners;

/// jemalloc, not the system's malloc: it gives freed memory back and
/// fragments less under the registry's many small allocations (measured
/// in docs/architecture.md); its settings are in `.cargo/config.toml`.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The command line: the server's commands and `chaos`.
#[derive(Debug, Parser)]
#[command(
    name = "understudy",
    version,
    about = "A service registry that stands in for Nacos"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    /// What to do; `serve` when absent.
    #[command(subcommand)]
    command: Option<Command>,
    /// Settings for the default `serve`.
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
// Built once per process from the command line.
#[allow(clippy::large_enum_variant)]
enum Command {
    #[command(flatten)]
    Node(NodeCommand),
    /// Chaos scenarios: `chaos run FILE` runs one against a sim cluster
    /// with the registry workload, serving providers and consumers, and
    /// writes its report.
    Chaos(understudy_rig::ChaosArgs),
    /// Nacos compatibility: `compat record` sends the corpus of request
    /// sequences to a server (a real Nacos) and writes its answers as
    /// transcripts; `compat check` replays them against another server
    /// and compares.
    Compat(understudy_compat::cli::CompatArgs),
}

/// sysexits' EX_USAGE: the command line or config was wrong.
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let parsed = understudy_server::cli::with_stated_defaults(Cli::command())
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let serve_args = match cli.command {
        Some(Command::Node(NodeCommand::Ctl(args))) => return understudy_server::ctl::main(args),
        Some(Command::Node(NodeCommand::Sim(args))) => {
            init_logging(&args.log);
            return match sim(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("understudy sim: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            };
        }
        Some(Command::Chaos(args)) => {
            let understudy_rig::ChaosCommand::Run(args) = args.command;
            init_logging(&args.log);
            return match chaos(args) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => {
                    eprintln!("understudy chaos: the run broke a promise (see the report)");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("understudy chaos: {e}");
                    ExitCode::from(EXIT_USAGE)
                }
            };
        }
        Some(Command::Compat(args)) => {
            return match compat(args) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("understudy compat: {e:#}");
                    ExitCode::from(EXIT_USAGE)
                }
            };
        }
        Some(Command::Node(NodeCommand::Serve(args))) => args,
        None => cli.serve,
    };
    let config = match serve_args.resolve() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("understudy: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_logging(&config.log);
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

#[tokio::main]
async fn sim(args: understudy_server::sim::SimArgs) -> anyhow::Result<()> {
    Ok(understudy_server::sim::main(args, shutdown_signal()).await?)
}

#[tokio::main]
async fn chaos(args: understudy_rig::RunArgs) -> anyhow::Result<bool> {
    Ok(understudy_rig::main(args).await?)
}

#[tokio::main]
async fn compat(args: understudy_compat::cli::CompatArgs) -> anyhow::Result<bool> {
    understudy_compat::cli::main(args).await
}

#[tokio::main]
async fn serve(config: understudy_server::ValidConfig) -> anyhow::Result<()> {
    let listeners = Listeners::bind(&config)
        .await
        .with_context(|| format!("cannot bind {}:{}", config.bind, config.http_port))?;
    let faults = understudy_server::faults::LinkFaults::new(config.chaos.seed);
    let serving = understudy_server::serve(config, listeners, faults).await?;
    print!("{}", serving.banner());
    shutdown_signal().await;
    serving.stop().await?;
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(signal) => signal,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
