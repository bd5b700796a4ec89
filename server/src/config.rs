//! Configuration: one settings struct read from flags, `UNDERSTUDY_*`
//! environment variables and an optional TOML file (flags > env > file >
//! defaults), then validated into a [`ValidConfig`]. Unknown keys and
//! invalid values are errors, never silent fallbacks; `main` exits with
//! code 64 on them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde::Deserialize;
use thiserror::Error;
use understudy_core::{HealthTimeouts, Limits, RegistryOptions};

/// A configuration value that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for these settings.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, naming the key.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("invalid {key}: {reason}")]
    Invalid {
        /// The setting's file key (its flag is the same with dashes).
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        reason: reason.into(),
    }
}

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "understudy",
    version,
    about = "A service registry that stands in for Nacos"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do; `serve` when absent.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Settings for the default `serve`.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
// Built once per process from the command line; boxing `Serve` to keep it
// as small as `Ctl` would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Serve one registry node (the default).
    Serve(ServeArgs),
    /// Commands against a running node: list, watch, register and
    /// deregister; cluster status and chaos links; export and import;
    /// health; hash a password for the users list.
    Ctl(crate::ctl::CtlArgs),
    /// Run a whole multi-DC cluster in this process, each node on its own
    /// ports, e.g. `sim --dc hz=2 --dc sh=1 --link hz-sh=40ms~10ms,loss=1%`.
    Sim(crate::sim::SimArgs),
}

impl Cli {
    /// The serve arguments, whichever way they were given. (`ctl` serves
    /// nothing; `main` runs it before it asks for these.)
    pub fn into_serve_args(self) -> ServeArgs {
        match self.command {
            Some(Command::Serve(args)) => args,
            Some(Command::Ctl(_) | Command::Sim(_)) | None => self.serve,
        }
    }
}

/// `serve`'s arguments: a config file and the settings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// A TOML file with any of the settings below (keys in snake_case).
    #[arg(long, env = "UNDERSTUDY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The settings.
    #[command(flatten)]
    pub settings: Settings,
}

