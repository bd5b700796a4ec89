//! The process-wide Prometheus recorder behind the `metrics` facade (the
//! scrape that renders it is `http/scrape.rs`). The recorder holds what the code counts as it goes
//! (requests, pushes, watch events, removals, write and visibility
//! latencies); it is installed once per process (tests run several nodes
//! in one process and share it). What a node *is* at scrape time (registry
//! sizes per namespace, subscriptions, raft term, role and indexes, view
//! lag) is read from that node and rendered beside it, so it is always
//! the scraped node's own and a deleted namespace leaves no stale series.
//!
//! Every family of either kind is declared once, in [`FAMILIES`], and
//! exported from the start: at zero for its known label sets, and by its
//! `# HELP` and `# TYPE` lines where no label set is known yet, as
//! Prometheus' convention asks (a dashboard or an alert on a fresh node
//! finds every family).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5,
];

/// How often the recorder's histograms fold their recorded samples into
/// their buckets when nobody scrapes. The recorder keeps every sample
/// until then (in blocks of 64, about 16 bytes a sample as allocated): a
/// node serving 25,000 requests a second and never scraped grew by
/// megabytes a minute. Folding costs a pass over the histograms, nothing
/// per request.
pub const UPKEEP_EVERY: Duration = Duration::from_secs(1);

/// Folds the recorder's histograms every [`UPKEEP_EVERY`] until
/// `cancel`, as the exporter's own listener would (the server serves
/// `/metrics` itself, so it runs the upkeep). Each node runs one; several
/// in one process share the recorder, and a fold finds little to do.
pub(crate) async fn upkeep(cancel: tokio_util::sync::CancellationToken) {
    let handle = handle();
    let mut ticks = tokio::time::interval(UPKEEP_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => handle.run_upkeep(),
        }
    }
}

/// The recorder's handle, installing the recorder on first use. If some
/// other recorder was installed first, a detached one still renders
/// (empty) output rather than failing the scrape.
pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS)
                    .expect("the bucket list is not empty")
            };
            match builder().install_recorder() {
                Ok(handle) => {
                    declare();
                    handle
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a metrics recorder was already installed");
                    builder().build_recorder().handle()
                }
            }
        })
        .clone()
}

/// What kind of series a family holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in latency buckets (rendered with `_bucket`, `_sum`
    /// and `_count` series).
    Histogram,
}

impl Kind {
    /// The kind as Prometheus' `# TYPE` line names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// Where a family's values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The recorder, as the code counts events.
    Recorded,
    /// The scraped node itself, read at scrape time (`http/scrape.rs`).
    Scraped,
}

/// One metric family: its name, kind, help, source and the label sets
/// known before any event, which are exported at zero from the start (a
/// family whose labels only events tell, such as HTTP routes or request
/// types, lists none, and is listed by its `# HELP` and `# TYPE` lines
/// until its first event).
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The name, `understudy_` first.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Recorded or scraped.
    pub source: Source,
    /// The label sets exported at zero from the start (`&[&[]]`: the
    /// family's one unlabelled series).
    pub zero: &'static [&'static [(&'static str, &'static str)]],
}

const fn recorded(
    name: &'static str,
    kind: Kind,
    help: &'static str,
    zero: &'static [&'static [(&'static str, &'static str)]],
) -> Family {
    Family {
        name,
        kind,
        help,
        source: Source::Recorded,
        zero,
    }
}

const fn scraped(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Gauge,
        help,
        source: Source::Scraped,
        zero: &[],
    }
}

use Kind::{Counter, Gauge, Histogram};

/// The one unlabelled series.
const ONE: &[&[(&str, &str)]] = &[&[]];

