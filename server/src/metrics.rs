//! The process-wide Prometheus recorder behind the `metrics` facade (the
//! scrape that renders it is `http/scrape.rs`). The recorder holds what the code counts as it goes
//! (requests, pushes, watch events, removals, write and visibility
//! latencies); it is installed once per process (tests run several nodes
//! in one process and share it). What a node *is* at scrape time (registry
//! sizes per namespace, subscriptions, raft term, role and indexes, view
//! lag) is read from that node and rendered beside it, so it is always
//! the scraped node's own and a deleted namespace leaves no stale series.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5,
];

/// The recorder's handle, installing the recorder on first use. If some
/// other recorder was installed first, a detached one still renders
/// (empty) output rather than failing the scrape.
pub(crate) fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS)
                    .expect("the bucket list is not empty")
            };
            match builder().install_recorder() {
                Ok(handle) => handle,
                Err(e) => {
                    tracing::warn!(error = %e, "a metrics recorder was already installed");
                    builder().build_recorder().handle()
                }
            }
        })
        .clone()
}