/// Every setting, each optional so that the sources can be layered. The
/// same struct is the config file's schema.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long, env = "UNDERSTUDY_BIND")]
    pub bind: Option<IpAddr>,
    /// HTTP port: Nacos Open API, admin, metrics [default: 8848].
    #[arg(long, env = "UNDERSTUDY_HTTP_PORT")]
    pub http_port: Option<u16>,
    /// gRPC port: Nacos 2.x API [default: HTTP port + 1000, as Nacos clients assume].
    #[arg(long, env = "UNDERSTUDY_GRPC_PORT")]
    pub grpc_port: Option<u16>,
    /// This node's id [default: 1].
    #[arg(long, env = "UNDERSTUDY_NODE_ID")]
    pub node_id: Option<u64>,
    /// This node's datacenter label [default: dc1].
    #[arg(long, env = "UNDERSTUDY_DC")]
    pub dc: Option<String>,
    /// Log filter, tracing-subscriber syntax [default: info].
    #[arg(long, env = "UNDERSTUDY_LOG")]
    pub log: Option<String>,
    /// Beat period told to v1 clients, ms [default: 5000].
    #[arg(long, env = "UNDERSTUDY_BEAT_INTERVAL_MS")]
    pub beat_interval_ms: Option<u64>,
    /// No beat for this long makes an instance unhealthy, ms [default: 15000].
    #[arg(long, env = "UNDERSTUDY_UNHEALTHY_TIMEOUT_MS")]
    pub unhealthy_timeout_ms: Option<u64>,
    /// No beat for this long removes an instance, ms [default: 30000].
    #[arg(long, env = "UNDERSTUDY_DELETE_TIMEOUT_MS")]
    pub delete_timeout_ms: Option<u64>,
    /// Implicitly created services are removed after being empty this long, ms [default: 60000].
    #[arg(long, env = "UNDERSTUDY_EMPTY_SERVICE_TTL_MS")]
    pub empty_service_ttl_ms: Option<u64>,
    /// Metadata key an instance's zone is read from [default: zone].
    #[arg(long, env = "UNDERSTUDY_ZONE_KEY")]
    pub zone_key: Option<String>,
    /// Recent changes kept for watch resume [default: 100000].
    #[arg(long, env = "UNDERSTUDY_CHANGE_LOG_CAPACITY")]
    pub change_log_capacity: Option<usize>,
    /// Largest accepted HTTP request body, bytes [default: 1048576].
    #[arg(long, env = "UNDERSTUDY_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Most metadata entries per instance or service [default: 64].
    #[arg(long, env = "UNDERSTUDY_MAX_METADATA_ENTRIES")]
    pub max_metadata_entries: Option<usize>,
    /// Longest metadata key, bytes [default: 256].
    #[arg(long, env = "UNDERSTUDY_MAX_METADATA_KEY_BYTES")]
    pub max_metadata_key_bytes: Option<usize>,
    /// Longest metadata value, bytes [default: 4096].
    #[arg(long, env = "UNDERSTUDY_MAX_METADATA_VALUE_BYTES")]
    pub max_metadata_value_bytes: Option<usize>,
    /// Most instances in one registration [default: 1000].
    #[arg(long, env = "UNDERSTUDY_MAX_INSTANCES_PER_REGISTRATION")]
    pub max_instances_per_registration: Option<usize>,
    /// Most instances in one service [default: 10000].
    #[arg(long, env = "UNDERSTUDY_MAX_INSTANCES_PER_SERVICE")]
    pub max_instances_per_service: Option<usize>,
    /// Most services in one namespace [default: 50000].
    #[arg(long, env = "UNDERSTUDY_MAX_SERVICES_PER_NAMESPACE")]
    pub max_services_per_namespace: Option<usize>,
    /// Most open connections on each client port (HTTP, gRPC) [default: 20000].
    #[arg(long, env = "UNDERSTUDY_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Most open connections on each client port from one client IP [default: 5000].
    #[arg(long, env = "UNDERSTUDY_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// Most service subscriptions (and, apart, config listeners) per gRPC connection [default: 10000].
    #[arg(long, env = "UNDERSTUDY_MAX_SUBSCRIPTIONS_PER_CONNECTION")]
    pub max_subscriptions_per_connection: Option<usize>,
    /// Most native watches open at once on one gRPC connection [default: 1000].
    #[arg(long, env = "UNDERSTUDY_MAX_WATCHES_PER_CONNECTION")]
    pub max_watches_per_connection: Option<usize>,
    /// Ordinary requests (not beats, deregistrations or health checks) worked on at once [default: 1024].
    #[arg(long, env = "UNDERSTUDY_MAX_CONCURRENT_REQUESTS")]
    pub max_concurrent_requests: Option<usize>,
    /// How long an ordinary request waits for a slot before it is refused as busy, ms [default: 1000].
    #[arg(long, env = "UNDERSTUDY_REQUEST_QUEUE_TIMEOUT_MS")]
    pub request_queue_timeout_ms: Option<u64>,
    /// Capacity of each write queue (urgent and normal) [default: 4096].
    #[arg(long, env = "UNDERSTUDY_WRITE_QUEUE")]
    pub write_queue: Option<usize>,
    /// How long a write may wait for room in its queue before it is refused, ms [default: 2000].
    #[arg(long, env = "UNDERSTUDY_WRITE_TIMEOUT_MS")]
    pub write_timeout_ms: Option<u64>,
    /// How long a push waits for the client's answer before it is retried, ms [default: 5000].
    #[arg(long, env = "UNDERSTUDY_PUSH_TIMEOUT_MS")]
    pub push_timeout_ms: Option<u64>,
    /// Delay before a failed or unanswered push is retried, ms [default: 1000].
    #[arg(long, env = "UNDERSTUDY_PUSH_RETRY_MS")]
    pub push_retry_ms: Option<u64>,
    /// Fixed delay to merge changes before pushing, ms; 0 pushes at once and merges only while a push is unanswered [default: 0].
    #[arg(long, env = "UNDERSTUDY_PUSH_MERGE_DELAY_MS")]
    pub push_merge_delay_ms: Option<u64>,
    /// Outgoing messages queued per gRPC connection [default: 64].
    #[arg(long, env = "UNDERSTUDY_PUSH_QUEUE")]
    pub push_queue: Option<usize>,
    /// A gRPC connection idle this long is asked whether it is alive, ms [default: 20000].
    #[arg(long, env = "UNDERSTUDY_CONNECTION_IDLE_MS")]
    pub connection_idle_ms: Option<u64>,
    /// A connection that does not answer that question within this is dropped, ms [default: 5000].
    #[arg(long, env = "UNDERSTUDY_DETECTION_TIMEOUT_MS")]
    pub detection_timeout_ms: Option<u64>,
    /// Largest gRPC message, bytes [default: 10485760].
    #[arg(long, env = "UNDERSTUDY_MAX_GRPC_MESSAGE_BYTES")]
    pub max_grpc_message_bytes: Option<usize>,
    /// Applied change batches buffered for native watchers; one that falls further behind gets a fresh snapshot [default: 1024].
    #[arg(long, env = "UNDERSTUDY_WATCH_BUFFER")]
    pub watch_buffer: Option<usize>,
    /// Largest config content, bytes [default: 10485760].
    #[arg(long, env = "UNDERSTUDY_MAX_CONFIG_BYTES")]
    pub max_config_bytes: Option<usize>,
    /// Shortest hold of a v1 config long poll, ms (Nacos: 10000) [default: 10000].
    #[arg(long, env = "UNDERSTUDY_LONG_POLL_FLOOR_MS")]
    pub long_poll_floor_ms: Option<u64>,
    /// How long shutdown waits for requests and tasks to finish, ms [default: 5000].
    #[arg(long, env = "UNDERSTUDY_SHUTDOWN_GRACE_MS")]
    pub shutdown_grace_ms: Option<u64>,
    /// Raft port: replication between nodes, never client traffic [default: 7848].
    #[arg(long, env = "UNDERSTUDY_RAFT_PORT")]
    pub raft_port: Option<u16>,
    /// `HOST:PORT` the other members reach this node's raft port at [default: BIND:RAFT_PORT].
    #[arg(long, env = "UNDERSTUDY_RAFT_ADVERTISE")]
    pub raft_advertise: Option<String>,
    /// Another member of the cluster, `ID=HOST:RAFT_PORT` or `ID=HOST:RAFT_PORT@DC`; repeat for each. None: a single node.
    #[arg(long = "peer", env = "UNDERSTUDY_PEERS", value_delimiter = ',')]
    pub peers: Option<Vec<String>>,
    /// Shared secret every raft call must carry; set the same on every node (or UNDERSTUDY_CLUSTER_SECRET).
    #[arg(long, env = "UNDERSTUDY_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: Option<String>,
    /// Raft heartbeat period, ms [default: 100].
    #[arg(long, env = "UNDERSTUDY_RAFT_HEARTBEAT_MS")]
    pub raft_heartbeat_ms: Option<u64>,
    /// A follower hearing no leader for this long (up to twice it) starts an election, ms [default: 1000].
    #[arg(long, env = "UNDERSTUDY_RAFT_ELECTION_TIMEOUT_MS")]
    pub raft_election_timeout_ms: Option<u64>,
    /// A member the leader has not heard from for this long is lost: what its client connections registered is removed, unless the clients re-registered elsewhere meanwhile, ms [default: 20000].
    #[arg(long, env = "UNDERSTUDY_OWNER_GRACE_MS")]
    pub owner_grace_ms: Option<u64>,
    /// A node cut off from the cluster's majority for this long asks its Nacos gRPC clients to reconnect elsewhere and closes their connections, ms; shorter than owner_grace_ms [default: 10000].
    #[arg(long, env = "UNDERSTUDY_QUORUM_LOSS_RESET_MS")]
    pub quorum_loss_reset_ms: Option<u64>,
    /// Directory for the raft log, vote and snapshots (one redb file); none keeps them in memory [default: none].
    #[arg(long, env = "UNDERSTUDY_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Injected faults between two DCs' nodes, `FROM-TO=LATENCY[~JITTER][,loss=P%][,cut]` both ways or `FROM->TO=...` one way (latency is one-way); repeat for each [default: none].
    #[arg(long = "link", env = "UNDERSTUDY_LINKS", value_delimiter = ';')]
    pub link: Option<Vec<String>>,
    /// Seed of the link model's loss and jitter draws; the same seed replays the same draws [default: 1].
    #[arg(long, env = "UNDERSTUDY_CHAOS_SEED")]
    pub chaos_seed: Option<u64>,
    /// The leader appends a timestamped tick entry this often, so view lag means something on an idle cluster, ms [default: 100].
    #[arg(long, env = "UNDERSTUDY_TICK_MS")]
    pub tick_ms: Option<u64>,
    /// Committed entries reach a DC's read view this late (raft is not slowed), `DC=DELAY` such as `sh=500ms`; repeat for each [default: none].
    #[arg(
        long = "apply-delay",
        env = "UNDERSTUDY_APPLY_DELAYS",
        value_delimiter = ','
    )]
    pub apply_delay: Option<Vec<String>>,
    /// Require a token on API calls, as Nacos does with `nacos.core.auth.enabled` [default: false].
    #[arg(long, env = "UNDERSTUDY_AUTH_ENABLED", value_name = "BOOL")]
    pub auth_enabled: Option<bool>,
    /// Key tokens are signed with (HMAC-SHA256), at least 32 bytes; the same on every node, so a token stays valid when its client moves to another node.
    #[arg(long, env = "UNDERSTUDY_AUTH_TOKEN_SECRET", hide_env_values = true)]
    pub auth_token_secret: Option<String>,
    /// How long a token lasts, s (Nacos: 18000) [default: 18000].
    #[arg(long, env = "UNDERSTUDY_AUTH_TOKEN_TTL_S")]
    pub auth_token_ttl_s: Option<u64>,
    /// PEM certificate chain of this node: with `tls_key`, the HTTP, gRPC and (with peers) raft ports speak TLS [default: none].
    #[arg(long, env = "UNDERSTUDY_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` [default: none].
    #[arg(long, env = "UNDERSTUDY_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// PEM certificate of the CA that signed every node's certificate: the nodes verify each other with it on the raft port (both ways); required with TLS and peers [default: none].
    #[arg(long, env = "UNDERSTUDY_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// How persistent instances are probed by the node responsible for them: `none`, `tcp` (a connect) or `http[:PATH]` (a GET answered 2xx); an instance's metadata key `understudy.health_check` overrides it [default: none].
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK", value_name = "CHECK")]
    pub health_check: Option<String>,
    /// How often each persistent instance is probed, ms [default: 5000].
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_INTERVAL_MS")]
    pub health_check_interval_ms: Option<u64>,
    /// How long a probe may take, ms; shorter than the interval [default: 2000].
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_TIMEOUT_MS")]
    pub health_check_timeout_ms: Option<u64>,
    /// Consecutive failed probes that make a healthy instance unhealthy [default: 2].
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_UNHEALTHY_THRESHOLD")]
    pub health_check_unhealthy_threshold: Option<u32>,
    /// Consecutive passed probes that make an unhealthy instance healthy [default: 1].
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_HEALTHY_THRESHOLD")]
    pub health_check_healthy_threshold: Option<u32>,
    /// The users who may log in (config file only: `[[users]]` tables with `name`, `password_hash` as bcrypt, and `admin`).
    #[arg(skip)]
    pub users: Option<Vec<UserSetting>>,
}

