//! The scrape: the recorder's text, then what the scraped node *is* right
//! now (registry sizes per namespace, subscriptions, raft term, role and
//! indexes, view lag), read from that node, and the families no series
//! lists yet. Every name here is declared in `metrics::FAMILIES`.

use std::fmt::Write as _;

use metrics_exporter_prometheus::PrometheusHandle;

/// The Prometheus text of one scrape of `node`.
pub(crate) fn render(node: &crate::Node, handle: &PrometheusHandle) -> String {
    handle.run_upkeep();
    let mut out = handle.render();
    let mut gauge = Gauges(&mut out);
    let id = node.config().node_id.to_string();
    gauge.family("understudy_node_info");
    let labels = [("node", id.as_str()), ("dc", node.config().dc.as_str())];
    gauge.sample("understudy_node_info", &labels, 1.0);
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        gauge.family("understudy_tasks_alive");
        gauge.sample(
            "understudy_tasks_alive",
            &[],
            runtime.metrics().num_alive_tasks() as f64,
        );
    }
    gauge.family("understudy_requests_in_progress");
    gauge.sample(
        "understudy_requests_in_progress",
        &[],
        node.admission().in_use() as f64,
    );
    let registry = node.registry();
    let namespaces = registry.namespaces();
    gauge.family("understudy_namespaces");
    gauge.sample("understudy_namespaces", &[], namespaces.len() as f64);
    gauge.family("understudy_services");
    for ns in &namespaces {
        let labels = [("namespace", ns.id.as_str())];
        gauge.sample("understudy_services", &labels, ns.services as f64);
    }
    gauge.family("understudy_instances");
    for ns in &namespaces {
        let labels = [("namespace", ns.id.as_str())];
        gauge.sample("understudy_instances", &labels, ns.instances as f64);
    }
    let sizes = [
        ("understudy_revision", registry.revision() as f64),
        ("understudy_subscriptions", node.state().hub().len() as f64),
        (
            "understudy_config_listeners",
            node.state().config_hub().len() as f64,
        ),
        (
            "understudy_udp_subscribers",
            node.udp().map_or(0, |u| u.len()) as f64,
        ),
        (
            "understudy_beat_tracked_instances",
            node.state().liveness().len() as f64,
        ),
    ];
    drop(registry);
    for (name, value) in sizes {
        gauge.family(name);
        gauge.sample(name, &[], value);
    }
    let status = node.cluster_status();
    let here = [("dc", node.config().dc.as_str()), ("node", id.as_str())];
    let raft = [
        ("understudy_raft_term", status.term),
        ("understudy_raft_last_log_index", status.last_log),
        ("understudy_raft_commit_index", status.committed()),
        ("understudy_raft_last_applied", status.last_applied),
    ];
    for (name, value) in raft {
        gauge.family(name);
        gauge.sample(name, &here, value as f64);
    }
    gauge.family("understudy_raft_role");
    for role in crate::raft::Role::ALL {
        let value = if status.role == role { 1.0 } else { 0.0 };
        let labels = [here[0], here[1], ("role", role.as_str())];
        gauge.sample("understudy_raft_role", &labels, value);
    }
    gauge.family("understudy_raft_leader");
    let leader = status.leader.map_or(-1.0, |id| id as f64);
    gauge.sample("understudy_raft_leader", &here, leader);
    if let Some(lag) = node.view_lag() {
        gauge.family("understudy_view_lag_seconds");
        gauge.sample("understudy_view_lag_seconds", &here, lag.as_secs_f64());
    }
    crate::metrics::list_the_rest(&mut out);
    out
}

/// Gauges rendered in the Prometheus text format.
struct Gauges<'a>(&'a mut String);

impl Gauges<'_> {
    /// The `# HELP` and `# TYPE` lines of `name`, as `FAMILIES` declares it.
    fn family(&mut self, name: &str) {
        let help = crate::metrics::family(name).map_or("", |f| f.help);
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} gauge");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{key}=\"");
                for c in value.chars() {
                    match c {
                        '\\' => self.0.push_str("\\\\"),
                        '"' => self.0.push_str("\\\""),
                        '\n' => self.0.push_str("\\n"),
                        c => self.0.push(c),
                    }
                }
                self.0.push('"');
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}
