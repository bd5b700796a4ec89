//! The settings tree's groups, one per concern (the cluster's in
//! `cluster.rs`, auth and TLS in `security.rs`). Each group owns its
//! defaults (its `Default`, the only place they are written), reads its
//! keys from the flat [`Settings`] with their checks (`read`), and writes
//! itself back as settings (`lower`), from which the help text and the
//! configuration reference state the defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::faults::LinkSpec;

use super::{invalid, ConfigError, Settings};

/// A duration as a whole number of milliseconds, as the `_ms` keys say it.
pub(super) fn ms(duration: Duration) -> u64 {
    crate::clock::millis(duration)
}

/// `value`, or `default` when unset; either way greater than zero.
pub(super) fn positive<T>(key: &'static str, value: Option<T>, default: T) -> Result<T, ConfigError>
where
    T: PartialOrd + Default + std::fmt::Display + Copy,
{
    let value = value.unwrap_or(default);
    if value <= T::default() {
        return Err(invalid(key, format!("must be greater than 0, got {value}")));
    }
    Ok(value)
}

/// A positive `_ms` key as a duration.
pub(super) fn positive_ms(
    key: &'static str,
    value: Option<u64>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    positive(key, value, ms(default)).map(Duration::from_millis)
}

/// Which Nacos HTTP APIs the HTTP port serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApiCompat {
    /// v1, v2 and v3.
    #[default]
    Superset,
    /// What a stock Nacos 3.0/3.1 serves: v3 and the v1 client endpoints;
    /// every other v1 and v2 endpoint answers 410.
    Nacos3,
}

impl ApiCompat {
    fn parse(raw: &str) -> Result<Self, ConfigError> {
        match raw.trim() {
            "superset" => Ok(Self::Superset),
            "nacos3" => Ok(Self::Nacos3),
            other => Err(invalid(
                "nacos_api_compat",
                format!("'{other}' is neither superset nor nacos3"),
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Superset => "superset",
            Self::Nacos3 => "nacos3",
        }
    }
}

/// The HTTP port's own limits and the Nacos APIs it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Shortest hold of a v1 config long poll.
    pub long_poll_floor: Duration,
    /// Which Nacos HTTP APIs are served.
    pub compat: ApiCompat,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            // Nacos' floor.
            long_poll_floor: Duration::from_secs(10),
            compat: ApiCompat::default(),
        }
    }
}

impl HttpConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        let max_body_bytes = s.max_body_bytes.unwrap_or(d.max_body_bytes);
        if max_body_bytes < 1024 {
            return Err(invalid("max_body_bytes", "must be at least 1024"));
        }
        Ok(Self {
            max_body_bytes,
            long_poll_floor: s
                .long_poll_floor_ms
                .map_or(d.long_poll_floor, Duration::from_millis),
            compat: s
                .nacos_api_compat
                .as_deref()
                .map_or(Ok(d.compat), ApiCompat::parse)?,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.max_body_bytes = Some(self.max_body_bytes);
        s.long_poll_floor_ms = Some(ms(self.long_poll_floor));
        s.nacos_api_compat = Some(self.compat.name().to_owned());
    }
}

/// Who gets in on the client ports (HTTP and gRPC): connection caps and
/// the admission of ordinary requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Most open connections on each client port.
    pub max_connections: usize,
    /// Most open connections on each client port from one client IP.
    pub max_connections_per_ip: usize,
    /// Ordinary requests worked on at once.
    pub max_concurrent_requests: usize,
    /// How long an ordinary request waits for a slot.
    pub request_queue_timeout: Duration,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            max_connections: 20_000,
            max_connections_per_ip: 5_000,
            max_concurrent_requests: 1024,
            request_queue_timeout: Duration::from_secs(1),
        }
    }
}

impl AdmissionConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            max_connections: positive("max_connections", s.max_connections, d.max_connections)?,
            max_connections_per_ip: positive(
                "max_connections_per_ip",
                s.max_connections_per_ip,
                d.max_connections_per_ip,
            )?,
            max_concurrent_requests: positive(
                "max_concurrent_requests",
                s.max_concurrent_requests,
                d.max_concurrent_requests,
            )?,
            request_queue_timeout: positive_ms(
                "request_queue_timeout_ms",
                s.request_queue_timeout_ms,
                d.request_queue_timeout,
            )?,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.max_connections = Some(self.max_connections);
        s.max_connections_per_ip = Some(self.max_connections_per_ip);
        s.max_concurrent_requests = Some(self.max_concurrent_requests);
        s.request_queue_timeout_ms = Some(ms(self.request_queue_timeout));
    }
}

