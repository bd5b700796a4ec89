//! Configuration. The settings are read flat, as users write them: from
//! flags, `UNDERSTUDY_*` environment variables and an optional TOML file
//! (flags > env > file > defaults), each key once, unknown keys refused.
//! They are then validated into the settings tree, a [`ValidConfig`]
//! (`valid.rs`) of per-concern groups (`groups.rs`, `cluster.rs`,
//! `security.rs`), each of which owns
//! its defaults and checks. Invalid values are errors naming the key, never
//! silent fallbacks; `main` exits with code 64 on them. The defaults the
//! help text and `docs/configuration.md` state are the tree's defaults
//! written back as settings ([`stated_defaults`]).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

mod cluster;
mod groups;
mod security;
#[cfg(test)]
mod tests;
mod valid;

pub use cluster::{ClusterConfig, Workarounds};
pub use groups::{
    AdmissionConfig, ApiCompat, ChaosConfig, Check, GrpcConfig, HttpConfig, ProbeConfig,
    WriteConfig,
};
pub use security::{AuthConfig, TlsConfig};
pub use valid::ValidConfig;

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

/// Every setting, each optional so that the sources can be layered. The
/// same struct is the config file's schema. The defaults are not written
/// here but in the settings tree; the help text states them
/// ([`stated_defaults`]).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Address to listen on.
    #[arg(long, env = "UNDERSTUDY_BIND")]
    pub bind: Option<IpAddr>,
    /// HTTP port: Nacos Open API, admin, metrics.
    #[arg(long, env = "UNDERSTUDY_HTTP_PORT")]
    pub http_port: Option<u16>,
    /// gRPC port: Nacos 2.x API [default: HTTP port + 1000, as Nacos clients assume].
    #[arg(long, env = "UNDERSTUDY_GRPC_PORT")]
    pub grpc_port: Option<u16>,
    /// This node's id.
    #[arg(long, env = "UNDERSTUDY_NODE_ID")]
    pub node_id: Option<u64>,
    /// This node's datacenter label.
    #[arg(long, env = "UNDERSTUDY_DC")]
    pub dc: Option<String>,
    /// Log filter, tracing-subscriber syntax.
    #[arg(long, env = "UNDERSTUDY_LOG")]
    pub log: Option<String>,
    /// Beat period told to v1 clients, ms.
    #[arg(long, env = "UNDERSTUDY_BEAT_INTERVAL_MS")]
    pub beat_interval_ms: Option<u64>,
    /// No beat for this long makes an instance unhealthy, ms.
    #[arg(long, env = "UNDERSTUDY_UNHEALTHY_TIMEOUT_MS")]
    pub unhealthy_timeout_ms: Option<u64>,
    /// No beat for this long removes an instance, ms.
    #[arg(long, env = "UNDERSTUDY_DELETE_TIMEOUT_MS")]
    pub delete_timeout_ms: Option<u64>,
    /// Implicitly created services are removed after being empty this long, ms.
    #[arg(long, env = "UNDERSTUDY_EMPTY_SERVICE_TTL_MS")]
    pub empty_service_ttl_ms: Option<u64>,
    /// Metadata key an instance's zone is read from.
    #[arg(long, env = "UNDERSTUDY_ZONE_KEY")]
    pub zone_key: Option<String>,
    /// Recent changes kept for watch resume.
    #[arg(long, env = "UNDERSTUDY_CHANGE_LOG_CAPACITY")]
    pub change_log_capacity: Option<usize>,
    /// History entries kept per config.
    #[arg(long, env = "UNDERSTUDY_CONFIG_HISTORY_PER_CONFIG")]
    pub config_history_per_config: Option<usize>,
    /// History entries older than this are dropped, ms.
    #[arg(long, env = "UNDERSTUDY_CONFIG_HISTORY_MAX_AGE_MS")]
    pub config_history_max_age_ms: Option<u64>,
    /// Largest accepted HTTP request body, bytes.
    #[arg(long, env = "UNDERSTUDY_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Most metadata entries per instance or service.
    #[arg(long, env = "UNDERSTUDY_MAX_METADATA_ENTRIES")]
    pub max_metadata_entries: Option<usize>,
    /// Longest metadata key, bytes.
    #[arg(long, env = "UNDERSTUDY_MAX_METADATA_KEY_BYTES")]
    pub max_metadata_key_bytes: Option<usize>,
    /// Longest metadata value, bytes.
    #[arg(long, env = "UNDERSTUDY_MAX_METADATA_VALUE_BYTES")]
    pub max_metadata_value_bytes: Option<usize>,
    /// Most instances in one registration.
    #[arg(long, env = "UNDERSTUDY_MAX_INSTANCES_PER_REGISTRATION")]
    pub max_instances_per_registration: Option<usize>,
    /// Most instances in one service.
    #[arg(long, env = "UNDERSTUDY_MAX_INSTANCES_PER_SERVICE")]
    pub max_instances_per_service: Option<usize>,
    /// Most services in one namespace.
    #[arg(long, env = "UNDERSTUDY_MAX_SERVICES_PER_NAMESPACE")]
    pub max_services_per_namespace: Option<usize>,
    /// Most open connections on each client port (HTTP, gRPC).
    #[arg(long, env = "UNDERSTUDY_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Most open connections on each client port from one client IP.
    #[arg(long, env = "UNDERSTUDY_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// Most service subscriptions (and, apart, config listeners) per gRPC connection.
    #[arg(long, env = "UNDERSTUDY_MAX_SUBSCRIPTIONS_PER_CONNECTION")]
    pub max_subscriptions_per_connection: Option<usize>,
    /// Most native watches open at once on one gRPC connection.
    #[arg(long, env = "UNDERSTUDY_MAX_WATCHES_PER_CONNECTION")]
    pub max_watches_per_connection: Option<usize>,
    /// Ordinary requests (not beats, deregistrations or health checks) worked on at once.
    #[arg(long, env = "UNDERSTUDY_MAX_CONCURRENT_REQUESTS")]
    pub max_concurrent_requests: Option<usize>,
    /// How long an ordinary request waits for a slot before it is refused as busy, ms.
    #[arg(long, env = "UNDERSTUDY_REQUEST_QUEUE_TIMEOUT_MS")]
    pub request_queue_timeout_ms: Option<u64>,
    /// Capacity of each write queue (urgent and normal).
    #[arg(long, env = "UNDERSTUDY_WRITE_QUEUE")]
    pub write_queue: Option<usize>,
    /// How long a write may wait for room in its queue before it is refused, ms.
    #[arg(long, env = "UNDERSTUDY_WRITE_TIMEOUT_MS")]
    pub write_timeout_ms: Option<u64>,
    /// How long a push waits for the client's answer before it is retried, ms.
    #[arg(long, env = "UNDERSTUDY_PUSH_TIMEOUT_MS")]
    pub push_timeout_ms: Option<u64>,
    /// Delay before a failed or unanswered push is retried, ms.
    #[arg(long, env = "UNDERSTUDY_PUSH_RETRY_MS")]
    pub push_retry_ms: Option<u64>,
    /// Fixed delay to merge changes before pushing, ms; 0 pushes at once and merges only while a push is unanswered.
    #[arg(long, env = "UNDERSTUDY_PUSH_MERGE_DELAY_MS")]
    pub push_merge_delay_ms: Option<u64>,
    /// Outgoing messages queued per gRPC connection.
    #[arg(long, env = "UNDERSTUDY_PUSH_QUEUE")]
    pub push_queue: Option<usize>,
    /// A gRPC connection idle this long is asked whether it is alive, ms.
    #[arg(long, env = "UNDERSTUDY_CONNECTION_IDLE_MS")]
    pub connection_idle_ms: Option<u64>,
    /// A connection that does not answer that question within this is dropped, ms.
    #[arg(long, env = "UNDERSTUDY_DETECTION_TIMEOUT_MS")]
    pub detection_timeout_ms: Option<u64>,
    /// Largest gRPC message, bytes.
    #[arg(long, env = "UNDERSTUDY_MAX_GRPC_MESSAGE_BYTES")]
    pub max_grpc_message_bytes: Option<usize>,
    /// Applied change batches buffered for native watchers; one that falls further behind gets a fresh snapshot.
    #[arg(long, env = "UNDERSTUDY_WATCH_BUFFER")]
    pub watch_buffer: Option<usize>,
    /// Largest config content, bytes.
    #[arg(long, env = "UNDERSTUDY_MAX_CONFIG_BYTES")]
    pub max_config_bytes: Option<usize>,
    /// Shortest hold of a v1 config long poll, ms (Nacos: 10000).
    #[arg(long, env = "UNDERSTUDY_LONG_POLL_FLOOR_MS")]
    pub long_poll_floor_ms: Option<u64>,
    /// Which Nacos HTTP APIs are served: `superset` (v1, v2 and v3) or
    /// `nacos3` (what a stock Nacos 3.0/3.1 serves: v3 and the v1 client
    /// endpoints; the rest answers 410).
    #[arg(long, env = "UNDERSTUDY_NACOS_API_COMPAT")]
    pub nacos_api_compat: Option<String>,
    /// How long shutdown waits for requests and tasks to finish, ms.
    #[arg(long, env = "UNDERSTUDY_SHUTDOWN_GRACE_MS")]
    pub shutdown_grace_ms: Option<u64>,
    /// Raft port: replication between nodes, never client traffic.
    #[arg(long, env = "UNDERSTUDY_RAFT_PORT")]
    pub raft_port: Option<u16>,
    /// `HOST:PORT` the other members reach this node's raft port at [default: this node's entry in the member list, else BIND:RAFT_PORT].
    #[arg(long, env = "UNDERSTUDY_RAFT_ADVERTISE")]
    pub raft_advertise: Option<String>,
    /// A member of the cluster, `ID=HOST:RAFT_PORT` or `ID=HOST:RAFT_PORT@DC`; repeat for each. The same list may go to every node: a node finds itself by its id. None: a single node.
    #[arg(long = "peer", env = "UNDERSTUDY_PEERS", value_delimiter = ',')]
    pub peers: Option<Vec<String>>,
    /// Shared secret every raft call must carry; set the same on every node (or UNDERSTUDY_CLUSTER_SECRET).
    #[arg(long, env = "UNDERSTUDY_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: Option<String>,
    /// Raft heartbeat period, ms.
    #[arg(long, env = "UNDERSTUDY_RAFT_HEARTBEAT_MS")]
    pub raft_heartbeat_ms: Option<u64>,
    /// A follower hearing no leader for this long (up to twice it) starts an election, ms.
    #[arg(long, env = "UNDERSTUDY_RAFT_ELECTION_TIMEOUT_MS")]
    pub raft_election_timeout_ms: Option<u64>,
    /// A member the leader has not heard from for this long is lost: what its client connections registered is removed, unless the clients re-registered elsewhere meanwhile, ms.
    #[arg(long, env = "UNDERSTUDY_OWNER_GRACE_MS")]
    pub owner_grace_ms: Option<u64>,
    /// A node cut off from the cluster's majority for this long asks its Nacos gRPC clients to reconnect elsewhere and closes their connections, ms; shorter than owner_grace_ms.
    #[arg(long, env = "UNDERSTUDY_QUORUM_LOSS_RESET_MS")]
    pub quorum_loss_reset_ms: Option<u64>,
    /// Directory for the raft log, vote and snapshots (one redb file); none keeps them in memory.
    #[arg(long, env = "UNDERSTUDY_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Injected faults between two DCs' nodes, `FROM-TO=LATENCY[~JITTER][,loss=P%][,cut]` both ways or `FROM->TO=...` one way (latency is one-way); repeat for each.
    #[arg(long = "link", env = "UNDERSTUDY_LINKS", value_delimiter = ';')]
    pub link: Option<Vec<String>>,
    /// Seed of the link model's loss and jitter draws; the same seed replays the same draws.
    #[arg(long, env = "UNDERSTUDY_CHAOS_SEED")]
    pub chaos_seed: Option<u64>,
    /// The leader appends a timestamped tick entry this often, so view lag means something on an idle cluster, ms.
    #[arg(long, env = "UNDERSTUDY_TICK_MS")]
    pub tick_ms: Option<u64>,
    /// Committed entries reach a DC's read view this late (raft is not slowed), `DC=DELAY` such as `sh=500ms`; repeat for each.
    #[arg(
        long = "apply-delay",
        env = "UNDERSTUDY_APPLY_DELAYS",
        value_delimiter = ','
    )]
    pub apply_delay: Option<Vec<String>>,
    /// Require a token on API calls, as Nacos does with `nacos.core.auth.enabled`.
    #[arg(long, env = "UNDERSTUDY_AUTH_ENABLED", value_name = "BOOL")]
    pub auth_enabled: Option<bool>,
    /// Key tokens are signed with (HMAC-SHA256), at least 32 bytes; the same on every node, so a token stays valid when its client moves to another node.
    #[arg(long, env = "UNDERSTUDY_AUTH_TOKEN_SECRET", hide_env_values = true)]
    pub auth_token_secret: Option<String>,
    /// How long a token lasts, s (Nacos: 18000).
    #[arg(long, env = "UNDERSTUDY_AUTH_TOKEN_TTL_S")]
    pub auth_token_ttl_s: Option<u64>,
    /// PEM certificate chain of this node: with `tls_key`, the HTTP, gRPC and (with peers) raft ports speak TLS.
    #[arg(long, env = "UNDERSTUDY_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    #[arg(long, env = "UNDERSTUDY_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// PEM certificate of the CA that signed every node's certificate: the nodes verify each other with it on the raft port (both ways); required with TLS and peers.
    #[arg(long, env = "UNDERSTUDY_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// How persistent instances are probed by the node responsible for them: `none`, `tcp` (a connect) or `http[:PATH]` (a GET answered 2xx); an instance's metadata key `understudy.health_check` overrides it.
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK", value_name = "CHECK")]
    pub health_check: Option<String>,
    /// How often each persistent instance is probed, ms.
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_INTERVAL_MS")]
    pub health_check_interval_ms: Option<u64>,
    /// How long a probe may take, ms; shorter than the interval.
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_TIMEOUT_MS")]
    pub health_check_timeout_ms: Option<u64>,
    /// Consecutive failed probes that make a healthy instance unhealthy.
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_UNHEALTHY_THRESHOLD")]
    pub health_check_unhealthy_threshold: Option<u32>,
    /// Consecutive passed probes that make an unhealthy instance healthy.
    #[arg(long, env = "UNDERSTUDY_HEALTH_CHECK_HEALTHY_THRESHOLD")]
    pub health_check_healthy_threshold: Option<u32>,
    /// The users who may log in (config file only: `[[users]]` tables with `name`, `password_hash` as bcrypt, and `admin`).
    #[arg(skip)]
    pub users: Option<Vec<UserSetting>>,
}

