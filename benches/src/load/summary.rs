//! The comparison's summary: every target of the performance issue as a
//! row (a measured figure, what it is compared with, the ratio, the
//! target and the verdict), then the median of every (server, mode) over
//! the rounds. `docs/performance.md`'s tables are this output.

use std::collections::BTreeMap;

use super::compare::Plan;
use super::Run;

/// The median of the runs' values.
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// Median figures per (target, mode).
struct Figures(BTreeMap<(String, String), Vec<Run>>);

impl Figures {
    fn of(runs: &[Run]) -> Self {
        let mut by = BTreeMap::<(String, String), Vec<Run>>::new();
        for run in runs {
            by.entry((run.target.clone(), run.mode.clone()))
                .or_default()
                .push(run.clone());
        }
        Self(by)
    }

    fn get(&self, target: &str, mode: &str, field: impl Fn(&Run) -> Option<f64>) -> Option<f64> {
        let runs = self.0.get(&(target.to_owned(), mode.to_owned()))?;
        median(runs.iter().filter_map(field).collect())
    }

    fn rate(&self, target: &str, mode: &str) -> Option<f64> {
        self.get(target, mode, |r| Some(r.ops_per_sec))
    }

    fn per_cpu(&self, target: &str, mode: &str) -> Option<f64> {
        self.get(target, mode, |r| r.ops_per_cpu_second)
    }
}

fn num(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "—".to_owned(),
        Some(v) if v >= 10_000.0 => format!("{:.1}k{unit}", v / 1000.0),
        Some(v) if v >= 100.0 => format!("{v:.0}{unit}"),
        Some(v) => format!("{v:.2}{unit}"),
    }
}

/// One target of the issue: a measured figure, what it is compared with,
/// and whether it holds.
struct Row {
    what: String,
    ours: String,
    other: String,
    ratio: String,
    wanted: String,
    met: &'static str,
}

fn verdict(holds: Option<bool>) -> &'static str {
    match holds {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    }
}

fn ratio_row(what: &str, ours: Option<f64>, other: Option<f64>, wanted: f64) -> Row {
    let ratio = ours
        .zip(other)
        .filter(|(_, o)| *o > 0.0)
        .map(|(u, o)| u / o);
    Row {
        what: what.to_owned(),
        ours: num(ours, ""),
        other: num(other, ""),
        ratio: ratio.map_or("—".into(), |r| format!("{r:.2}×")),
        wanted: format!("≥ {wanted}×"),
        met: verdict(ratio.map(|r| r >= wanted)),
    }
}

/// A ratio that must stay at or below `most` (a cost against another's).
fn ratio_at_most_row(what: &str, ours: Option<f64>, other: Option<f64>, most: f64) -> Row {
    let ratio = ours
        .zip(other)
        .filter(|(_, o)| *o > 0.0)
        .map(|(u, o)| u / o);
    Row {
        wanted: format!("≤ {most}×"),
        met: verdict(ratio.map(|r| r <= most)),
        ..ratio_row(what, ours, other, 0.0)
    }
}

fn bound_row(what: &str, ours: Option<f64>, other: Option<f64>, unit: &str, most: f64) -> Row {
    Row {
        what: what.to_owned(),
        ours: num(ours, unit),
        other: num(other, unit),
        ratio: "".to_owned(),
        wanted: format!("≤ {}", num(Some(most), unit)),
        met: verdict(ours.map(|v| v <= most)),
    }
}

