//! One run of a scenario: start the sim cluster, the workloads, apply the
//! timeline at its times, stop, wait for convergence, judge.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;
use understudy_server::raft::NodeId;
use understudy_server::sim::{Sim, SimSpec};

use crate::report::{AppliedStep, Convergence, OverTime, Report};
use crate::serving::Serving;
use crate::workload::{converge, sim_views, Targets, Workload};
use crate::{lock, Action, ChaosError, Scenario};

/// Runs `scenario` and reports.
pub async fn run(scenario: &Scenario, scale: f64) -> Result<Report, ChaosError> {
    let settings = understudy_server::config::Settings {
        log: None,
        ..understudy_server::sim::raft_timings(understudy_server::sim::heartbeat_for(
            scenario.all_links(),
        ))
    };
    let spec = SimSpec {
        dcs: scenario.dcs.clone(),
        links: scenario.links.clone(),
        apply_delays: scenario.apply_delays.clone(),
        seed: scenario.seed,
        bind: std::net::IpAddr::from([127, 0, 0, 1]),
        base_port: 0,
        settings,
    };
    let mut sim = Sim::start(&spec, Duration::from_secs(30)).await?;
    let targets = Targets::of(&sim);
    let nodes: BTreeMap<NodeId, String> =
        sim.nodes().values().map(|n| (n.id, n.dc.clone())).collect();

    // Watchers first, so they see every registration; then the serving
    // providers, and consumers that list them all.
    let mut workload = Workload::watch(scenario, targets.clone()).await?;
    let mut serving = if scenario.serves() {
        Some(Serving::start(scenario, &sim).await?)
    } else {
        None
    };
    let start = Instant::now();
    let window = OverTime::window_for(scenario.duration);
    workload.start(scenario, &sim, start, window);
    if let Some(serving) = &mut serving {
        serving.begin(start, window, OverTime::windows(scenario.duration, window));
    }

    // The timeline.
    let mut schedule = Vec::new();
    let mut heals = Vec::new();
    for step in &scenario.steps {
        tokio::time::sleep_until(start + step.at).await;
        let applied = start.elapsed();
        eprintln!(
            "understudy chaos: {:>7.1} s of {:.1} s: {}",
            applied.as_secs_f64(),
            scenario.duration.as_secs_f64(),
            step.action
        );
        apply_step(&mut sim, &targets, &step.action).await;
        if let Some(serving) = &mut serving {
            serving.apply(&step.action, applied).await;
        }
        if matches!(step.action, Action::Heal(_)) {
            heals.push((
                step.at,
                tokio::spawn(converge(
                    sim_views(&sim),
                    targets.killed.clone(),
                    sim.faults().clone(),
                )),
            ));
        }
        schedule.push(AppliedStep {
            at_ms: step.at.as_millis() as u64,
            action: step.action.to_string(),
            applied_ms: applied.as_millis() as u64,
        });
    }
    tokio::time::sleep_until(start + scenario.duration).await;
    eprintln!(
        "understudy chaos: {:>7.1} s: the timeline is over; stopping the clients and waiting for convergence",
        start.elapsed().as_secs_f64()
    );
    workload.stop_writing().await;
    // The consumers' last calls finish (each within its own timeouts).
    let judged = match serving {
        Some(serving) => Some(serving.finish().await),
        None => None,
    };
    let mut converge_report = Vec::new();
    for (at, task) in heals {
        converge_report.push(Convergence {
            heal_at_ms: at.as_millis() as u64,
            converged_ms: task.await.ok().flatten().map(|d| d.as_millis() as u64),
        });
    }
    // The end: every live node settles on the same log, then the
    // watchers on the registry's list.
    let settled = converge(
        sim_views(&sim),
        targets.killed.clone(),
        sim.faults().clone(),
    )
    .await
    .is_some();
    let finished = workload.finish().await?;
    let loss_patterns = sim
        .faults()
        .loss_patterns()
        .into_iter()
        .map(|(from, to, pattern)| (format!("{from}->{to}"), pattern))
        .collect();
    sim.stop().await;
    Ok(Report {
        scenario: scenario.name.clone(),
        seed: scenario.seed,
        scale,
        nodes,
        duration_ms: scenario.duration.as_millis() as u64,
        dcs: finished.dcs,
        writes: finished.writes,
        watch: finished.watch,
        converge: converge_report,
        schedule,
        loss_patterns,
        settled,
        consumers: judged
            .as_ref()
            .map(|j| j.consumers.clone())
            .unwrap_or_default(),
        stale_window: judged
            .as_ref()
            .map(|j| j.stale_window.clone())
            .unwrap_or_default(),
        provider_faults: judged
            .as_ref()
            .map(|j| j.provider_faults.clone())
            .unwrap_or_default(),
        over_time: OverTime {
            window_ms: window.as_millis() as u64,
            view_lag_ms: finished.view_lag_ms,
            consumers: judged
                .as_ref()
                .map(|j| j.over_time.clone())
                .unwrap_or_default(),
        },
        call_loss_patterns: judged.map(|j| j.call_loss_patterns).unwrap_or_default(),
    })
}

