//! `cluster-sim`: the client cluster layer in virtual time. `zones` runs
//! seed 000's scenario (a whole zone killed and restored under cross-zone
//! lag and loss) for each consumer combination; `balancers` runs seed
//! 001's comparison (four unequal instances, the same offered load for
//! each balancer). Without a subcommand it runs both. Each prints its
//! parameters, a markdown table, and one JSON line per row.

use clap::{Parser, Subcommand};
use understudy_benches::sim::{
    balancer_run, balancers, zone_run, BalancerParams, Combination, ZoneParams,
};

#[derive(Debug, Parser)]
#[command(about = "Simulations of the client's routers, balancers and strategies")]
struct Args {
    /// The RNG seed; a run replays exactly from it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Scale every duration of the timeline by this factor (0.25 for a
    /// quick look).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    #[command(subcommand)]
    scenario: Option<Scenario>,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Seed 000: providers in hz and sh, hz killed and restored.
    Zones,
    /// Seed 001: balancers over four unequal instances.
    Balancers,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !(args.scale > 0.0 && args.scale.is_finite()) {
        anyhow::bail!("--scale must be a positive number, got {}", args.scale);
    }
    match args.scenario {
        Some(Scenario::Zones) => zones(&args),
        Some(Scenario::Balancers) => balancer_table(&args),
        None => {
            zones(&args);
            println!();
            balancer_table(&args);
        }
    }
    Ok(())
}

fn zones(args: &Args) {
    let p = ZoneParams::seed().scaled(args.scale);
    println!("## Zone failover (seed 000), seed {}", args.seed);
    println!();
    println!(
        "{} providers per zone (hz, sh), {} threads each, service time log-normal median {:?} sigma {}; \
         same-zone RTT {:?}-{:?}, cross-zone RTT {:?}-{:?}, cross-zone loss {}% with spikes {:?} (s, s, loss), \
         a lost packet costs a TCP retransmission of at least {:?}; consumers in both zones, \
         {} calls/s each ({}x the normal {}), {}% not idempotent; hz killed at {} s, restored at {} s, run {} s; \
         the registry shows a change {:?} later; consumer timeout {:?}, provider timeout {:?}, failover retries {}.",
        p.per_zone,
        p.threads,
        p.service.median,
        p.service.sigma,
        p.network.local_rtt.0,
        p.network.local_rtt.1,
        p.network.cross_rtt.0,
        p.network.cross_rtt.1,
        p.network.cross_loss * 100.0,
        p.network.spikes,
        p.network.min_rto,
        p.normal_rate * p.load_factor,
        p.load_factor,
        p.normal_rate,
        p.writes * 100.0,
        p.kill_at,
        p.restore_at,
        p.seconds,
        p.push_delay,
        p.consumer_timeout,
        p.provider_timeout,
        p.retries,
    );
    println!();
    println!("| combination | calls | same-zone (healthy) | same-zone (all) | error rate | idempotent failed while hz down | writes failed while hz down | p50 ms | p99 ms | failing after kill s | recovered after restore s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for combination in Combination::ALL {
        let r = zone_run(&p, combination, args.seed);
        println!(
            "| {} | {} | {:.2}% | {:.2}% | {:.3}% | {} | {} | {:.1} | {:.1} | {:.2} | {} |",
            r.combination,
            r.calls,
            r.same_zone_healthy * 100.0,
            r.same_zone_all * 100.0,
            r.error_rate * 100.0,
            r.idempotent_failed_during_outage,
            r.writes_failed_during_outage,
            r.p50_ms,
            r.p99_ms,
            r.failing_after_kill_s,
            r.recover_after_restore_s
                .map_or("never".to_owned(), |s| format!("{s:.1}")),
        );
        rows.push(r);
    }
    for r in rows {
        println!(
            "{}",
            serde_json::json!({"scenario": "zones", "seed": args.seed, "row": r})
        );
    }
}

fn balancer_table(args: &Args) {
    let mut p = BalancerParams::seed();
    p.seconds *= args.scale;
    println!("## Balancers (seed 001), seed {}", args.seed);
    println!();
    let services: Vec<String> = p
        .instances
        .iter()
        .map(|s| format!("{:?}/{}", s.median, s.sigma))
        .collect();
    println!(
        "4 instances, service time log-normal (median/sigma) {}, {} threads each (a full pool refuses), \
         {} calls/s offered for {} s, timeout {:?}, failover retries {}.",
        services.join(", "),
        p.threads,
        p.rate,
        p.seconds,
        p.timeout,
        p.retries
    );
    println!();
    println!("| balancer | mean ms | p99 ms | answered/s | error rate | share per instance |");
    println!("|---|---:|---:|---:|---:|---|");
    let mut rows = Vec::new();
    for (name, make) in balancers() {
        let r = balancer_run(&p, name, make.as_ref(), args.seed);
        let shares: Vec<String> = r
            .shares
            .iter()
            .map(|s| format!("{:.0}%", s * 100.0))
            .collect();
        println!(
            "| {} | {:.1} | {:.1} | {:.0} | {:.3}% | {} |",
            r.balancer,
            r.mean_ms,
            r.p99_ms,
            r.throughput,
            r.error_rate * 100.0,
            shares.join(" / ")
        );
        rows.push(r);
    }
    for r in rows {
        println!(
            "{}",
            serde_json::json!({"scenario": "balancers", "seed": args.seed, "row": r})
        );
    }
}