/// Every metric a node exports, declared once. A name recorded or scraped
/// anywhere else must be here (`every_metric_name_in_the_code_is_declared`
/// checks the source), and a fresh node exports every family here
/// (`tests/tests/metrics.rs`).
pub const FAMILIES: &[Family] = &[
    // What a node is, read when scraped.
    scraped("understudy_node_info", "This node's id and datacenter."),
    scraped("understudy_tasks_alive", "Tasks alive in the node's runtime (a leak shows as growth)."),
    scraped("understudy_requests_in_progress", "Ordinary requests holding a slot (at most max_concurrent_requests)."),
    scraped("understudy_namespaces", "Namespaces that exist."),
    scraped("understudy_services", "Services per namespace."),
    scraped("understudy_instances", "Instances per namespace."),
    scraped("understudy_revision", "The registry revision applied here."),
    scraped("understudy_subscriptions", "Nacos gRPC service subscriptions held here."),
    scraped("understudy_config_listeners", "Nacos gRPC config listeners held here."),
    scraped("understudy_udp_subscribers", "Nacos v1 UDP push subscribers held here."),
    scraped("understudy_beat_tracked_instances", "Instances whose beats this node times."),
    scraped("understudy_raft_term", "The current raft term."),
    scraped("understudy_raft_last_log_index", "The last raft log index held here."),
    scraped("understudy_raft_commit_index", "The highest log index known committed here (on the leader: held by a majority of voters)."),
    scraped("understudy_raft_last_applied", "The last raft log index applied here."),
    scraped("understudy_raft_role", "1 for this node's raft role, 0 for the others."),
    scraped("understudy_raft_leader", "The id of the leader this node knows of, -1 for none."),
    scraped("understudy_view_lag_seconds", "Now minus the newest leader stamp applied to this node's view."),
    // Requests.
    recorded("understudy_http_requests_total", Counter, "HTTP requests by route, method and status.", &[]),
    recorded("understudy_http_request_seconds", Histogram, "HTTP request latency by route.", &[]),
    recorded("understudy_grpc_requests_total", Counter, "Nacos gRPC requests by type and outcome.", &[]),
    recorded("understudy_grpc_request_seconds", Histogram, "Nacos gRPC request latency by type.", &[]),
    recorded("understudy_native_requests_total", Counter, "Native API calls by method and gRPC status code.", &[]),
    recorded("understudy_native_request_seconds", Histogram, "Native API call latency by method.", &[]),
    recorded("understudy_requests_shed_total", Counter, "Requests answered busy, by API.", &[&[("api", "http")], &[("api", "grpc")], &[("api", "native")]]),
    // Connections and subscriptions.
    recorded("understudy_grpc_connections", Gauge, "Open connections on the gRPC port (Nacos and native).", ONE),
    recorded(
        "understudy_connections_refused_total",
        Counter,
        "Connections refused by max_connections or max_connections_per_ip, by port.",
        &[
            &[("port", "HTTP"), ("limit", "max_connections")],
            &[("port", "HTTP"), ("limit", "max_connections_per_ip")],
            &[("port", "gRPC"), ("limit", "max_connections")],
            &[("port", "gRPC"), ("limit", "max_connections_per_ip")],
        ],
    ),
    recorded("understudy_connections_closed_total", Counter, "Connections the server closed, by why.", &[&[("why", "pushes_unread")]]),
    recorded("understudy_subscriptions_refused_total", Counter, "Subscriptions over max_subscriptions_per_connection, by API.", &[&[("via", "grpc")], &[("via", "config")], &[("via", "udp")]]),
    recorded("understudy_subscriptions_revoked_total", Counter, "Nacos gRPC subscriptions and config listeners dropped because their user lost the right to read.", ONE),
    // Pushes.
    recorded("understudy_pushes_sent_total", Counter, "Nacos gRPC pushes sent.", ONE),
    recorded("understudy_pushes_acknowledged_total", Counter, "Nacos gRPC push answers, successful or not.", &[&[("success", "true")], &[("success", "false")]]),
    recorded("understudy_push_seconds", Histogram, "Nacos gRPC push sent to answered.", ONE),
    recorded("understudy_pushes_timed_out_total", Counter, "Pushes unanswered within push_timeout_ms.", ONE),
    recorded("understudy_push_retries_total", Counter, "Pushes repeated after a failure or a timeout.", ONE),
    recorded("understudy_pushes_dropped_by_fault_total", Counter, "Pushes dropped by an injected push fault.", ONE),
    recorded("understudy_udp_pushes_sent_total", Counter, "Nacos v1 UDP pushes sent.", ONE),
    // Native watches.
    recorded("understudy_watches", Gauge, "Open native watch streams.", ONE),
    recorded("understudy_watch_events_total", Counter, "Change events sent on native watch streams.", ONE),
    recorded(
        "understudy_watch_snapshots_total",
        Counter,
        "Snapshots sent on native watch streams, by reason.",
        &[&[("reason", "INITIAL")], &[("reason", "HISTORY_UNAVAILABLE")], &[("reason", "FELL_BEHIND")]],
    ),
    recorded("understudy_watch_resets_total", Counter, "Snapshots re-sent mid-stream, by reason.", &[&[("reason", "fell_behind")], &[("reason", "restored")]]),
    // Writes and the registry's life.
    recorded("understudy_write_seconds", Histogram, "A write's latency until it is applied here.", ONE),
    recorded("understudy_commands_applied_total", Counter, "Raft commands applied here.", ONE),
    recorded("understudy_writes_refused_total", Counter, "Writes refused, by reason.", &[&[("reason", "busy")]]),
    recorded(
        "understudy_instances_removed_total",
        Counter,
        "Instance removals, by cause.",
        &[
            &[("cause", "deregistered")],
            &[("cause", "expired")],
            &[("cause", "owner_lost")],
            &[("cause", "connection_closed")],
            &[("cause", "replaced")],
        ],
    ),
    recorded("understudy_health_changes_total", Counter, "Health transitions, by direction.", &[&[("to", "healthy")], &[("to", "unhealthy")]]),
    recorded("understudy_register_visible_seconds", Histogram, "A registration's leader stamp to visible here, by DC of the view.", &[]),
];

