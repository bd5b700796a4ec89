//! The validated configuration: the settings tree. Its groups
//! (`groups.rs`) each own one concern's defaults and checks; the node's
//! identity (address, ports, id, DC, log, data dir, shutdown grace) is
//! here, and the registry's rules are the core's [`RegistryOptions`], whose
//! defaults the core owns.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use understudy_core::{HealthTimeouts, Limits, RegistryOptions};

use super::groups::{ms, positive};
use super::{
    invalid, AdmissionConfig, AuthConfig, ChaosConfig, ClusterConfig, ConfigError, GrpcConfig,
    HttpConfig, ProbeConfig, Settings, TlsConfig, WriteConfig,
};

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidConfig {
    /// Address to listen on.
    pub bind: IpAddr,
    /// HTTP port.
    pub http_port: u16,
    /// gRPC port; derived from the HTTP port unless set.
    pub grpc_port: u16,
    /// This node's id.
    pub node_id: u64,
    /// This node's datacenter.
    pub dc: String,
    /// Log filter.
    pub log: String,
    /// Where the raft state is kept; `None`: in memory.
    pub data_dir: Option<PathBuf>,
    /// How long shutdown waits for requests and tasks to finish.
    pub shutdown_grace: Duration,
    /// The registry's rules.
    pub registry: RegistryOptions,
    /// The HTTP port's own limits.
    pub http: HttpConfig,
    /// Connection caps and request admission on the client ports.
    pub admission: AdmissionConfig,
    /// The write queues in front of raft.
    pub writes: WriteConfig,
    /// Pushes, connections and watches of the gRPC API.
    pub grpc: GrpcConfig,
    /// Replication settings.
    pub cluster: ClusterConfig,
    /// The multi-DC fault model and view-lag ticks.
    pub chaos: ChaosConfig,
    /// Who may call, when auth is on.
    pub auth: AuthConfig,
    /// Probes of persistent instances.
    pub probes: ProbeConfig,
    /// TLS on the ports, if configured.
    pub tls: Option<TlsConfig>,
}

/// The gRPC port Nacos clients assume for an HTTP port: 1000 above it.
/// Port 0 (tests) lets the OS choose both.
fn grpc_port_for(http_port: u16) -> Result<u16, ConfigError> {
    if http_port == 0 {
        return Ok(0);
    }
    http_port.checked_add(1000).ok_or_else(|| {
        invalid(
            "grpc_port",
            format!("http_port {http_port} + 1000 is beyond 65535; set grpc_port"),
        )
    })
}

impl Default for ValidConfig {
    fn default() -> Self {
        let bind = IpAddr::from([127, 0, 0, 1]);
        let http_port = 8848;
        Self {
            bind,
            http_port,
            grpc_port: grpc_port_for(http_port).expect("the default HTTP port has a gRPC port"),
            node_id: 1,
            dc: "dc1".to_owned(),
            // openraft logs its state machine at info: a page per election.
            log: "info,openraft=warn".to_owned(),
            data_dir: None,
            shutdown_grace: Duration::from_secs(5),
            registry: RegistryOptions::default(),
            http: HttpConfig::default(),
            admission: AdmissionConfig::default(),
            writes: WriteConfig::default(),
            grpc: GrpcConfig::default(),
            cluster: ClusterConfig::default_at(bind),
            chaos: ChaosConfig::default(),
            auth: AuthConfig::default(),
            probes: ProbeConfig::default(),
            tls: None,
        }
    }
}