async fn apply_step(sim: &mut Sim, targets: &Targets, action: &Action) {
    let faults = sim.faults().clone();
    match action {
        Action::Partition(a, b) => faults.partition(a, b),
        Action::Heal(Some((a, b))) => faults.heal_dcs(a, b),
        Action::Heal(None) => faults.heal_all(),
        Action::Link(spec) => {
            // Validated when the scenario was parsed.
            let _ = faults.apply(spec);
        }
        Action::ApplyDelay(dc, delay) => faults.set_apply_delay(dc, *delay),
        Action::Push(dc, fault) => {
            let _ = faults.set_push_fault(dc, *fault);
        }
        Action::ConfigReadLag(dc, lag) => faults.set_config_read_lag(dc, *lag),
        Action::Kill(id) => {
            lock(&targets.killed).insert(*id);
            sim.kill(*id);
        }
        Action::Pause(id) => faults.pause(*id),
        Action::Resume(id) => faults.resume(*id),
        Action::KillProviders(_)
        | Action::RestartProviders(_)
        | Action::PauseProvider(..)
        | Action::SlowProviders { .. }
        | Action::CallLink(_) => {}
        Action::Hold(hold) => hold_everywhere(sim, hold).await,
    }
}

/// Sets `hold` on every running node through its chaos admin API: a
/// client subscribes on one node, which only that node knows. A node that
/// refuses is named in the log; the run goes on.
async fn hold_everywhere(sim: &Sim, hold: &crate::scenario::Hold) {
    let http = reqwest::Client::new();
    let form = hold.form();
    for (id, node) in sim.nodes() {
        if sim.node(*id).is_none() {
            continue;
        }
        let url = format!("http://{}/understudy/v1/chaos/hold", node.http);
        match http.post(&url).form(&form).send().await {
            Ok(answer) if answer.status().is_success() => {}
            Ok(answer) => {
                let status = answer.status();
                let body = answer.text().await.unwrap_or_default();
                tracing::warn!(node = id, %status, body, "{hold}: refused");
            }
            Err(e) => tracing::warn!(node = id, error = %e, "{hold}: not set"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hold_action_is_set_on_every_running_node() {
        let spec = SimSpec {
            dcs: vec![("hz".into(), 2), ("sh".into(), 1)],
            links: Vec::new(),
            apply_delays: BTreeMap::new(),
            seed: 1,
            bind: std::net::IpAddr::from([127, 0, 0, 1]),
            base_port: 0,
            settings: understudy_server::config::Settings {
                log: None,
                ..understudy_server::sim::raft_timings(50)
            },
        };
        let mut sim = Sim::start(&spec, Duration::from_secs(30)).await.unwrap();
        sim.kill(3);
        let words = ["orders", "enable=10.0.0.7:80", "timeout=2s"];
        let hold = crate::scenario::Hold::parse(&words).unwrap();
        hold_everywhere(&sim, &hold).await;
        let http = reqwest::Client::new();
        for id in [1, 2] {
            let url = format!("http://{}/understudy/v1/chaos/holds", sim.nodes()[&id].http);
            let body: serde_json::Value = http.get(url).send().await.unwrap().json().await.unwrap();
            let holds = body["holds"].as_array().cloned().unwrap_or_default();
            assert_eq!(holds.len(), 1, "node {id}: {body}");
            assert_eq!(holds[0]["service"], "DEFAULT_GROUP@@orders");
            assert_eq!(holds[0]["timeoutMs"], 2000);
            assert_eq!(
                holds[0]["action"],
                "update 10.0.0.7:80@DEFAULT: enabled=true"
            );
        }
        sim.stop().await;
    }
}