/// The family named `name`, if declared.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// Describes every recorded family to the recorder and registers its
/// known label sets, so that they are exported at zero from the start.
fn declare() {
    for f in FAMILIES.iter().filter(|f| f.source == Source::Recorded) {
        match f.kind {
            Counter => metrics::describe_counter!(f.name, f.help),
            Gauge => metrics::describe_gauge!(f.name, f.help),
            Histogram => metrics::describe_histogram!(f.name, f.help),
        }
        for labels in f.zero {
            let labels: Vec<metrics::Label> = labels
                .iter()
                .map(|(key, value)| metrics::Label::new(*key, *value))
                .collect();
            match f.kind {
                Counter => metrics::counter!(f.name, labels).increment(0),
                Gauge => metrics::gauge!(f.name, labels).increment(0.0),
                Histogram => drop(metrics::histogram!(f.name, labels)),
            }
        }
    }
}

/// Appends the `# HELP` and `# TYPE` lines of every declared family that
/// `text` does not list yet (one whose labels no event has told yet, or
/// a scraped one the node has no value for), so that every family is
/// listed from the start.
pub(crate) fn list_the_rest(text: &mut String) {
    for f in FAMILIES {
        if !text.contains(&format!("# TYPE {} ", f.name)) {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n",
                name = f.name,
                help = f.help,
                kind = f.kind.as_str()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every `.rs` file under `dir`, with its text.
    fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).expect("the source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                out.push((path.display().to_string(), text));
            }
        }
    }

    /// The string literal that `text` starts with (after blanks), if any.
    fn literal(text: &str) -> Option<&str> {
        let rest = text.trim_start().strip_prefix('"')?;
        rest.find('"').map(|end| &rest[..end])
    }

    #[test]
    fn every_metric_name_in_the_code_is_declared_with_its_kind() {
        let mut files = Vec::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut used = std::collections::BTreeSet::new();
        for (path, text) in files.iter().filter(|(p, _)| !p.ends_with("src/metrics.rs")) {
            // Every recording names its family by a literal of its kind.
            for (kind, macro_name) in [
                (Counter, "metrics::counter!("),
                (Gauge, "metrics::gauge!("),
                (Histogram, "metrics::histogram!("),
            ] {
                for (at, _) in text.match_indices(macro_name) {
                    let name = literal(&text[at + macro_name.len()..]).unwrap_or_else(|| {
                        panic!("{path}: {macro_name} without a literal name: the table cannot check it")
                    });
                    let declared = family(name)
                        .unwrap_or_else(|| panic!("{path}: {name} is not declared in FAMILIES"));
                    assert_eq!(
                        declared.kind, kind,
                        "{path}: {name} is recorded as another kind"
                    );
                    assert_eq!(
                        declared.source,
                        Source::Recorded,
                        "{path}: {name} is declared scraped"
                    );
                    used.insert(name);
                }
            }
            // Every other name, such as the scrape's, too.
            for (at, _) in text.match_indices("\"understudy_") {
                let name = literal(&text[at..]).expect("a closed literal");
                if name.starts_with("understudy_") && !name.contains(['-', '.', ' ']) {
                    assert!(
                        family(name).is_some(),
                        "{path}: {name} is not declared in FAMILIES"
                    );
                    used.insert(name);
                }
            }
        }
        for f in FAMILIES {
            assert!(
                used.contains(f.name),
                "{} is declared but never exported",
                f.name
            );
            assert!(
                f.name.starts_with("understudy_") && !f.help.is_empty(),
                "{}",
                f.name
            );
            if f.kind == Counter {
                assert!(
                    f.name.ends_with("_total"),
                    "{}: a counter's name ends in _total",
                    f.name
                );
            }
        }
        let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
        let reference = std::fs::read_to_string(reference).expect("docs/operations.md");
        for f in FAMILIES {
            assert!(
                reference.contains(&format!("`{}`", f.name)),
                "docs/operations.md's metrics table lacks {}",
                f.name
            );
        }
        let names: std::collections::BTreeSet<&str> = FAMILIES.iter().map(|f| f.name).collect();
        assert_eq!(names.len(), FAMILIES.len(), "a family is declared twice");
    }
}