impl ValidConfig {
    /// Validates layered settings, filling defaults.
    pub fn from_settings(s: Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        let bind = s.bind.unwrap_or(d.bind);
        let node_id = positive("node_id", s.node_id, d.node_id)?;
        let (cluster, listed_dc) = ClusterConfig::read(&s, bind, node_id)?;
        let dc = s.dc.clone().or(listed_dc).unwrap_or(d.dc);
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
        let log = s.log.clone().unwrap_or(d.log);
        tracing_subscriber::EnvFilter::try_new(&log)
            .map_err(|e| invalid("log", format!("'{log}' is not a log filter: {e}")))?;
        let http_port = s.http_port.unwrap_or(d.http_port);
        let grpc_port = match s.grpc_port {
            Some(port) => port,
            None => grpc_port_for(http_port)?,
        };
        let data_dir = match &s.data_dir {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(invalid("data_dir", "must not be empty"))
            }
            Some(dir) if dir.is_file() => {
                return Err(invalid(
                    "data_dir",
                    format!("{} is a file, not a directory", dir.display()),
                ))
            }
            other => other.clone(),
        };
        Ok(Self {
            bind,
            http_port,
            grpc_port,
            node_id,
            dc,
            log,
            data_dir,
            shutdown_grace: s
                .shutdown_grace_ms
                .map_or(d.shutdown_grace, Duration::from_millis),
            registry: registry(&s, d.registry)?,
            http: HttpConfig::read(&s)?,
            admission: AdmissionConfig::read(&s)?,
            writes: WriteConfig::read(&s)?,
            grpc: GrpcConfig::read(&s)?,
            tls: TlsConfig::read(&s, !cluster.peers.is_empty())?,
            cluster,
            chaos: ChaosConfig::read(&s)?,
            auth: AuthConfig::read(&s)?,
            probes: ProbeConfig::read(&s)?,
        })
    }

    /// The settings this configuration gives other values than the
    /// defaults, by key, as the config file would write them: secrets as
    /// `(set)`, users by name, a derived default (the gRPC port at HTTP +
    /// 1000, the raft address at the bind address) only when it is not
    /// the derived value. What the startup banner prints.
    pub fn changed_settings(&self) -> Vec<(String, String)> {
        let table = |config: &Self| {
            toml::Table::try_from(config.to_settings()).expect("settings serialize as a TOML table")
        };
        let (mine, defaults) = (table(self), table(&Self::default()));
        let derived = |key: &str| match key {
            "grpc_port" => grpc_port_for(self.http_port).ok() == Some(self.grpc_port),
            "raft_advertise" => {
                std::net::SocketAddr::new(self.bind, self.cluster.raft_port).to_string()
                    == self.cluster.advertise
            }
            _ => false,
        };
        let keys: std::collections::BTreeSet<&String> =
            mine.keys().chain(defaults.keys()).collect();
        keys.into_iter()
            .filter(|key| mine.get(*key) != defaults.get(*key) && !derived(key))
            .map(|key| {
                let shown = match (key.as_str(), mine.get(key)) {
                    (_, None) => "none".to_owned(),
                    ("cluster_secret" | "auth_token_secret", Some(_)) => "(set)".to_owned(),
                    ("users", Some(toml::Value::Array(users))) => users
                        .iter()
                        .filter_map(|user| user.get("name").and_then(toml::Value::as_str))
                        .collect::<Vec<_>>()
                        .join(","),
                    (_, Some(toml::Value::String(text))) => text.clone(),
                    (_, Some(toml::Value::Array(items))) => items
                        .iter()
                        .map(|item| match item {
                            toml::Value::String(text) => text.clone(),
                            other => other.to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                    (_, Some(other)) => other.to_string(),
                };
                (key.clone(), shown)
            })
            .collect()
    }

    /// This configuration as settings: every key set, so that validating
    /// them gives this configuration back. The defaults the help text and
    /// the configuration reference state are `ValidConfig::default()`
    /// lowered this way.
    pub fn to_settings(&self) -> Settings {
        let r = &self.registry;
        let mut s = Settings {
            bind: Some(self.bind),
            http_port: Some(self.http_port),
            grpc_port: Some(self.grpc_port),
            node_id: Some(self.node_id),
            dc: Some(self.dc.clone()),
            log: Some(self.log.clone()),
            data_dir: self.data_dir.clone(),
            shutdown_grace_ms: Some(ms(self.shutdown_grace)),
            beat_interval_ms: Some(r.health.beat_interval),
            unhealthy_timeout_ms: Some(r.health.unhealthy_after),
            delete_timeout_ms: Some(r.health.delete_after),
            empty_service_ttl_ms: Some(r.empty_service_ttl),
            zone_key: Some(r.zone_key.clone()),
            change_log_capacity: Some(r.change_log_capacity),
            config_history_per_config: Some(r.history.max_per_config),
            config_history_max_age_ms: Some(r.history.max_age),
            max_metadata_entries: Some(r.limits.max_metadata_entries),
            max_metadata_key_bytes: Some(r.limits.max_metadata_key_bytes),
            max_metadata_value_bytes: Some(r.limits.max_metadata_value_bytes),
            max_instances_per_registration: Some(r.limits.max_instances_per_registration),
            max_instances_per_service: Some(r.limits.max_instances_per_service),
            max_services_per_namespace: Some(r.limits.max_services_per_namespace),
            max_config_bytes: Some(r.limits.max_config_bytes),
            ..Settings::default()
        };
        self.http.lower(&mut s);
        self.admission.lower(&mut s);
        self.writes.lower(&mut s);
        self.grpc.lower(&mut s);
        self.cluster.lower(&mut s);
        self.chaos.lower(&mut s);
        self.auth.lower(&mut s);
        self.probes.lower(&mut s);
        TlsConfig::lower(self.tls.as_ref(), &mut s);
        s
    }
}

/// The registry's rules: liveness timeouts, size limits, zones and
/// retention, over the core's defaults.
fn registry(s: &Settings, d: RegistryOptions) -> Result<RegistryOptions, ConfigError> {
    let health = HealthTimeouts {
        beat_interval: positive(
            "beat_interval_ms",
            s.beat_interval_ms,
            d.health.beat_interval,
        )?,
        unhealthy_after: positive(
            "unhealthy_timeout_ms",
            s.unhealthy_timeout_ms,
            d.health.unhealthy_after,
        )?,
        delete_after: positive(
            "delete_timeout_ms",
            s.delete_timeout_ms,
            d.health.delete_after,
        )?,
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
    let dl = d.limits;
    let limits = Limits {
        max_metadata_entries: positive(
            "max_metadata_entries",
            s.max_metadata_entries,
            dl.max_metadata_entries,
        )?,
        max_metadata_key_bytes: positive(
            "max_metadata_key_bytes",
            s.max_metadata_key_bytes,
            dl.max_metadata_key_bytes,
        )?,
        max_metadata_value_bytes: positive(
            "max_metadata_value_bytes",
            s.max_metadata_value_bytes,
            dl.max_metadata_value_bytes,
        )?,
        max_instances_per_registration: positive(
            "max_instances_per_registration",
            s.max_instances_per_registration,
            dl.max_instances_per_registration,
        )?,
        max_config_bytes: positive("max_config_bytes", s.max_config_bytes, dl.max_config_bytes)?,
        max_instances_per_service: positive(
            "max_instances_per_service",
            s.max_instances_per_service,
            dl.max_instances_per_service,
        )?,
        max_services_per_namespace: positive(
            "max_services_per_namespace",
            s.max_services_per_namespace,
            dl.max_services_per_namespace,
        )?,
    };
    let zone_key = s.zone_key.clone().unwrap_or(d.zone_key);
    if zone_key.trim().is_empty() {
        return Err(invalid("zone_key", "must not be blank"));
    }
    Ok(RegistryOptions {
        health,
        limits,
        zone_key,
        empty_service_ttl: positive(
            "empty_service_ttl_ms",
            s.empty_service_ttl_ms,
            d.empty_service_ttl,
        )?,
        change_log_capacity: s.change_log_capacity.unwrap_or(d.change_log_capacity),
        history: understudy_core::HistoryRetention {
            max_per_config: positive(
                "config_history_per_config",
                s.config_history_per_config,
                d.history.max_per_config,
            )?,
            max_age: positive(
                "config_history_max_age_ms",
                s.config_history_max_age_ms,
                d.history.max_age,
            )?,
        },
    })
}
