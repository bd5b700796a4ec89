//! understudy-rig: the chaos rig behind `understudy chaos run FILE`. It
//! runs a [scenario](scenario) against a sim cluster
//! ([`understudy_server::sim`]: every node a full node on its own ports,
//! their raft links sharing one fault model) and reports what the
//! registry did and what its clients saw: the registry workload's writes
//! and watch events, and what real consumers, calling real providers
//! through the bundled client's routers, balancers and strategies, got
//! while providers died, paused and slowed and the links between DCs
//! lagged, lost and broke.
//!
//! Component map, in the order a run uses them:
//! - [`scenario`]: the scenario file (a cluster, workloads, a timeline);
//! - `workload`: the registry workload (churning registrants over the
//!   Nacos HTTP API, native watchers, a view-lag sampler) and its
//!   promises: no acknowledged write lost, no watch event missed;
//! - [`callnet`]: the call network between consumer and provider zones
//!   (latency, jitter, loss paid as TCP retransmissions), separate from
//!   the raft links;
//! - `run`: the run itself: start the sim, the workloads, apply the
//!   timeline, stop, judge;
//! - [`report`]: `report.json` and `report.md`;
//! - [`chart`]: the SVG charts beside them.
//!
//! The rig is a library as well as a command: a test builds a
//! [`Scenario`] in code and gets the [`Report`] back from [`run`].

pub mod callnet;
pub mod chart;
mod consumer;
mod nacos;
mod observe;
mod provider;
pub mod report;
mod run;
pub mod scenario;
mod serving;
mod workload;

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use clap::{Args, Subcommand};
use hdrhistogram::Histogram;

pub use chart::Chart;
pub use consumer::{arrivals, Arrival};
pub use provider::SERVING;
pub use report::{ConsumerReport, OverTime, Report, StaleWindow, ZoneOverTime};
pub use run::run;
pub use scenario::{Action, Scenario, ScenarioError, Step};
pub use workload::SERVICE;

/// `understudy chaos`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ChaosArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ChaosCommand,
}

/// The chaos commands.
#[derive(Debug, Clone, Subcommand)]
pub enum ChaosCommand {
    /// Run a scenario file against a sim cluster and write its report.
    Run(RunArgs),
}

/// `chaos run`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The scenario file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Multiply every time in the scenario by this (0.2 for a short run);
    /// link latencies, timeouts and provider pauses are kept.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Use this seed instead of the scenario's.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write report.json, report.md and the charts (lag.svg, and
    /// consumers.svg when the scenario has consumers) here [default:
    /// target/chaos/NAME].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Log filter.
    #[arg(long, default_value = "error,openraft=off")]
    pub log: String,
}

/// Why a chaos run could not run or report (a run that breaks a promise
/// still reports: see [`Report::passed`]).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// `--scale` is not a positive number.
    #[error("--scale must be a positive number, got {0}")]
    Scale(f64),
    /// The scenario file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The scenario file is not a scenario.
    #[error("{path}: {source}")]
    Scenario {
        /// The file.
        path: PathBuf,
        /// The line and what is wrong with it.
        source: ScenarioError,
    },
    /// The sim cluster did not start.
    #[error(transparent)]
    Sim(#[from] understudy_server::sim::SimError),
    /// The workload's HTTP client could not be built or a node did not
    /// answer a listing.
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    /// A watcher got no first snapshot.
    #[error("a watcher got no snapshot within 10 s")]
    WatchersNotReady,
    /// The serving providers or consumers could not start.
    #[error("serving providers and consumers: {0}")]
    Serving(std::io::Error),
    /// The report could not be written.
    #[error("cannot write the report to {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `chaos run` and exits 0 when the report passed.
pub async fn main(args: RunArgs) -> Result<bool, ChaosError> {
    if !(args.scale > 0.0 && args.scale.is_finite()) {
        return Err(ChaosError::Scale(args.scale));
    }
    let text = std::fs::read_to_string(&args.file).map_err(|source| ChaosError::Read {
        path: args.file.clone(),
        source,
    })?;
    let mut scenario = Scenario::parse(&text)
        .map_err(|source| ChaosError::Scenario {
            path: args.file.clone(),
            source,
        })?
        .scaled(args.scale);
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    eprintln!(
        "understudy chaos: running {} ({} s, seed {})",
        scenario.name,
        scenario.duration.as_secs_f64(),
        scenario.seed
    );
    let report = run(&scenario, args.scale).await?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("target/chaos").join(&scenario.name));
    let write = |path: PathBuf, bytes: &[u8]| {
        std::fs::create_dir_all(&out)
            .and_then(|()| std::fs::write(&path, bytes))
            .map_err(|source| ChaosError::Write { path, source })
    };
    let json = serde_json::to_vec_pretty(&report).expect("a report serialises");
    write(out.join("report.json"), &json)?;
    let md = report.markdown();
    write(out.join("report.md"), md.as_bytes())?;
    for chart in report.charts() {
        write(out.join(chart.file), chart.svg.as_bytes())?;
    }
    println!("{md}");
    println!("report: {}", out.join("report.json").display());
    Ok(report.passed())
}
