//! The settings tree's groups, one per concern. Each group owns its
//! defaults (its `Default`, the only place they are written), reads its
//! keys from the flat [`Settings`] with their checks (`read`), and writes
//! itself back as settings (`lower`), from which the help text and the
//! configuration reference state the defaults.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::faults::LinkSpec;
use crate::member::Member;

use super::{invalid, ConfigError, Settings, UserSetting};

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

/// The HTTP port's own limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Shortest hold of a v1 config long poll.
    pub long_poll_floor: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            // Nacos' floor.
            long_poll_floor: Duration::from_secs(10),
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
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.max_body_bytes = Some(self.max_body_bytes);
        s.long_poll_floor_ms = Some(ms(self.long_poll_floor));
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

/// Replication settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The raft port.
    pub raft_port: u16,
    /// Where the other members reach this node's raft port; derived from
    /// the bind address and the raft port unless set.
    pub advertise: String,
    /// The other members, by id (empty: a single node).
    pub peers: BTreeMap<u64, Member>,
    /// The shared secret, if any.
    pub secret: Option<String>,
    /// Heartbeat period.
    pub heartbeat: Duration,
    /// Shortest election timeout (the longest is twice it).
    pub election_timeout: Duration,
    /// How long the leader waits for a silent member before removing what
    /// its connections own.
    pub owner_grace: Duration,
    /// How long a node cut off from the majority keeps its gRPC clients
    /// before sending them elsewhere.
    pub quorum_loss_reset: Duration,
}

impl ClusterConfig {
    /// The defaults for a node bound to `bind`.
    pub(super) fn default_at(bind: std::net::IpAddr) -> Self {
        let raft_port = 7848;
        Self {
            raft_port,
            advertise: std::net::SocketAddr::new(bind, raft_port).to_string(),
            peers: BTreeMap::new(),
            secret: None,
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_secs(1),
            owner_grace: Duration::from_secs(20),
            quorum_loss_reset: Duration::from_secs(10),
        }
    }

