//! The validated configuration: the settings checked and grouped by
//! concern (cluster, gRPC and HTTP limits, auth, TLS, probes, chaos), with
//! every default applied.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use understudy_core::{HealthTimeouts, Limits, RegistryOptions};

use super::{invalid, ConfigError, Settings, UserSetting};

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    /// Address to listen on.
    pub bind: IpAddr,
    /// HTTP port.
    pub http_port: u16,
    /// gRPC port.
    pub grpc_port: u16,
    /// This node's id.
    pub node_id: u64,
    /// This node's datacenter.
    pub dc: String,
    /// Log filter.
    pub log: String,
    /// The registry's rules.
    pub registry: RegistryOptions,
    /// Largest HTTP body.
    pub max_body_bytes: usize,
    /// Capacity of each write queue.
    pub write_queue: usize,
    /// Most open connections on each client port (HTTP and gRPC).
    pub max_connections: usize,
    /// Most open connections on each client port from one client IP.
    pub max_connections_per_ip: usize,
    /// Ordinary requests worked on at once.
    pub max_concurrent_requests: usize,
    /// How long an ordinary request waits for a slot.
    pub request_queue_timeout: Duration,
    /// How long a write may wait for queue room.
    pub write_timeout: Duration,
    /// Push and connection settings of the gRPC API.
    pub grpc: GrpcConfig,
    /// Change batches buffered for native watchers.
    pub watch_buffer: usize,
    /// Shortest hold of a v1 config long poll.
    pub long_poll_floor: Duration,
    /// Shutdown grace period.
    pub shutdown_grace: Duration,
    /// Replication settings.
    pub cluster: ClusterConfig,
    /// Where the raft state is kept; `None`: in memory.
    pub data_dir: Option<PathBuf>,
    /// The multi-DC fault model and view-lag ticks.
    pub chaos: ChaosConfig,
    /// Who may call, when auth is on.
    pub auth: AuthConfig,
    /// Probes of persistent instances.
    pub probes: ProbeConfig,
    /// TLS on the ports, if configured.
    pub tls: Option<TlsConfig>,
}