/// One `[[users]]` table of the config file.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSetting {
    /// The login name.
    pub name: String,
    /// The password's bcrypt hash (`$2b$...`), as `understudy ctl hash-password` prints it.
    pub password_hash: String,
    /// Whether the user may call the admin and chaos endpoints.
    #[serde(default)]
    pub admin: bool,
}

impl std::fmt::Debug for UserSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSetting")
            .field("name", &self.name)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

macro_rules! layer {
    ($high:expr, $low:expr, $($field:ident),* $(,)?) => {
        Settings { $($field: $high.$field.or($low.$field)),* }
    };
}

impl Settings {
    /// `self` where set, else `lower`.
    pub fn over(self, lower: Settings) -> Settings {
        layer!(
            self,
            lower,
            bind,
            http_port,
            grpc_port,
            node_id,
            dc,
            log,
            beat_interval_ms,
            unhealthy_timeout_ms,
            delete_timeout_ms,
            empty_service_ttl_ms,
            zone_key,
            change_log_capacity,
            max_body_bytes,
            max_metadata_entries,
            max_metadata_key_bytes,
            max_metadata_value_bytes,
            max_instances_per_registration,
            max_instances_per_service,
            max_services_per_namespace,
            max_connections,
            max_connections_per_ip,
            max_subscriptions_per_connection,
            max_watches_per_connection,
            max_concurrent_requests,
            request_queue_timeout_ms,
            write_queue,
            write_timeout_ms,
            push_timeout_ms,
            push_retry_ms,
            push_merge_delay_ms,
            push_queue,
            connection_idle_ms,
            detection_timeout_ms,
            max_grpc_message_bytes,
            watch_buffer,
            max_config_bytes,
            long_poll_floor_ms,
            shutdown_grace_ms,
            raft_port,
            raft_advertise,
            peers,
            cluster_secret,
            raft_heartbeat_ms,
            raft_election_timeout_ms,
            owner_grace_ms,
            quorum_loss_reset_ms,
            data_dir,
            link,
            chaos_seed,
            tick_ms,
            apply_delay,
            auth_enabled,
            auth_token_secret,
            auth_token_ttl_s,
            users,
            tls_cert,
            tls_key,
            tls_ca,
            health_check,
            health_check_interval_ms,
            health_check_timeout_ms,
            health_check_unhealthy_threshold,
            health_check_healthy_threshold,
        )
    }

