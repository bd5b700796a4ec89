//! Server-side health checks of persistent instances, as Nacos runs them:
//! each node probes the persistent instances it is responsible for (the
//! same rendezvous hashing over the voters as v1 beats, so every instance
//! is probed by one node, and by another when that one leaves), with a
//! TCP connect or an HTTP GET, and writes a health transition through
//! raft once an instance fails (or passes) enough probes in a row.
//!
//! The probe is the config's `health_check`, or the instance's metadata
//! key `understudy.health_check` (`none`, `tcp`, `http`, `http:/PATH`).

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use understudy_core::{HealthSource, InstanceKey, Op, ServiceKey};

use crate::config::Check;
use crate::Node;

/// The metadata key that chooses an instance's probe.
pub(crate) const METADATA_KEY: &str = "understudy.health_check";

/// Probes running at once.
const CONCURRENCY: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    service: ServiceKey,
    key: InstanceKey,
}

#[derive(Debug, Default)]
struct Streak {
    passed: u32,
    failed: u32,
}

/// Probes until cancelled.
pub(crate) async fn run(node: Node, cancel: CancellationToken) {
    let config = node.config().probes.clone();
    let http = match reqwest::Client::builder()
        .timeout(config.timeout)
        .connect_timeout(config.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client: persistent instances are not probed");
            return;
        }
    };
    let mut streaks: HashMap<Target, Streak> = HashMap::new();
    let mut ticks = tokio::time::interval(config.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let due = targets(&node, &config.default);
        streaks.retain(|target, _| due.iter().any(|(t, _, _)| t == target));
        let results: Vec<(Target, bool, bool)> = futures_util::stream::iter(due)
            .map(|(target, check, healthy)| {
                let http = &http;
                let timeout = config.timeout;
                async move {
                    let passed = probe(http, &target.key, &check, timeout).await;
                    (target, healthy, passed)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (target, healthy, passed) in results {
            let streak = streaks.entry(target.clone()).or_default();
            if passed {
                streak.passed += 1;
                streak.failed = 0;
            } else {
                streak.failed += 1;
                streak.passed = 0;
            }
            let turn = if healthy && streak.failed >= config.unhealthy_after {
                Some(false)
            } else if !healthy && streak.passed >= config.healthy_after {
                Some(true)
            } else {
                None
            };
            let Some(to) = turn else { continue };
            let op = Op::SetHealth {
                service: target.service.clone(),
                key: target.key.clone(),
                healthy: to,
                source: HealthSource::Probe,
            };
            match node.propose(op).await {
                Ok(_) => tracing::info!(
                    service = %target.service,
                    instance = %target.key,
                    healthy = to,
                    "a probe changed an instance's health"
                ),
                Err(e) => tracing::warn!(
                    service = %target.service,
                    instance = %target.key,
                    error = %e,
                    "a probe's health change was not written; it is tried again"
                ),
            }
        }
    }
}

/// The probe of a persistent instance with `metadata`: its own, else
/// the node's `default`.
pub(crate) fn check_of(metadata: &understudy_core::Metadata, default: &Check) -> Check {
    match metadata.get(METADATA_KEY) {
        Some(raw) => raw.parse::<Check>().unwrap_or_else(|_| default.clone()),
        None => default.clone(),
    }
}

/// The persistent instances this node probes now, with their probe and
/// their health.
fn targets(node: &Node, default: &Check) -> Vec<(Target, Check, bool)> {
    let ring = node.beat_ring();
    let me = node.config().node_id;
    let registry = node.registry();
    let mut due = Vec::new();
    for namespace in registry.namespaces() {
        for service in registry.services(&namespace.id, None) {
            for instance in service.instances() {
                if instance.kind.is_ephemeral() {
                    continue;
                }
                let check = check_of(&instance.metadata, default);
                if check == Check::None {
                    continue;
                }
                let responsible =
                    understudy_core::responsible_for(&ring, &instance.ip, instance.port);
                if responsible.unwrap_or(me) != me {
                    continue;
                }
                let target = Target {
                    service: service.key().clone(),
                    key: InstanceKey {
                        ip: instance.ip.to_string(),
                        port: instance.port,
                        cluster: instance.cluster.clone(),
                    },
                };
                due.push((target, check, instance.healthy));
            }
        }
    }
    due
}

/// Whether the instance passes one probe.
async fn probe(
    http: &reqwest::Client,
    key: &InstanceKey,
    check: &Check,
    timeout: Duration,
) -> bool {
    let host = if key.ip.contains(':') {
        format!("[{}]", key.ip)
    } else {
        key.ip.clone()
    };
    match check {
        Check::None => true,
        Check::Tcp => {
            let connect = tokio::net::TcpStream::connect((key.ip.as_str(), key.port));
            matches!(tokio::time::timeout(timeout, connect).await, Ok(Ok(_)))
        }
        Check::Http(path) => {
            let url = format!("http://{host}:{}{path}", key.port);
            match http.get(&url).send().await {
                Ok(reply) => reply.status().is_success(),
                Err(_) => false,
            }
        }
    }
}