/// The summary: every target of the comparison with its verdict, then the
/// medians of every (server, mode).
pub fn summary(runs: &[Run], plan: &Plan) -> String {
    let f = Figures::of(runs);
    let (u, r, c) = ("understudy", "r-nacos", "ceiling");
    // Each throughput mode against its ceiling (ops/s) and against r-nacos
    // (ops per server CPU-second).
    let mut rows = Vec::new();
    for (mode, name, ceiling, vs_ceiling, vs_rnacos) in [
        ("query", "gRPC query", "tonic echo", 0.85, 2.0),
        ("register", "gRPC register", "tonic echo", 0.8, 1.5),
        ("beat", "HTTP beat", "hyper", 0.6, 2.5),
    ] {
        rows.push(ratio_row(
            &format!("{name} ÷ {ceiling} (ops/s)"),
            f.rate(u, mode),
            f.rate(c, mode),
            vs_ceiling,
        ));
        rows.push(ratio_row(
            &format!("{name} ÷ r-nacos (ops per server CPU-s)"),
            f.per_cpu(u, mode),
            f.per_cpu(r, mode),
            vs_rnacos,
        ));
    }
    let missed = |t: &str, mode: &str| {
        f.0.get(&(t.to_owned(), mode.to_owned()))
            .map(|runs| runs.iter().filter_map(|r| r.missed).sum::<u64>())
    };
    let p99 = |t: &str| f.get(t, "push", |r| r.p99_ms);
    // Push p99 and CPU per delivery against the bare tonic fan-out of the
    // same run (the transport's own cost on this machine), r-nacos beside.
    let mut push = bound_row(
        &format!(
            "push p99, write ack → delivery, {} subscribers (ms)",
            plan.subscribers
        ),
        p99(u),
        p99(c),
        "",
        0.0,
    );
    push.other = format!("tonic fan-out {}; r-nacos {}", push.other, num(p99(r), ""));
    push.wanted = "≤ the fan-out's, 0 missed".into();
    push.met = verdict(p99(u).zip(p99(c)).map(|(ours, fan_out)| ours <= fan_out));
    if let Some(m) = missed(u, "push") {
        push.ours = format!("{}, {m} missed", push.ours);
        if m > 0 {
            push.met = "MISSED";
        }
    }
    rows.push(push);
    let per_push = |t: &str| f.per_cpu(t, "push").map(|ops| 1e6 / ops);
    let mut cpu = ratio_at_most_row(
        "server CPU per delivered push, its answer read (µs) ÷ tonic fan-out",
        per_push(u),
        per_push(c),
        1.2,
    );
    cpu.other = format!("{}; r-nacos {}", cpu.other, num(per_push(r), ""));
    rows.push(cpu);
    let per_instance = |t: &str| f.get(t, "memory", |r| r.rss_bytes_per_instance);
    rows.push(bound_row(
        &format!(
            "RSS per instance, {}×{} (bytes)",
            plan.memory_services, plan.memory_per_service
        ),
        per_instance(u),
        per_instance(r),
        "",
        400.0,
    ));
    let per_conn = |t: &str| {
        f.get(t, "idle", |r| {
            r.rss_bytes_per_connection.map(|b| b / 1024.0)
        })
    };
    let mut idle = bound_row(
        "RSS per idle gRPC connection (kB)",
        per_conn(u),
        per_conn(r),
        "",
        32.0,
    );
    idle.other = format!("{}; tonic echo {}", idle.other, num(per_conn(c), ""));
    rows.push(idle);
    let d = "understudy-disk";
    rows.push(ratio_row(
        "durable register ÷ in-memory register (ops/s)",
        f.rate(d, "register"),
        f.rate(u, "register"),
        0.8,
    ));
    rows.push(ratio_at_most_row(
        "durable RSS per instance ÷ in-memory (bytes)",
        per_instance(d),
        per_instance(u),
        1.3,
    ));
    let instances = (plan.memory_services * plan.memory_per_service).max(1) as f64;
    let on_disk = |mode: &str| f.get(d, mode, |r| r.disk_bytes.map(|b| b as f64));
    rows.push(Row {
        what: "durable: bytes on disk per instance; after register churn (MB)".into(),
        ours: format!(
            "{}; {}",
            num(on_disk("memory").map(|b| b / instances), ""),
            num(on_disk("register").map(|b| b / 1e6), "")
        ),
        other: String::new(),
        ratio: String::new(),
        wanted: "bounded".into(),
        met: "reported",
    });
    let window = |field: fn(&Run) -> Option<f64>| f.get("understudy-disk×3", "failover", field);
    let mut failover = bound_row(
        "writes refused after SIGKILL of a 3-node leader, p50 (ms)",
        window(|r| r.p50_ms),
        None,
        "",
        1000.0,
    );
    let lost = missed("understudy-disk×3", "failover");
    let longest = window(|r| r.max_ms);
    failover.ours = format!(
        "{} (max {}), {} acknowledged lost",
        failover.ours,
        num(longest, ""),
        lost.map_or("—".into(), |l| l.to_string())
    );
    failover.wanted = "p50 ≤ 1000, max ≤ 1500, 0 lost".into();
    if lost.is_some_and(|l| l > 0) || longest.is_some_and(|m| m > 1500.0) {
        failover.met = "MISSED";
    }
    rows.push(failover);
    if plan.cluster_nodes > 1 {
        let single_p99 = f.get(u, "register", |r| r.p99_ms);
        for via in ["leader", "followers"] {
            let cluster = format!("understudy×{} via {via}", plan.cluster_nodes);
            let mut row = ratio_row(
                &format!(
                    "{}-node register through the {via} ÷ single node (ops/s; p99 ms)",
                    plan.cluster_nodes
                ),
                f.rate(&cluster, "register"),
                f.rate(u, "register"),
                0.5,
            );
            let p99 = f.get(&cluster, "register", |r| r.p99_ms);
            row.ours = format!("{}; p99 {}", row.ours, num(p99, ""));
            row.other = format!("{}; p99 {} (single node)", row.other, num(single_p99, ""));
            row.wanted = "≥ 0.5×; p99 ≤ 3×".into();
            if p99.zip(single_p99).is_some_and(|(c, s)| c > 3.0 * s) {
                row.met = "MISSED";
            }
            rows.push(row);
        }
    }
    let startup = |t: &str| f.get(t, "startup", |r| r.startup_ms);
    rows.push(bound_row(
        "start-up to first acknowledged registration (ms)",
        startup(u),
        startup(r),
        "",
        100.0,
    ));

    let mut text = String::new();
    if !plan.nacos.is_empty() {
        text.push_str(&beside_nacos(&f, plan));
        text.push('\n');
    }
    text.push_str("| target | understudy | compared with (r-nacos, or as named) | ratio | wanted | verdict |\n");
    text.push_str("|---|---|---|---|---|---|\n");
    for row in rows {
        text.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            row.what, row.ours, row.other, row.ratio, row.wanted, row.met
        ));
    }
    text.push_str("\nMedians over the rounds:\n\n");
    text.push_str(
        "| server | mode | shape | ops/s | ops per server CPU-s | p50 ms | p99 ms | other |\n",
    );
    text.push_str("|---|---|---|---|---|---|---|---|\n");
    for ((target, mode), list) in &f.0 {
        let med =
            |field: &dyn Fn(&Run) -> Option<f64>| median(list.iter().filter_map(field).collect());
        let disk = med(&|r| r.disk_bytes.map(|b| b as f64 / 1e6)).map_or(String::new(), |mb| {
            format!(", {} MB on disk", num(Some(mb), ""))
        });
        let other = if mode == "memory" {
            format!(
                "{} B/instance{disk}",
                num(med(&|r| r.rss_bytes_per_instance), "")
            )
        } else if mode == "idle" {
            format!(
                "{} kB/connection",
                num(med(&|r| r.rss_bytes_per_connection.map(|b| b / 1024.0)), "")
            )
        } else if mode == "startup" {
            format!("ready in {} ms", num(med(&|r| r.startup_ms), ""))
        } else if mode == "push" || mode == "failover" {
            format!(
                "{} missed{disk}",
                list.iter().filter_map(|r| r.missed).sum::<u64>()
            )
        } else {
            disk.trim_start_matches(", ").to_owned()
        };
        let rate = if mode == "startup" {
            None
        } else {
            med(&|r| Some(r.ops_per_sec))
        };
        text.push_str(&format!(
            "| {target} | {mode} | {} | {} | {} | {} | {} | {other} |\n",
            list[0].shape,
            num(rate, ""),
            num(med(&|r| r.ops_per_cpu_second), ""),
            num(med(&|r| r.p50_ms), ""),
            num(med(&|r| r.p99_ms), ""),
        ));
    }
    text
}