    /// Reads a TOML config file.
    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Settings, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

impl ServeArgs {
    /// Layers flags and env over the config file and validates.
    pub fn resolve(self) -> Result<ValidConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        ValidConfig::from_settings(self.settings.over(file))
    }
}

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
    pub links: Vec<crate::raft::links::LinkSpec>,
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
                text.parse::<crate::raft::links::LinkSpec>()
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
            let delay = crate::raft::links::parse_duration(delay)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let file = Settings::from_toml("http_port = 9000\nnode_id = 7\n").unwrap();
        let flags = Settings {
            http_port: Some(9100),
            ..Settings::default()
        };
        let config = ValidConfig::from_settings(flags.over(file)).unwrap();
        assert_eq!((config.http_port, config.node_id), (9100, 7));
        assert_eq!(config.bind.to_string(), "127.0.0.1");
    }

    #[test]
    fn the_link_model_comes_from_flags_or_the_file() {
        let file = Settings::from_toml(
            "link = [\"hz-sh=40ms~10ms,loss=1%\", \"sh->hz=cut\"]\napply_delay = [\"sh=500ms\"]\nchaos_seed = 9\n",
        )
        .unwrap();
        let config = ValidConfig::from_settings(file).unwrap();
        let links: Vec<String> = config.chaos.links.iter().map(|l| l.to_string()).collect();
        assert_eq!(links, ["hz-sh=40ms~10ms,loss=1%", "sh->hz=cut"]);
        assert_eq!(config.chaos.seed, 9);
        assert_eq!(config.chaos.apply_delays["sh"], Duration::from_millis(500));
        assert_eq!(config.chaos.tick, Duration::from_millis(100));
    }

    #[test]
    fn unknown_keys_in_the_file_are_errors() {
        let err = Settings::from_toml("http_prot = 1\n").unwrap_err();
        assert!(err.contains("http_prot"), "{err}");
    }

    #[test]
    fn invalid_values_name_their_key() {
        let cases = [
            (
                Settings {
                    health_check: Some("udp".into()),
                    ..Settings::default()
                },
                "health_check",
            ),
            (
                Settings {
                    health_check_timeout_ms: Some(5_000),
                    ..Settings::default()
                },
                "health_check_timeout_ms",
            ),
            (
                Settings {
                    unhealthy_timeout_ms: Some(1),
                    ..Settings::default()
                },
                "unhealthy_timeout_ms",
            ),
            (
                Settings {
                    delete_timeout_ms: Some(10_000),
                    ..Settings::default()
                },
                "delete_timeout_ms",
            ),
            (
                Settings {
                    max_body_bytes: Some(10),
                    ..Settings::default()
                },
                "max_body_bytes",
            ),
            (
                Settings {
                    dc: Some("a b".into()),
                    ..Settings::default()
                },
                "dc",
            ),
            (
                Settings {
                    write_queue: Some(0),
                    ..Settings::default()
                },
                "write_queue",
            ),
            (
                Settings {
                    log: Some("[[[".into()),
                    ..Settings::default()
                },
                "log",
            ),
            (
                Settings {
                    data_dir: Some(PathBuf::new()),
                    ..Settings::default()
                },
                "data_dir",
            ),
            (
                Settings {
                    link: Some(vec!["hz-sh=40".into()]),
                    ..Settings::default()
                },
                "link",
            ),
            (
                Settings {
                    apply_delay: Some(vec!["sh".into()]),
                    ..Settings::default()
                },
                "apply_delay",
            ),
            (
                Settings {
                    tick_ms: Some(1),
                    ..Settings::default()
                },
                "tick_ms",
            ),
        ];
        for (settings, key) in cases {
            match ValidConfig::from_settings(settings) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: expected an error, got {other:?}"),
            }
        }
    }

    #[test]
    fn peers_parse_with_an_optional_dc_and_bad_ones_are_refused_by_name() {
        let with = |peers: &[&str]| {
            ValidConfig::from_settings(Settings {
                node_id: Some(1),
                peers: Some(peers.iter().map(|p| (*p).to_owned()).collect()),
                ..Settings::default()
            })
        };
        let config = with(&["2=10.0.0.2:7848@hz", "3=node-3:7849"]).unwrap();
        let peers: Vec<_> = config
            .cluster
            .peers
            .iter()
            .map(|(id, m)| (*id, m.raft_addr.as_str(), m.dc.as_str()))
            .collect();
        assert_eq!(peers, [(2, "10.0.0.2:7848", "hz"), (3, "node-3:7849", "")]);
        for bad in [
            "2",
            "x=10.0.0.2:7848",
            "0=10.0.0.2:7848",
            "1=10.0.0.1:7848",
            "2=10.0.0.2",
            "2=:7848",
            "2=10.0.0.2:0",
        ] {
            let err = with(&[bad]).unwrap_err().to_string();
            assert!(err.contains("peer"), "{bad}: {err}");
        }
        let err = with(&["2=a:1", "2=b:1"]).unwrap_err().to_string();
        assert!(err.contains("given twice"), "{err}");
        assert!(ValidConfig::default().cluster.peers.is_empty());
        assert_eq!(ValidConfig::default().cluster.raft_port, 7848);
    }

    #[test]
    fn clients_are_sent_away_before_their_owner_is_lost() {
        let with = |grace: u64, reset: u64| {
            ValidConfig::from_settings(Settings {
                owner_grace_ms: Some(grace),
                quorum_loss_reset_ms: Some(reset),
                ..Settings::default()
            })
        };
        let config = with(8_000, 3_000).unwrap();
        assert_eq!(config.cluster.owner_grace, Duration::from_secs(8));
        assert_eq!(config.cluster.quorum_loss_reset, Duration::from_secs(3));
        let err = with(8_000, 8_000).unwrap_err().to_string();
        assert!(err.contains("quorum_loss_reset_ms"), "{err}");
        let err = with(900, 500).unwrap_err().to_string();
        assert!(err.contains("owner_grace_ms"), "{err}");
    }

    #[test]
    fn auth_needs_a_long_secret_and_users_with_bcrypt_hashes() {
        let users = "[[users]]\nname = \"ops\"\npassword_hash = \"$2b$04$ZyKyjHE75QJ0aJEkUuInLeXiTJpnrTP5g/Wr0kVlSiKKpMakGPZTa\"\nadmin = true\n";
        let with = |extra: &str| {
            let settings = Settings::from_toml(&format!("{extra}\n{users}")).unwrap();
            ValidConfig::from_settings(settings)
        };
        let err = with("auth_enabled = true").unwrap_err().to_string();
        assert!(err.contains("auth_token_secret"), "{err}");
        let err = with("auth_enabled = true\nauth_token_secret = \"short\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least 32 bytes"), "{err}");
        let long = "auth_token_secret = \"0123456789abcdef0123456789abcdef\"";
        let config = with(&format!("auth_enabled = true\n{long}")).unwrap();
        assert!(config.auth.enabled);
        assert_eq!(config.auth.users[0].name, "ops");
        assert!(config.auth.users[0].admin);
        assert!(
            !format!("{:?}", config.auth).contains("$2b$"),
            "hashes stay out of logs"
        );
        let settings = Settings::from_toml(&format!(
            "auth_enabled = true\n{long}\n[[users]]\nname = \"x\"\npassword_hash = \"plain\""
        ))
        .unwrap();
        let err = ValidConfig::from_settings(settings)
            .unwrap_err()
            .to_string();
        assert!(err.contains("users") && err.contains("bcrypt"), "{err}");
        let settings = Settings::from_toml(&format!("auth_enabled = true\n{long}")).unwrap();
        let err = ValidConfig::from_settings(settings)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least one [[users]]"), "{err}");
    }

    #[test]
    fn tls_needs_a_certificate_and_key_and_with_peers_a_ca() {
        let dir =
            std::env::temp_dir().join(format!("understudy-tls-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let with = |cert: Option<&Path>, key: Option<&Path>, peers: bool| {
            ValidConfig::from_settings(Settings {
                tls_cert: cert.map(Path::to_owned),
                tls_key: key.map(Path::to_owned),
                peers: peers.then(|| vec!["2=127.0.0.1:7849".to_owned()]),
                ..Settings::default()
            })
        };
        let err = with(Some(&cert), None, false).unwrap_err().to_string();
        assert!(err.contains("tls_key"), "{err}");
        let err = with(Some(&dir.join("missing.pem")), Some(&key), false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tls_cert") && err.contains("cannot read"),
            "{err}"
        );
        let err = with(Some(&key), Some(&key), false).unwrap_err().to_string();
        assert!(
            err.contains("tls_cert") && err.contains("CERTIFICATE"),
            "{err}"
        );
        let err = with(Some(&cert), Some(&key), true).unwrap_err().to_string();
        assert!(err.contains("tls_ca"), "{err}");
        assert!(with(Some(&cert), Some(&key), false).unwrap().tls.is_some());
        assert!(with(None, None, true).unwrap().tls.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_shipped_example_config_parses_and_validates() {
        let text = include_str!("../../understudy.example.toml");
        let settings = Settings::from_toml(text).unwrap();
        ValidConfig::from_settings(settings).unwrap();
    }
}