/// One `[[users]]` table of the config file.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
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
            config_history_per_config,
            config_history_max_age_ms,
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
            nacos_api_compat,
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
        Self::from_toml(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Settings, toml::de::Error> {
        toml::from_str(text)
    }
}

/// The settings whose default is not a value but derived from other
/// settings; their help says how, in words.
pub const DERIVED_DEFAULTS: &[&str] = &["grpc_port", "raft_advertise"];

/// Each setting's default as the help text and the configuration
/// reference state it, by key: the default configuration written back as
/// settings, `none` where a setting is unset by default. The settings with
/// [`DERIVED_DEFAULTS`] are left out.
pub fn stated_defaults() -> std::collections::BTreeMap<String, String> {
    let lowered = ValidConfig::default().to_settings();
    let table = toml::Table::try_from(&lowered).expect("settings serialize as a TOML table");
    let mut stated = std::collections::BTreeMap::new();
    use clap::Args as _;
    for arg in Settings::augment_args(clap::Command::new("settings")).get_arguments() {
        let key = arg.get_id().as_str();
        if DERIVED_DEFAULTS.contains(&key) {
            continue;
        }
        let value = match table.get(key) {
            None => "none".to_owned(),
            Some(toml::Value::Array(items)) if items.is_empty() => "none".to_owned(),
            Some(toml::Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        };
        stated.insert(key.to_owned(), value);
    }
    stated
}
