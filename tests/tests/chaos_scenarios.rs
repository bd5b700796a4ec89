//! The shipped chaos scenarios, shortened, against in-process sim
//! clusters: each report must show nothing acknowledged lost, no watcher
//! event missed and every heal converged, and its view lag chart must
//! draw every DC and mark every applied action; and a scenario run twice
//! with one seed applies the same fault schedule and the same loss draws.

use std::collections::BTreeMap;
use std::path::PathBuf;

use understudy_rig::{run, Report, Scenario};

fn scenario(file: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Scenario::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs a scenario scaled down, prints its report and saves it (with its
/// charts) under `target/chaos-ci/`.
async fn run_short(scenario: &Scenario, scale: f64) -> Report {
    let report = run(&scenario.scaled(scale), scale)
        .await
        .expect("the scenario runs");
    let md = report.markdown();
    println!("{md}");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/chaos-ci")
        .join(&scenario.name);
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("report.md"), &md);
        let _ = std::fs::write(
            dir.join("report.json"),
            serde_json::to_vec_pretty(&report).expect("a report serialises"),
        );
        for chart in report.charts() {
            let _ = std::fs::write(dir.join(chart.file), &chart.svg);
        }
    }
    report
}

/// An element's name and attributes.
type Element = (String, BTreeMap<String, String>);

/// The elements of an XML document in order, each with its attributes
/// (entities resolved), or why it is not well-formed.
fn elements(svg: &str) -> Result<Vec<Element>, String> {
    let document = roxmltree::Document::parse(svg).map_err(|e| e.to_string())?;
    Ok(document
        .descendants()
        .filter(roxmltree::Node::is_element)
        .map(|node| {
            let attributes = node
                .attributes()
                .map(|a| (a.name().to_owned(), a.value().to_owned()))
                .collect();
            (node.tag_name().name().to_owned(), attributes)
        })
        .collect())
}

/// The view lag chart draws one series per DC and marks each applied
/// action once, with its text from the schedule.
fn assert_charted(report: &Report) {
    let charts = report.charts();
    let lag = charts
        .iter()
        .find(|c| c.file == "lag.svg")
        .expect("a lag chart");
    let elements = elements(&lag.svg).unwrap_or_else(|e| panic!("lag.svg: {e}\n{}", lag.svg));
    assert_eq!(elements.first().map(|(n, _)| n.as_str()), Some("svg"));
    let groups = |class: &str, attr: &str| -> Vec<String> {
        elements
            .iter()
            .filter(|(n, a)| n == "g" && a.get("class").is_some_and(|c| c == class))
            .map(|(_, a)| a.get(attr).cloned().unwrap_or_default())
            .collect()
    };
    let mut dcs: Vec<String> = report.nodes.values().cloned().collect();
    dcs.dedup();
    let mut series = groups("series", "data-dc");
    series.sort();
    dcs.sort();
    assert_eq!(series, dcs, "one series per DC");
    // Each series has a line: every DC's view was sampled.
    for dc in &dcs {
        assert!(
            report.over_time.view_lag_ms[dc].iter().flatten().count() > 0,
            "{dc}: no view lag sampled"
        );
    }
    let applied: Vec<String> = report.schedule.iter().map(|s| s.action.clone()).collect();
    assert!(!applied.is_empty());
    assert_eq!(
        groups("marker", "data-action"),
        applied,
        "one marker per applied action"
    );
    assert!(report.markdown().contains("![view lag per DC](lag.svg)"));
}

fn assert_kept_its_promises(report: &Report) {
    assert_eq!(report.writes.lost, 0, "acknowledged writes lost");
    assert_eq!(report.watch.missed, 0, "watcher events missed");
    assert!(report.settled, "the end state did not settle");
    for c in &report.converge {
        assert!(
            c.converged_ms.is_some(),
            "the heal at {} ms never converged",
            c.heal_at_ms
        );
    }
    assert!(
        report.writes.acknowledged > 20,
        "the workload wrote: {:?}",
        report.writes
    );
    assert!(
        report.watch.events > 20,
        "the watchers saw events: {:?}",
        report.watch
    );
    assert!(report.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_heal_keeps_every_acknowledged_write_and_every_event() {
    let report = run_short(&scenario("partition-heal.chaos"), 0.25).await;
    assert_kept_its_promises(&report);
    assert_charted(&report);
    // sh was cut off for a while: its writes were refused clearly and its
    // view fell behind; the heal converged quickly.
    assert!(
        report.writes.unknown > 0,
        "writes through sh failed while cut off"
    );
    assert!(
        report
            .writes
            .refusal_samples
            .iter()
            .any(|r| r.contains("cut")),
        "{:?}",
        report.writes.refusal_samples
    );
    assert!(
        report.dcs["sh"].view_lag.max_ms > 2_000.0,
        "{:?}",
        report.dcs["sh"]
    );
    let heal = &report.converge[0];
    assert!(
        heal.converged_ms.is_some_and(|ms| ms < 2_000 + 40 + 10),
        "converged after {:?} ms",
        heal.converged_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lag_pause_keeps_every_acknowledged_write_and_every_event() {
    let report = run_short(&scenario("lag-pause.chaos"), 0.25).await;
    assert_kept_its_promises(&report);
    assert_charted(&report);
    // bj syncs 300 ms late for most of the run: its view shows it.
    assert!(
        report.dcs["bj"].view_lag.p50_ms > report.dcs["hz"].view_lag.p50_ms + 150.0,
        "{:?}",
        report.dcs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_seed_applies_the_same_fault_schedule_twice() {
    let scenario = Scenario::parse(
        "name replay\nseed 42\ndc hz 2\ndc sh 1\nlink hz-sh=5ms~2ms,loss=20%\n\
         providers 1\nwatchers 1\nduration 3s\nat 1s partition hz|sh\nat 1500ms heal\n",
    )
    .expect("a valid scenario");
    let first = run(&scenario, 1.0).await.expect("the first run");
    let second = run(&scenario, 1.0).await.expect("the second run");
    let planned = |r: &Report| {
        r.schedule
            .iter()
            .map(|s| (s.at_ms, s.action.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(planned(&first), planned(&second));
    for s in first.schedule.iter().chain(&second.schedule) {
        assert!(
            s.applied_ms >= s.at_ms && s.applied_ms < s.at_ms + 100,
            "{} planned at {} ms, applied at {} ms",
            s.action,
            s.at_ms,
            s.applied_ms
        );
    }
    // Every link that drew in both runs drew the same losses, draw by draw
    // (how many draws a link made depends on timing; their outcomes do not).
    let mut compared = 0;
    for (link, a) in &first.loss_patterns {
        let Some(b) = second.loss_patterns.get(link) else {
            continue;
        };
        let common = a.len().min(b.len());
        assert_eq!(a[..common], b[..common], "link {link}");
        if common >= 20 {
            assert!(a.contains('x') && a.contains('.'), "link {link}: {a}");
            compared += 1;
        }
    }
    assert!(
        compared >= 1,
        "no link drew 20 times in both runs: {:?} / {:?}",
        first.loss_patterns,
        second.loss_patterns
    );
    let other = run(
        &Scenario {
            seed: 43,
            ..scenario.clone()
        },
        1.0,
    )
    .await
    .expect("a run with another seed");
    let differs = other.loss_patterns.iter().any(|(link, c)| {
        first.loss_patterns.get(link).is_some_and(|a| {
            let common = a.len().min(c.len()).min(20);
            a[..common] != c[..common]
        })
    });
    assert!(
        differs,
        "another seed draws other losses: {:?} / {:?}",
        first.loss_patterns, other.loss_patterns
    );
}