/// The write queues in front of raft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteConfig {
    /// Capacity of each queue (urgent and normal).
    pub queue: usize,
    /// How long a write may wait for room in its queue.
    pub timeout: Duration,
}

impl Default for WriteConfig {
    fn default() -> Self {
        Self {
            queue: 4096,
            timeout: Duration::from_secs(2),
        }
    }
}

impl WriteConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            queue: positive("write_queue", s.write_queue, d.queue)?,
            timeout: positive_ms("write_timeout_ms", s.write_timeout_ms, d.timeout)?,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.write_queue = Some(self.queue);
        s.write_timeout_ms = Some(ms(self.timeout));
    }
}

/// Pushes, connections and watches of the gRPC API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcConfig {
    /// How long a push waits for its answer.
    pub push_timeout: Duration,
    /// Delay before a push is retried.
    pub push_retry: Duration,
    /// Fixed merge delay before pushing (zero: adaptive only).
    pub push_merge_delay: Duration,
    /// Outgoing messages queued per connection.
    pub push_queue: usize,
    /// Idle time before a connection is probed.
    pub connection_idle: Duration,
    /// How long a probe may go unanswered.
    pub detection_timeout: Duration,
    /// Largest message.
    pub max_message_bytes: usize,
    /// Most service subscriptions, and apart config listeners, per connection.
    pub max_subscriptions_per_connection: usize,
    /// Most native watches open at once per connection.
    pub max_watches_per_connection: usize,
    /// Applied change batches buffered for native watchers.
    pub watch_buffer: usize,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            push_timeout: Duration::from_secs(5),
            push_retry: Duration::from_secs(1),
            push_merge_delay: Duration::ZERO,
            push_queue: 64,
            connection_idle: Duration::from_secs(20),
            detection_timeout: Duration::from_secs(5),
            max_message_bytes: 10 << 20,
            max_subscriptions_per_connection: 10_000,
            max_watches_per_connection: 1_000,
            watch_buffer: 1024,
        }
    }
}

impl GrpcConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            push_timeout: positive_ms("push_timeout_ms", s.push_timeout_ms, d.push_timeout)?,
            push_retry: positive_ms("push_retry_ms", s.push_retry_ms, d.push_retry)?,
            push_merge_delay: s
                .push_merge_delay_ms
                .map_or(d.push_merge_delay, Duration::from_millis),
            push_queue: positive("push_queue", s.push_queue, d.push_queue)?,
            connection_idle: positive_ms(
                "connection_idle_ms",
                s.connection_idle_ms,
                d.connection_idle,
            )?,
            detection_timeout: positive_ms(
                "detection_timeout_ms",
                s.detection_timeout_ms,
                d.detection_timeout,
            )?,
            max_message_bytes: positive(
                "max_grpc_message_bytes",
                s.max_grpc_message_bytes,
                d.max_message_bytes,
            )?,
            max_subscriptions_per_connection: positive(
                "max_subscriptions_per_connection",
                s.max_subscriptions_per_connection,
                d.max_subscriptions_per_connection,
            )?,
            max_watches_per_connection: positive(
                "max_watches_per_connection",
                s.max_watches_per_connection,
                d.max_watches_per_connection,
            )?,
            watch_buffer: positive("watch_buffer", s.watch_buffer, d.watch_buffer)?,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.push_timeout_ms = Some(ms(self.push_timeout));
        s.push_retry_ms = Some(ms(self.push_retry));
        s.push_merge_delay_ms = Some(ms(self.push_merge_delay));
        s.push_queue = Some(self.push_queue);
        s.connection_idle_ms = Some(ms(self.connection_idle));
        s.detection_timeout_ms = Some(ms(self.detection_timeout));
        s.max_grpc_message_bytes = Some(self.max_message_bytes);
        s.max_subscriptions_per_connection = Some(self.max_subscriptions_per_connection);
        s.max_watches_per_connection = Some(self.max_watches_per_connection);
        s.watch_buffer = Some(self.watch_buffer);
    }
}

/// The multi-DC fault model's starting point and the view-lag ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosConfig {
    /// Seed of the loss and jitter draws.
    pub seed: u64,
    /// DC link faults in force from the start.
    pub links: Vec<LinkSpec>,
    /// How often the leader appends a tick entry.
    pub tick: Duration,
    /// Per-DC delay before committed entries reach the read view.
    pub apply_delays: BTreeMap<String, Duration>,
}

