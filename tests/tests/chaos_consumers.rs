//! Consumers in the chaos rig, against in-process sim clusters: seed 000's
//! two consumer policies on one seed, shortened (the zone-aware one keeps
//! its calls in the zone and loses no idempotent call, and beats Dubbo's
//! defaults on same-zone share, errors and the faulted zone's p99); a GC
//! pause seen in the stale window, the stale calls and the provider's
//! removal and return; and one seed giving the same schedule and call
//! network draws. The tests run one at a time: each is a whole cluster
//! with its load, and they would skew each other's timing.
//!
//! The reports are printed and saved under `target/chaos-ci/`.

use std::path::PathBuf;

use understudy_rig::{run, ConsumerReport, Report, Scenario};

/// One run at a time in this binary.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn scenario(file: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Scenario::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn run_scaled(scenario: &Scenario, scale: f64) -> Report {
    let report = run(&scenario.scaled(scale), scale)
        .await
        .expect("the scenario runs");
    let md = report.markdown();
    println!("{md}");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/chaos-ci")
        .join(&report.scenario);
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("report.md"), &md);
        let _ = std::fs::write(
            dir.join("report.json"),
            serde_json::to_vec_pretty(&report).expect("a report serialises"),
        );
    }
    report
}

fn zone<'a>(report: &'a Report, zone: &str) -> &'a ConsumerReport {
    report
        .consumers
        .iter()
        .find(|c| c.zone == zone)
        .unwrap_or_else(|| panic!("{}: no consumers in {zone}", report.scenario))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_000_zone_aware_consumers_beat_dubbos_defaults_on_one_seed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let aware = run_scaled(&scenario("seed000-zone-aware.chaos"), 0.2).await;
    let defaults = run_scaled(&scenario("seed000-dubbo-defaults.chaos"), 0.2).await;
    assert_eq!(aware.seed, defaults.seed, "one seed");
    assert_eq!(
        aware.schedule.iter().map(|s| &s.action).collect::<Vec<_>>(),
        defaults
            .schedule
            .iter()
            .map(|s| &s.action)
            .collect::<Vec<_>>(),
        "one timeline"
    );
    for c in &aware.consumers {
        assert!(c.calls > 1000, "{}: {} calls", c.zone, c.calls);
        assert!(
            c.same_zone_share_healthy >= 0.99,
            "zone-aware {}: same-zone while healthy {}",
            c.zone,
            c.same_zone_share_healthy
        );
        assert_eq!(
            c.idempotent_failed_during_fault, 0,
            "zone-aware {}: idempotent calls lost during the faults",
            c.zone
        );
        let d = zone(&defaults, &c.zone);
        assert!(
            c.same_zone_share > d.same_zone_share,
            "{}: same-zone {} (zone-aware) vs {} (defaults)",
            c.zone,
            c.same_zone_share,
            d.same_zone_share
        );
        assert!(
            c.error_rate <= d.error_rate,
            "{}: error rate {} (zone-aware) vs {} (defaults)",
            c.zone,
            c.error_rate,
            d.error_rate
        );
    }
    // hz is the faulted zone: its providers paused, killed and restored.
    let (a, d) = (zone(&aware, "hz"), zone(&defaults, "hz"));
    assert!(
        a.error_rate < d.error_rate,
        "hz: error rate {} (zone-aware) vs {} (defaults)",
        a.error_rate,
        d.error_rate
    );
    assert!(
        a.p99_ms < d.p99_ms,
        "hz: p99 {} ms (zone-aware) vs {} ms (defaults)",
        a.p99_ms,
        d.p99_ms
    );
    assert!(
        a.back_in_zone_after_restore_ms.is_some(),
        "zone-aware hz consumers came back to their zone after the restore"
    );
    // The registry saw each fault: the killed providers removed and back.
    for report in [&aware, &defaults] {
        for f in report.provider_faults.iter().filter(|f| f.fault == "kill") {
            assert!(
                f.removed_ms.is_some() && f.returned_ms.is_some(),
                "{}: {f:?}",
                report.scenario
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gc_paused_provider_is_removed_and_returns_and_zone_aware_consumers_lose_no_idempotent_call(
) {
    let _one = ONE_AT_A_TIME.lock().await;
    let report = run_scaled(&scenario("gc-pause.chaos"), 1.0).await;
    assert!(report.passed(), "the registry kept its promises");
    let pause = report
        .provider_faults
        .iter()
        .find(|f| f.fault == "pause")
        .expect("the pause is reported");
    let removed = pause.removed_ms.expect("the paused provider was removed");
    let returned = pause.returned_ms.expect("and listed again");
    // Removed three keepalive periods (2 s) after the last keepalive it
    // sent before the pause, so 4 to 6 s into it; listed again once the
    // pause is over.
    assert!(
        removed >= pause.at_ms + 3_800 && removed <= pause.at_ms + 6_800,
        "{pause:?}"
    );
    assert!(returned >= pause.until_ms.unwrap_or(0), "{pause:?}");
    // sh applies 500 ms late: its consumers kept the dead provider longer
    // and called it after the registry had dropped it.
    let sh = &report.stale_window["sh"];
    let hz = &report.stale_window["hz"];
    assert!(sh.count >= 1 && hz.count >= 1, "{:?}", report.stale_window);
    assert!(sh.p50_ms >= hz.p50_ms + 300.0, "{:?}", report.stale_window);
    assert!(
        zone(&report, "sh").stale_calls > 0,
        "{:?}",
        report.consumers
    );
    for c in &report.consumers {
        assert_eq!(c.idempotent_failed_during_fault, 0, "{c:?}");
    }
    // The consumers' chart: each zone's same-zone share and error rate,
    // and every applied action marked.
    let charts = report.charts();
    let chart = charts
        .iter()
        .find(|c| c.file == "consumers.svg")
        .expect("a consumers chart");
    for c in &report.consumers {
        for metric in ["same-zone-share", "error-rate"] {
            let series = format!(
                "<g class=\"series\" data-zone=\"{}\" data-metric=\"{metric}\"",
                c.zone
            );
            assert_eq!(chart.svg.matches(&series).count(), 1, "{series}");
        }
    }
    assert_eq!(
        chart.svg.matches("<g class=\"marker\"").count(),
        report.schedule.len(),
        "one marker per applied action"
    );
    assert!(report.markdown().contains("(consumers.svg)"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_seed_gives_the_same_schedule_and_call_network_draws() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Built in code, as a rig would: a lossy cross-zone call link; sh's
    // providers register over the Nacos gRPC API.
    let text = "name replay\nseed 5\ndc hz 1\ndc sh 1\nproviders 0\nwatchers 0\nduration 6s\n\
                providers hz 2 service=lognormal(2ms,0.3)\n\
                providers sh 2 service=lognormal(2ms,0.3) api=nacos\n\
                consumers hz 1 rate=100/s\nconsumers sh 1 rate=100/s\n\
                call-link hz-sh=5ms~2ms,loss=20%\nat 2s kill-providers sh/2\nat 4s restart-providers sh/2\n";
    let scenario = Scenario::parse(text).expect("a scenario");
    let first = run(&scenario, 1.0).await.expect("the first run");
    let second = run(&scenario, 1.0).await.expect("the second run");
    let actions = |r: &Report| {
        r.schedule
            .iter()
            .map(|s| s.action.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(actions(&first), actions(&second));
    assert!(!first.call_loss_patterns.is_empty(), "the lossy link drew");
    for (pair, pattern) in &first.call_loss_patterns {
        assert_eq!(
            pattern.len(),
            understudy_rig::callnet::PATTERN_DRAWS,
            "{pair}"
        );
        assert_eq!(Some(pattern), second.call_loss_patterns.get(pair), "{pair}");
    }
    let calls = |r: &Report| r.consumers.iter().map(|c| c.calls).collect::<Vec<_>>();
    assert_eq!(calls(&first), calls(&second), "the same arrivals");
    let other = Scenario {
        seed: 6,
        ..scenario.clone()
    };
    let third = run(&other, 1.0).await.expect("a run with another seed");
    assert_ne!(
        first.call_loss_patterns, third.call_loss_patterns,
        "another seed, other draws"
    );
}