/// The figures users choose a registry by, understudy beside r-nacos and
/// each Nacos the user started, every figure with its ratio: how many
/// times understudy is ahead (the other's cost ÷ understudy's, or
/// understudy's rate ÷ the other's; below 1, the other is ahead).
fn beside_nacos(f: &Figures, plan: &Plan) -> String {
    type Pick<'a> = Box<dyn Fn(&str) -> Option<f64> + 'a>;
    let rows: Vec<(String, Pick<'_>, bool)> = vec![
        (
            "start-up to first acknowledged registration (ms)".into(),
            Box::new(|t| f.get(t, "startup", |r| r.startup_ms)),
            false,
        ),
        (
            "idle RSS after start-up (MB)".into(),
            Box::new(|t| f.get(t, "startup", |r| r.rss_bytes.map(|b| b as f64 / 1e6))),
            false,
        ),
        (
            format!(
                "RSS per instance, {}×{} (bytes)",
                plan.memory_services, plan.memory_per_service
            ),
            Box::new(|t| f.get(t, "memory", |r| r.rss_bytes_per_instance)),
            false,
        ),
        (
            "gRPC register (ops/s)".into(),
            Box::new(|t| f.rate(t, "register")),
            true,
        ),
        (
            "gRPC register (ops per server CPU-s)".into(),
            Box::new(|t| f.per_cpu(t, "register")),
            true,
        ),
        (
            "gRPC query (ops/s)".into(),
            Box::new(|t| f.rate(t, "query")),
            true,
        ),
        (
            "gRPC query (ops per server CPU-s)".into(),
            Box::new(|t| f.per_cpu(t, "query")),
            true,
        ),
        (
            format!(
                "push p99, write ack → delivery, {} subscribers (ms)",
                plan.subscribers
            ),
            Box::new(|t| f.get(t, "push", |r| r.p99_ms)),
            false,
        ),
        (
            "server CPU per delivered push (µs)".into(),
            Box::new(|t| f.per_cpu(t, "push").map(|ops| 1e6 / ops)),
            false,
        ),
        (
            "RSS per idle gRPC connection (kB)".into(),
            Box::new(|t| {
                f.get(t, "idle", |r| {
                    r.rss_bytes_per_connection.map(|b| b / 1024.0)
                })
            }),
            false,
        ),
    ];
    let mut others = vec!["r-nacos".to_owned()];
    others.extend(plan.nacos.iter().map(|n| n.name.clone()));
    let mut text = String::from(
        "Beside Nacos (ratio: how many times understudy is ahead):\n\n| figure | understudy |",
    );
    for other in &others {
        text.push_str(&format!(" {other} | ratio |"));
    }
    text.push_str("\n|---|---|");
    text.push_str(&"---|---|".repeat(others.len()));
    text.push('\n');
    for (what, pick, higher_is_better) in &rows {
        let ours = pick("understudy");
        text.push_str(&format!("| {what} | {} |", num(ours, "")));
        for other in &others {
            let theirs = pick(other);
            let ratio = ours
                .zip(theirs)
                .filter(|(u, o)| *u > 0.0 && *o > 0.0)
                .map(|(u, o)| if *higher_is_better { u / o } else { o / u });
            let ratio = ratio.map_or("—".to_owned(), |r| format!("{r:.1}×"));
            text.push_str(&format!(" {} | {ratio} |", num(theirs, "")));
        }
        text.push('\n');
    }
    let missed = |t: &str| {
        f.0.get(&(t.to_owned(), "push".to_owned()))
            .map(|runs| runs.iter().filter_map(|r| r.missed).sum::<u64>())
    };
    let mut notes = vec![format!("understudy {}", missed("understudy").unwrap_or(0))];
    for other in &others {
        if let Some(m) = missed(other) {
            notes.push(format!("{other} {m}"));
        }
    }
    text.push_str(&format!("\nPushes missed: {}.\n", notes.join(", ")));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::compare::External;

    fn run(target: &str, mode: &str, set: impl Fn(&mut Run)) -> Run {
        let mut run = Run {
            mode: mode.into(),
            target: target.into(),
            ..Run::default()
        };
        set(&mut run);
        run
    }

    #[test]
    fn beside_nacos_gives_each_figure_with_how_far_ahead_understudy_is() {
        let runs = vec![
            run("understudy", "startup", |r| {
                r.startup_ms = Some(20.0);
                r.rss_bytes = Some(25_000_000);
            }),
            run("nacos-3", "startup", |r| {
                r.startup_ms = Some(10_000.0);
                r.rss_bytes = Some(800_000_000);
            }),
            run("understudy", "register", |r| r.ops_per_sec = 40_000.0),
            run("nacos-3", "register", |r| r.ops_per_sec = 10_000.0),
        ];
        let plan = Plan {
            nacos: vec![External {
                name: "nacos-3".into(),
                http: "127.0.0.1:8848".parse().unwrap(),
                pid: 1,
            }],
            ..Plan::empty()
        };
        let table = beside_nacos(&Figures::of(&runs), &plan);
        let line = |what: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("| {what}")))
                .unwrap_or_else(|| panic!("no row {what} in\n{table}"))
                .to_owned()
        };
        // Costs: Nacos' ÷ understudy's; rates: understudy's ÷ Nacos'.
        assert!(line("start-up").ends_with("| 10.0k | 500.0× |"), "{table}");
        assert!(line("idle RSS").ends_with("| 800 | 32.0× |"), "{table}");
        assert!(
            line("gRPC register (ops/s)").ends_with("| 10.0k | 4.0× |"),
            "{table}"
        );
        // Nothing measured: no figure, no ratio.
        assert!(line("gRPC query (ops/s)").ends_with("| — | — |"), "{table}");
    }
}