impl Default for ChaosConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            links: Vec::new(),
            tick: Duration::from_millis(100),
            apply_delays: BTreeMap::new(),
        }
    }
}

impl ChaosConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        let mut links = Vec::new();
        for text in s.link.iter().flatten().filter(|l| !l.trim().is_empty()) {
            links.push(
                text.parse::<LinkSpec>()
                    .map_err(|e| invalid("link", e.to_string()))?,
            );
        }
        let mut apply_delays = BTreeMap::new();
        for text in s
            .apply_delay
            .iter()
            .flatten()
            .filter(|l| !l.trim().is_empty())
        {
            let (dc, delay) = crate::faults::parse_apply_delay(text)
                .map_err(|e| invalid("apply_delay", e.to_string()))?;
            apply_delays.insert(dc, delay);
        }
        let tick = s.tick_ms.map_or(d.tick, Duration::from_millis);
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&tick) {
            return Err(invalid("tick_ms", "must be between 10 and 60000"));
        }
        Ok(Self {
            seed: s.chaos_seed.unwrap_or(d.seed),
            links,
            tick,
            apply_delays,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.chaos_seed = Some(self.seed);
        s.link = Some(self.links.iter().map(ToString::to_string).collect());
        s.tick_ms = Some(ms(self.tick));
        s.apply_delay = Some(
            self.apply_delays
                .iter()
                .map(|(dc, delay)| format!("{dc}={}us", delay.as_micros()))
                .collect(),
        );
    }
}

/// A probe of an instance's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Not probed.
    None,
    /// A TCP connect.
    Tcp,
    /// An HTTP GET of this path, answered 2xx.
    Http(String),
}

impl std::str::FromStr for Check {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "none" | "" => Ok(Check::None),
            "tcp" => Ok(Check::Tcp),
            "http" => Ok(Check::Http("/".to_owned())),
            other => match other.strip_prefix("http:") {
                Some(path) if path.starts_with('/') && !path.contains(char::is_whitespace) => {
                    Ok(Check::Http(path.to_owned()))
                }
                _ => Err(format!("'{other}' is not none, tcp, http or http:/PATH")),
            },
        }
    }
}

impl std::fmt::Display for Check {
    /// The syntax [`Check`]'s `FromStr` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::None => f.write_str("none"),
            Check::Tcp => f.write_str("tcp"),
            Check::Http(path) => write!(f, "http:{path}"),
        }
    }
}

/// How persistent instances are probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeConfig {
    /// The probe of instances that name none in their metadata.
    pub default: Check,
    /// How often each is probed.
    pub interval: Duration,
    /// How long one probe may take.
    pub timeout: Duration,
    /// Consecutive failures that make an instance unhealthy.
    pub unhealthy_after: u32,
    /// Consecutive passes that make it healthy again.
    pub healthy_after: u32,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            default: Check::None,
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            unhealthy_after: 2,
            healthy_after: 1,
        }
    }
}

impl ProbeConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        let default = match &s.health_check {
            Some(text) => text
                .parse::<Check>()
                .map_err(|why| invalid("health_check", why))?,
            None => d.default,
        };
        let interval = positive_ms(
            "health_check_interval_ms",
            s.health_check_interval_ms,
            d.interval,
        )?;
        let timeout = positive_ms(
            "health_check_timeout_ms",
            s.health_check_timeout_ms,
            d.timeout,
        )?;
        if timeout >= interval {
            return Err(invalid(
                "health_check_timeout_ms",
                "must be shorter than health_check_interval_ms",
            ));
        }
        Ok(Self {
            default,
            interval,
            timeout,
            unhealthy_after: positive(
                "health_check_unhealthy_threshold",
                s.health_check_unhealthy_threshold,
                d.unhealthy_after,
            )?,
            healthy_after: positive(
                "health_check_healthy_threshold",
                s.health_check_healthy_threshold,
                d.healthy_after,
            )?,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.health_check = Some(self.default.to_string());
        s.health_check_interval_ms = Some(ms(self.interval));
        s.health_check_timeout_ms = Some(ms(self.timeout));
        s.health_check_unhealthy_threshold = Some(self.unhealthy_after);
        s.health_check_healthy_threshold = Some(self.healthy_after);
    }
}