    pub(super) fn read(
        s: &Settings,
        bind: std::net::IpAddr,
        node_id: u64,
    ) -> Result<Self, ConfigError> {
        let d = Self::default_at(bind);
        let mut peers = BTreeMap::new();
        for text in s.peers.iter().flatten().filter(|p| !p.trim().is_empty()) {
            let (id, member) = parse_peer(text, node_id)?;
            if peers.insert(id, member).is_some() {
                return Err(invalid("peer", format!("node id {id} is given twice")));
            }
        }
        let secret = s.cluster_secret.clone().filter(|secret| !secret.is_empty());
        if let Some(secret) = &secret {
            if !secret.chars().all(|c| c.is_ascii_graphic()) {
                return Err(invalid(
                    "cluster_secret",
                    "must be visible ASCII characters without spaces",
                ));
            }
        }
        let heartbeat = positive_ms("raft_heartbeat_ms", s.raft_heartbeat_ms, d.heartbeat)?;
        let election_timeout = positive_ms(
            "raft_election_timeout_ms",
            s.raft_election_timeout_ms,
            d.election_timeout,
        )?;
        if election_timeout <= heartbeat {
            return Err(invalid(
                "raft_election_timeout_ms",
                "must be longer than raft_heartbeat_ms",
            ));
        }
        let owner_grace = positive_ms("owner_grace_ms", s.owner_grace_ms, d.owner_grace)?;
        let quorum_loss_reset = positive_ms(
            "quorum_loss_reset_ms",
            s.quorum_loss_reset_ms,
            d.quorum_loss_reset,
        )?;
        if quorum_loss_reset >= owner_grace {
            return Err(invalid(
                "quorum_loss_reset_ms",
                "must be shorter than owner_grace_ms, so clients move before their owner is lost",
            ));
        }
        if owner_grace <= election_timeout {
            return Err(invalid(
                "owner_grace_ms",
                "must be longer than raft_election_timeout_ms",
            ));
        }
        let raft_port = s.raft_port.unwrap_or(d.raft_port);
        let advertise = match &s.raft_advertise {
            Some(address) => {
                let fine = address
                    .rsplit_once(':')
                    .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
                if !fine {
                    return Err(invalid(
                        "raft_advertise",
                        format!("'{address}' is not HOST:PORT"),
                    ));
                }
                address.clone()
            }
            None if bind.is_unspecified() && !peers.is_empty() => {
                return Err(invalid(
                    "raft_advertise",
                    format!("bind {bind} is no address peers can reach; set raft_advertise"),
                ))
            }
            None => std::net::SocketAddr::new(bind, raft_port).to_string(),
        };
        Ok(Self {
            raft_port,
            advertise,
            peers,
            secret,
            heartbeat,
            election_timeout,
            owner_grace,
            quorum_loss_reset,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.raft_port = Some(self.raft_port);
        s.raft_advertise = Some(self.advertise.clone());
        s.peers = Some(
            self.peers
                .iter()
                .map(|(id, member)| match member.dc.as_str() {
                    "" => format!("{id}={}", member.raft_addr),
                    dc => format!("{id}={}@{dc}", member.raft_addr),
                })
                .collect(),
        );
        s.cluster_secret = self.secret.clone();
        s.raft_heartbeat_ms = Some(ms(self.heartbeat));
        s.raft_election_timeout_ms = Some(ms(self.election_timeout));
        s.owner_grace_ms = Some(ms(self.owner_grace));
        s.quorum_loss_reset_ms = Some(ms(self.quorum_loss_reset));
    }
}

/// Parses `ID=HOST:PORT` or `ID=HOST:PORT@DC`.
fn parse_peer(text: &str, own_id: u64) -> Result<(u64, Member), ConfigError> {
    let bad = |why: String| invalid("peer", format!("'{text}' {why}"));
    let (id, rest) = text
        .split_once('=')
        .ok_or_else(|| bad("is not ID=HOST:RAFT_PORT".into()))?;
    let id: u64 = id
        .trim()
        .parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| bad("needs a positive node id before '='".into()))?;
    if id == own_id {
        return Err(bad(format!("names this node's own id {own_id}")));
    }
    let (address, dc) = match rest.rsplit_once('@') {
        Some((address, dc)) if !dc.is_empty() => (address.trim(), dc.trim()),
        _ => (rest.trim(), ""),
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("needs HOST:RAFT_PORT after '='".into()))?;
    if host.is_empty() || port.parse::<u16>().ok().filter(|p| *p > 0).is_none() {
        return Err(bad("needs a host and a port 1..=65535".into()));
    }
    Ok((
        id,
        Member {
            raft_addr: address.to_owned(),
            dc: dc.to_owned(),
        },
    ))
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
            let (dc, delay) = text
                .split_once('=')
                .ok_or_else(|| invalid("apply_delay", format!("'{text}' is not DC=DELAY")))?;
            let delay = crate::faults::parse_duration(delay)
                .map_err(|why| invalid("apply_delay", format!("'{text}' {why}")))?;
            apply_delays.insert(dc.trim().to_owned(), delay);
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

/// Authentication: off by default, as in Nacos.
#[derive(Clone, PartialEq)]
pub struct AuthConfig {
    /// Whether calls need a token.
    pub enabled: bool,
    /// The token signing key (set when enabled).
    pub token_secret: Vec<u8>,
    /// How long a token lasts.
    pub token_ttl: Duration,
    /// The users who may log in.
    pub users: Vec<UserSetting>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token_secret: Vec::new(),
            // Nacos' token lifetime.
            token_ttl: Duration::from_secs(18_000),
            users: Vec::new(),
        }
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("enabled", &self.enabled)
            .field("token_ttl", &self.token_ttl)
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

impl AuthConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        let enabled = s.auth_enabled.unwrap_or(d.enabled);
        let token_ttl = Duration::from_secs(positive(
            "auth_token_ttl_s",
            s.auth_token_ttl_s,
            d.token_ttl.as_secs(),
        )?);
        let users = s.users.clone().unwrap_or(d.users);
        let mut names = std::collections::BTreeSet::new();
        for user in &users {
            if user.name.trim().is_empty() || user.name.chars().any(char::is_control) {
                return Err(invalid("users", "a user's name must not be empty"));
            }
            if !names.insert(user.name.as_str()) {
                return Err(invalid(
                    "users",
                    format!("user '{}' is given twice", user.name),
                ));
            }
            if user.password_hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(invalid(
                    "users",
                    format!(
                        "the password_hash of user '{}' is not a bcrypt hash ($2b$...); make one with `understudy ctl hash-password`",
                        user.name
                    ),
                ));
            }
        }
        let token_secret = s
            .auth_token_secret
            .clone()
            .filter(|s| !s.is_empty())
            .map(String::into_bytes);
        if !enabled {
            return Ok(Self {
                enabled,
                token_secret: token_secret.unwrap_or(d.token_secret),
                token_ttl,
                users,
            });
        }
        let Some(token_secret) = token_secret else {
            return Err(invalid(
                "auth_token_secret",
                "is required when auth_enabled is true: at least 32 bytes, the same on every node",
            ));
        };
        if token_secret.len() < 32 {
            return Err(invalid(
                "auth_token_secret",
                format!("must be at least 32 bytes, got {}", token_secret.len()),
            ));
        }
        if users.is_empty() {
            return Err(invalid(
                "users",
                "auth_enabled needs at least one [[users]] entry in the config file",
            ));
        }
        Ok(Self {
            enabled,
            token_secret,
            token_ttl,
            users,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.auth_enabled = Some(self.enabled);
        s.auth_token_secret = (!self.token_secret.is_empty())
            .then(|| String::from_utf8_lossy(&self.token_secret).into_owned());
        s.auth_token_ttl_s = Some(self.token_ttl.as_secs());
        s.users = Some(self.users.clone());
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

/// The PEM files TLS is served with, read at start-up. No TLS is the
/// default.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// Where the certificate chain was read from.
    pub cert_file: PathBuf,
    /// Where the private key was read from.
    pub key_file: PathBuf,
    /// Where the CA certificate was read from.
    pub ca_file: Option<PathBuf>,
    /// This node's certificate chain.
    pub cert_pem: Vec<u8>,
    /// Its private key.
    pub key_pem: Vec<u8>,
    /// The CA of the nodes' certificates, for the raft port.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    pub(super) fn read(s: &Settings, peers: bool) -> Result<Option<Self>, ConfigError> {
        let read = |key: &'static str, path: &Path, marker: &str| {
            let bytes = std::fs::read(path)
                .map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))?;
            if !String::from_utf8_lossy(&bytes).contains(marker) {
                return Err(invalid(
                    key,
                    format!("{} holds no PEM {marker}", path.display()),
                ));
            }
            Ok(bytes)
        };
        let (cert_file, key_file) = match (&s.tls_cert, &s.tls_key) {
            (None, None) => {
                if s.tls_ca.is_some() {
                    return Err(invalid("tls_ca", "needs tls_cert and tls_key"));
                }
                return Ok(None);
            }
            (Some(_), None) => return Err(invalid("tls_key", "is required with tls_cert")),
            (None, Some(_)) => return Err(invalid("tls_cert", "is required with tls_key")),
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        };
        let ca_pem = match &s.tls_ca {
            Some(ca) => Some(read("tls_ca", ca, "CERTIFICATE")?),
            None if peers => {
                return Err(invalid(
                    "tls_ca",
                    "is required with TLS and peers: the nodes verify each other's certificates with it",
                ))
            }
            None => None,
        };
        Ok(Some(Self {
            cert_pem: read("tls_cert", &cert_file, "CERTIFICATE")?,
            key_pem: read("tls_key", &key_file, "PRIVATE KEY")?,
            ca_pem,
            cert_file,
            key_file,
            ca_file: s.tls_ca.clone(),
        }))
    }

    pub(super) fn lower(this: Option<&Self>, s: &mut Settings) {
        s.tls_cert = this.map(|tls| tls.cert_file.clone());
        s.tls_key = this.map(|tls| tls.key_file.clone());
        s.tls_ca = this.and_then(|tls| tls.ca_file.clone());
    }
}