/// The PEM files TLS is served with, read at start-up.
#[derive(Clone)]
pub struct TlsConfig {
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
            .field("ca", &self.ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    fn from_settings(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        ca: Option<PathBuf>,
        peers: bool,
    ) -> Result<Option<Self>, ConfigError> {
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
        let (cert, key) = match (cert, key) {
            (None, None) => {
                if ca.is_some() {
                    return Err(invalid("tls_ca", "needs tls_cert and tls_key"));
                }
                return Ok(None);
            }
            (Some(_), None) => return Err(invalid("tls_key", "is required with tls_cert")),
            (None, Some(_)) => return Err(invalid("tls_cert", "is required with tls_key")),
            (Some(cert), Some(key)) => (cert, key),
        };
        let ca_pem = match ca {
            Some(ca) => Some(read("tls_ca", &ca, "CERTIFICATE")?),
            None if peers => {
                return Err(invalid(
                    "tls_ca",
                    "is required with TLS and peers: the nodes verify each other's certificates with it",
                ))
            }
            None => None,
        };
        Ok(Some(Self {
            cert_pem: read("tls_cert", &cert, "CERTIFICATE")?,
            key_pem: read("tls_key", &key, "PRIVATE KEY")?,
            ca_pem,
        }))
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

/// How persistent instances are probed.
#[derive(Debug, Clone)]
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

/// Authentication: off by default, as in Nacos.
#[derive(Clone, Default)]
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
    fn from_settings(
        enabled: Option<bool>,
        secret: Option<String>,
        ttl_s: Option<u64>,
        users: Option<Vec<UserSetting>>,
    ) -> Result<Self, ConfigError> {
        let enabled = enabled.unwrap_or(false);
        let token_ttl = Duration::from_secs(positive("auth_token_ttl_s", ttl_s, 18_000)?);
        let users = users.unwrap_or_default();
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
        let token_secret = secret.filter(|s| !s.is_empty()).map(String::into_bytes);
        if !enabled {
            return Ok(Self {
                enabled,
                token_secret: token_secret.unwrap_or_default(),
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
}

/// The multi-DC fault model's starting point and the view-lag ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosConfig {
    /// Seed of the loss and jitter draws.
    pub seed: u64,
    /// DC link faults in force from the start.
    pub links: Vec<crate::faults::LinkSpec>,
    /// How often the leader appends a tick entry.
    pub tick: Duration,
    /// Per-DC delay before committed entries reach the read view.
    pub apply_delays: std::collections::BTreeMap<String, Duration>,
}

/// Replication settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The raft port.
    pub raft_port: u16,
    /// Where the other members reach this node's raft port.
    pub advertise: String,
    /// The other members, by id (empty: a single node).
    pub peers: std::collections::BTreeMap<u64, crate::raft::Member>,
    /// The shared secret, if any.
    pub secret: Option<String>,
    /// Heartbeat period, ms.
    pub heartbeat_ms: u64,
    /// Shortest election timeout, ms (the longest is twice it).
    pub election_timeout_ms: u64,
    /// How long the leader waits for a silent member before removing what
    /// its connections own.
    pub owner_grace: Duration,
    /// How long a node cut off from the majority keeps its gRPC clients
    /// before sending them elsewhere.
    pub quorum_loss_reset: Duration,
}

/// Parses `ID=HOST:PORT` or `ID=HOST:PORT@DC`.
fn parse_peer(text: &str, own_id: u64) -> Result<(u64, crate::raft::Member), ConfigError> {
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
        crate::raft::Member {
            raft_addr: address.to_owned(),
            dc: dc.to_owned(),
        },
    ))
}

/// Push and connection settings of the gRPC API, in ms where a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcConfig {
    /// How long a push waits for its answer.
    pub push_timeout: u64,
    /// Delay before a push is retried.
    pub push_retry: u64,
    /// Fixed merge delay before pushing (0: adaptive only).
    pub push_merge_delay: u64,
    /// Outgoing messages queued per connection.
    pub push_queue: usize,
    /// Idle time before a connection is probed.
    pub connection_idle: u64,
    /// How long a probe may go unanswered.
    pub detection_timeout: u64,
    /// Largest message.
    pub max_message_bytes: usize,
    /// Most service subscriptions, and apart config listeners, per connection.
    pub max_subscriptions_per_connection: usize,
    /// Most native watches open at once per connection.
    pub max_watches_per_connection: usize,
}

impl Default for ValidConfig {
    fn default() -> Self {
        Self::from_settings(Settings::default()).expect("the defaults are valid")
    }
}

impl ValidConfig {
    /// Validates layered settings, filling defaults.
    pub fn from_settings(s: Settings) -> Result<Self, ConfigError> {
        let health = HealthTimeouts {
            beat_interval: positive("beat_interval_ms", s.beat_interval_ms, 5_000)?,
            unhealthy_after: positive("unhealthy_timeout_ms", s.unhealthy_timeout_ms, 15_000)?,
            delete_after: positive("delete_timeout_ms", s.delete_timeout_ms, 30_000)?,
        };
        if health.unhealthy_after < health.beat_interval {
            return Err(invalid(
                "unhealthy_timeout_ms",
                "must be at least beat_interval_ms",
            ));
        }
        if health.delete_after < health.unhealthy_after {
            return Err(invalid(
                "delete_timeout_ms",
                "must be at least unhealthy_timeout_ms",
            ));
        }
        let limits = Limits {
            max_metadata_entries: positive("max_metadata_entries", s.max_metadata_entries, 64)?,
            max_metadata_key_bytes: positive(
                "max_metadata_key_bytes",
                s.max_metadata_key_bytes,
                256,
            )?,
            max_metadata_value_bytes: positive(
                "max_metadata_value_bytes",
                s.max_metadata_value_bytes,
                4096,
            )?,
            max_instances_per_registration: positive(
                "max_instances_per_registration",
                s.max_instances_per_registration,
                1000,
            )?,
            max_config_bytes: positive("max_config_bytes", s.max_config_bytes, 10 << 20)?,
            max_instances_per_service: positive(
                "max_instances_per_service",
                s.max_instances_per_service,
                10_000,
            )?,
            max_services_per_namespace: positive(
                "max_services_per_namespace",
                s.max_services_per_namespace,
                50_000,
            )?,
        };
        let zone_key = s.zone_key.unwrap_or_else(|| "zone".to_owned());
        if zone_key.trim().is_empty() {
            return Err(invalid("zone_key", "must not be blank"));
        }
        let registry = RegistryOptions {
            health,
            limits,
            zone_key,
            empty_service_ttl: positive("empty_service_ttl_ms", s.empty_service_ttl_ms, 60_000)?,
            change_log_capacity: s.change_log_capacity.unwrap_or(100_000),
        };
        let max_body_bytes = s.max_body_bytes.unwrap_or(1 << 20);
        if max_body_bytes < 1024 {
            return Err(invalid("max_body_bytes", "must be at least 1024"));
        }
        let dc = s.dc.unwrap_or_else(|| "dc1".to_owned());
        if dc.is_empty()
            || !dc
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                "dc",
                format!("'{dc}' must be letters, digits, '-' or '_'"),
            ));
        }
        let log = s.log.unwrap_or_else(|| "info".to_owned());
        tracing_subscriber::EnvFilter::try_new(&log)
            .map_err(|e| invalid("log", format!("'{log}' is not a log filter: {e}")))?;
        let http_port = s.http_port.unwrap_or(8848);
        let grpc_port = match s.grpc_port {
            Some(port) => port,
            // Port 0 (tests) lets the OS choose both.
            None if http_port == 0 => 0,
            None => http_port.checked_add(1000).ok_or_else(|| {
                invalid(
                    "grpc_port",
                    format!("http_port {http_port} + 1000 is beyond 65535; set grpc_port"),
                )
            })?,
        };
        let grpc = GrpcConfig {
            push_timeout: positive("push_timeout_ms", s.push_timeout_ms, 5_000)?,
            push_retry: positive("push_retry_ms", s.push_retry_ms, 1_000)?,
            push_merge_delay: s.push_merge_delay_ms.unwrap_or(0),
            push_queue: positive("push_queue", s.push_queue, 64)?,
            connection_idle: positive("connection_idle_ms", s.connection_idle_ms, 20_000)?,
            detection_timeout: positive("detection_timeout_ms", s.detection_timeout_ms, 5_000)?,
            max_message_bytes: positive(
                "max_grpc_message_bytes",
                s.max_grpc_message_bytes,
                10 << 20,
            )?,
            max_subscriptions_per_connection: positive(
                "max_subscriptions_per_connection",
                s.max_subscriptions_per_connection,
                10_000,
            )?,
            max_watches_per_connection: positive(
                "max_watches_per_connection",
                s.max_watches_per_connection,
                1_000,
            )?,
        };
        let node_id = positive("node_id", s.node_id, 1)?;
        let mut peers = std::collections::BTreeMap::new();
        for text in s.peers.iter().flatten().filter(|p| !p.trim().is_empty()) {
            let (id, member) = parse_peer(text, node_id)?;
            if peers.insert(id, member).is_some() {
                return Err(invalid("peer", format!("node id {id} is given twice")));
            }
        }
        let secret = s.cluster_secret.filter(|secret| !secret.is_empty());
        if let Some(secret) = &secret {
            if !secret.chars().all(|c| c.is_ascii_graphic()) {
                return Err(invalid(
                    "cluster_secret",
                    "must be visible ASCII characters without spaces",
                ));
            }
        }
        let heartbeat_ms = positive("raft_heartbeat_ms", s.raft_heartbeat_ms, 100)?;
        let election_timeout_ms = positive(
            "raft_election_timeout_ms",
            s.raft_election_timeout_ms,
            1_000,
        )?;
        if election_timeout_ms <= heartbeat_ms {
            return Err(invalid(
                "raft_election_timeout_ms",
                "must be longer than raft_heartbeat_ms",
            ));
        }
        let owner_grace_ms = positive("owner_grace_ms", s.owner_grace_ms, 20_000)?;
        let quorum_loss_reset_ms =
            positive("quorum_loss_reset_ms", s.quorum_loss_reset_ms, 10_000)?;
        if quorum_loss_reset_ms >= owner_grace_ms {
            return Err(invalid(
                "quorum_loss_reset_ms",
                "must be shorter than owner_grace_ms, so clients move before their owner is lost",
            ));
        }
        if owner_grace_ms <= election_timeout_ms {
            return Err(invalid(
                "owner_grace_ms",
                "must be longer than raft_election_timeout_ms",
            ));
        }
        let bind = s.bind.unwrap_or(IpAddr::from([127, 0, 0, 1]));
        let raft_port = s.raft_port.unwrap_or(7848);
        let advertise = match s.raft_advertise {
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
                address
            }
            None if bind.is_unspecified() && !peers.is_empty() => {
                return Err(invalid(
                    "raft_advertise",
                    format!("bind {bind} is no address peers can reach; set raft_advertise"),
                ))
            }
            None => std::net::SocketAddr::new(bind, raft_port).to_string(),
        };
        let data_dir = match s.data_dir {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(invalid("data_dir", "must not be empty"))
            }
            Some(dir) if dir.is_file() => {
                return Err(invalid(
                    "data_dir",
                    format!("{} is a file, not a directory", dir.display()),
                ))
            }
            other => other,
        };
        let mut links = Vec::new();
        for text in s.link.iter().flatten().filter(|l| !l.trim().is_empty()) {
            links.push(
                text.parse::<crate::faults::LinkSpec>()
                    .map_err(|e| invalid("link", e.to_string()))?,
            );
        }
        let mut apply_delays = std::collections::BTreeMap::new();
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
        let tick_ms = s.tick_ms.unwrap_or(100);
        if !(10..=60_000).contains(&tick_ms) {
            return Err(invalid("tick_ms", "must be between 10 and 60000"));
        }
        let chaos = ChaosConfig {
            seed: s.chaos_seed.unwrap_or(1),
            links,
            tick: Duration::from_millis(tick_ms),
            apply_delays,
        };
        let has_peers = !peers.is_empty();
        let cluster = ClusterConfig {
            raft_port,
            advertise,
            peers,
            secret,
            heartbeat_ms,
            election_timeout_ms,
            owner_grace: Duration::from_millis(owner_grace_ms),
            quorum_loss_reset: Duration::from_millis(quorum_loss_reset_ms),
        };
        Ok(Self {
            bind,
            http_port,
            grpc_port,
            node_id,
            dc,
            log,
            registry,
            max_body_bytes,
            write_queue: positive("write_queue", s.write_queue, 4096)?,
            max_connections: positive("max_connections", s.max_connections, 20_000)?,
            max_connections_per_ip: positive(
                "max_connections_per_ip",
                s.max_connections_per_ip,
                5_000,
            )?,
            max_concurrent_requests: positive(
                "max_concurrent_requests",
                s.max_concurrent_requests,
                1024,
            )?,
            request_queue_timeout: Duration::from_millis(positive(
                "request_queue_timeout_ms",
                s.request_queue_timeout_ms,
                1_000,
            )?),
            write_timeout: Duration::from_millis(positive(
                "write_timeout_ms",
                s.write_timeout_ms,
                2_000,
            )?),
            grpc,
            watch_buffer: positive("watch_buffer", s.watch_buffer, 1024)?,
            long_poll_floor: Duration::from_millis(s.long_poll_floor_ms.unwrap_or(10_000)),
            shutdown_grace: Duration::from_millis(s.shutdown_grace_ms.unwrap_or(5_000)),
            cluster,
            data_dir,
            chaos,
            tls: TlsConfig::from_settings(s.tls_cert, s.tls_key, s.tls_ca, has_peers)?,
            probes: {
                let default = s
                    .health_check
                    .as_deref()
                    .unwrap_or("none")
                    .parse::<Check>()
                    .map_err(|why| invalid("health_check", why))?;
                let interval = positive(
                    "health_check_interval_ms",
                    s.health_check_interval_ms,
                    5_000,
                )?;
                let timeout =
                    positive("health_check_timeout_ms", s.health_check_timeout_ms, 2_000)?;
                if timeout >= interval {
                    return Err(invalid(
                        "health_check_timeout_ms",
                        "must be shorter than health_check_interval_ms",
                    ));
                }
                ProbeConfig {
                    default,
                    interval: Duration::from_millis(interval),
                    timeout: Duration::from_millis(timeout),
                    unhealthy_after: positive(
                        "health_check_unhealthy_threshold",
                        s.health_check_unhealthy_threshold,
                        2,
                    )?,
                    healthy_after: positive(
                        "health_check_healthy_threshold",
                        s.health_check_healthy_threshold,
                        1,
                    )?,
                }
            },
            auth: AuthConfig::from_settings(
                s.auth_enabled,
                s.auth_token_secret,
                s.auth_token_ttl_s,
                s.users,
            )?,
        })
    }
}

fn positive<T>(key: &'static str, value: Option<T>, default: T) -> Result<T, ConfigError>
where
    T: PartialOrd + Default + std::fmt::Display + Copy,
{
    let value = value.unwrap_or(default);
    if value <= T::default() {
        return Err(invalid(key, format!("must be greater than 0, got {value}")));
    }
    Ok(value)
}
