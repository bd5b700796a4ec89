//! The `understudy` binary: parse and validate configuration (exit code 64
//! on invalid values), set up logging, bind, serve until SIGINT or SIGTERM;
//! or run an admin command (`understudy ctl ...`) against a running node.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use understudy_server::config::{Cli, Command};
use understudy_server::{run, Listeners};

/// sysexits' EX_USAGE: the command line or config was wrong.
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match cli.command {
        Some(Command::Ctl(args)) => return understudy_server::ctl::main(args),
        Some(Command::Sim(args)) => {
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
            let understudy_server::chaos::ChaosCommand::Run(args) = args.command;
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
        _ => {}
    }
    let config = match cli.into_serve_args().resolve() {
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
async fn chaos(args: understudy_server::chaos::RunArgs) -> anyhow::Result<bool> {
    Ok(understudy_server::chaos::main(args).await?)
}

#[tokio::main]
async fn serve(config: understudy_server::ValidConfig) -> anyhow::Result<()> {
    let listeners = Listeners::bind(&config)
        .await
        .with_context(|| format!("cannot bind {}:{}", config.bind, config.http_port))?;
    run(config, listeners, shutdown_signal()).await?;
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
