//! The cluster layer: what a consumer does with a directory's list on each
//! call, in call order:
//!
//! - [`route`]: routers narrow the list: zone (prefer local, strict, or
//!   threshold with hysteresis), tag, condition rules, version/group;
//!   every decision carries its reason;
//! - [`stats`]: per-instance statistics (active calls, latency, a sliding
//!   window of outcomes) and the circuit breaker fed by them ([`breaker`]);
//! - [`balance`]: load balancers pick one instance of what is left, with an
//!   injected, seedable RNG and an injected `now`;
//! - [`strategy`]: the cluster strategy (failover, zone-aware, forking, …)
//!   drives the caller's own async call, bounded by the [`limit`]s: a
//!   concurrency limit and a rate limit per method, and a retry budget
//!   shared by every strategy;
//! - [`invoker`]: [`Cluster`] ties them together over a [`Directory`];
//! - [`shutdown`]: the provider side of a graceful stop.
//!
//! The layer knows nothing of any RPC framework: the call is a closure
//! returning a future, and its failure says whether the request could have
//! reached the provider, which is what decides whether a retry is safe.
//!
//! [`Directory`]: crate::Directory

pub mod balance;
pub mod breaker;
mod error;
pub mod invoker;
pub mod limit;
pub mod route;
pub mod shutdown;
pub mod stats;
pub mod strategy;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use crate::metadata::START_TIMESTAMP;
pub use error::{CallFailure, ClusterError, LimitKind, Phase};
pub use invoker::{Cluster, ClusterBuilder, MetricsSnapshot, Mock, Outcome};
pub use shutdown::{stop_provider, InFlight, InFlightGuard, StopOptions, StopReport};
pub use strategy::Strategy;

use crate::Instance;
use stats::InstanceStats;

/// The attachment naming the caller's zone.
pub const ZONE: &str = "zone";
/// The attachment (and instance metadata key) naming a tag.
pub const TAG: &str = "tag";
/// The attachment (and instance metadata key) naming a version.
pub const VERSION: &str = "version";
/// The attachment (and instance metadata key) naming a group.
pub const GROUP: &str = "group";

/// Whether a call may safely run twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Idempotency {
    /// Running it twice is harmless: it may be retried after any failure
    /// that is not the provider's own answer.
    #[default]
    Idempotent,
    /// Running it twice is not harmless: it is retried only when the
    /// failed attempt provably never reached a provider.
    NotIdempotent,
}

/// One call as the cluster layer sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Invocation {
    /// The method called.
    pub method: String,
    /// The arguments a consistent-hash balancer may hash, as text.
    pub arguments: Vec<String>,
    /// Attachments: the caller's zone, tag, version, group, anything a
    /// condition rule may match.
    pub attachments: BTreeMap<String, String>,
    /// Whether the call may run twice.
    pub idempotency: Idempotency,
    /// Each attempt's timeout (Dubbo's `timeout`); the cluster's when
    /// `None`. A call with retries may take several of these.
    pub timeout: Option<Duration>,
    /// The whole call's deadline, across every attempt and retry; the
    /// cluster's when `None` (which has none unless set).
    pub deadline: Option<Duration>,
}

impl Invocation {
    /// A call of `method` with no arguments or attachments.
    pub fn new(method: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            ..Self::default()
        }
    }

    /// Adds an argument.
    pub fn argument(mut self, value: impl Into<String>) -> Self {
        self.arguments.push(value.into());
        self
    }

    /// Sets an attachment.
    pub fn attach(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attachments.insert(key.into(), value.into());
        self
    }

    /// Marks the call as not idempotent.
    pub fn not_idempotent(mut self) -> Self {
        self.idempotency = Idempotency::NotIdempotent;
        self
    }

    /// Sets each attempt's timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the whole call's deadline, across its attempts.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// An attachment's value.
    pub fn attachment(&self, key: &str) -> Option<&str> {
        self.attachments
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// An instance with its statistics: what routers filter, balancers pick
/// from and strategies call.
#[derive(Debug, Clone)]
pub struct Target {
    /// The instance as the directory shows it.
    pub instance: Arc<Instance>,
    /// Its statistics, shared by every call of this cluster.
    pub stats: Arc<InstanceStats>,
}

impl Target {
    /// A target with fresh statistics, as tests and simulations build them.
    pub fn new(instance: Instance) -> Self {
        Self {
            instance: Arc::new(instance),
            stats: Arc::new(InstanceStats::new(None)),
        }
    }

    /// The instance's zone (empty when it has none).
    pub fn zone(&self) -> &str {
        &self.instance.zone
    }

    /// `ip:port`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.instance.ip, self.instance.port)
    }

    /// A metadata value, or one of the instance's own attributes: `host`,
    /// `ip`, `port`, `address`, `zone`, `cluster`, `weight`.
    pub fn attribute(&self, key: &str) -> Option<String> {
        let i = &self.instance;
        match key {
            "host" | "ip" => Some(i.ip.clone()),
            "port" => Some(i.port.to_string()),
            "address" => Some(self.address()),
            "zone" => Some(i.zone.clone()),
            "cluster" => Some(i.cluster.clone()),
            "weight" => Some(i.weight.to_string()),
            _ => i.metadata.get(key).cloned(),
        }
    }
}
