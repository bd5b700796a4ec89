//! Instances: what a provider registers (`InstanceSpec`), what the registry
//! stores (`Instance`), who owns it (`Owner`) and the per-instance health
//! timeouts read from Nacos' preserved metadata keys. Validation of an
//! instance lives here, so every adapter refuses the same inputs.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::kind::ServiceKind;
use crate::{ClusterName, Error, Millis, ServiceKey};

pub use crate::metadata::Metadata;

/// Metadata key: the v1 beat period told to clients, in ms.
pub const META_BEAT_INTERVAL: &str = "preserved.heart.beat.interval";
/// Metadata key: no beat for this long (ms) makes the instance unhealthy.
pub const META_BEAT_TIMEOUT: &str = "preserved.heart.beat.timeout";
/// Metadata key: no beat for this long (ms) removes the instance.
pub const META_DELETE_TIMEOUT: &str = "preserved.ip.delete.timeout";

/// Largest accepted instance weight, as in Nacos.
pub const MAX_WEIGHT: f64 = 10_000.0;

/// Who published an instance. Each owner publishes at most one entry (one
/// or several instances) per service, and a new registration by the same
/// owner replaces that entry, as Nacos 2.x does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Owner {
    /// A long-lived client connection (Nacos gRPC, native API) held by `node`.
    Connection {
        /// The node holding the connection.
        node: u64,
        /// The connection id, shared by every instance the connection
        /// publishes (the registry hands out the copy in its owner index).
        id: Arc<str>,
    },
    /// A v1 HTTP client kept alive by beats (`ip:port#true` in Nacos).
    Beat {
        /// Instance ip.
        ip: Box<str>,
        /// Instance port.
        port: u16,
    },
    /// A persistent registration (`ip:port#false` in Nacos).
    Persistent {
        /// Instance ip.
        ip: Box<str>,
        /// Instance port.
        port: u16,
    },
}

impl Owner {
    /// The kind of service this owner's instances belong in.
    pub fn kind(&self) -> ServiceKind {
        match self {
            Owner::Persistent { .. } => ServiceKind::Persistent,
            Owner::Connection { .. } | Owner::Beat { .. } => ServiceKind::Ephemeral,
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Connection { node, id } => write!(f, "{id}@node{node}"),
            Owner::Beat { ip, port } => write!(f, "{ip}:{port}#true"),
            Owner::Persistent { ip, port } => write!(f, "{ip}:{port}#false"),
        }
    }
}

/// Where an instance sits inside its service: its identity for updates,
/// health changes and removal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceKey {
    /// Instance ip (or host name).
    pub ip: String,
    /// Instance port.
    pub port: u16,
    /// Cluster.
    pub cluster: ClusterName,
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}@{}", self.ip, self.port, self.cluster)
    }
}

/// Beat period and the two liveness timeouts of one instance, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthTimeouts {
    /// How often the client should beat (`clientBeatInterval`).
    pub beat_interval: Millis,
    /// No beat for this long: healthy -> unhealthy.
    pub unhealthy_after: Millis,
    /// No beat for this long: removed.
    pub delete_after: Millis,
}

impl Default for HealthTimeouts {
    /// Nacos' defaults: 5 s, 15 s, 30 s.
    fn default() -> Self {
        NACOS_TIMEOUTS
    }
}

/// Nacos' default timeouts: 5 s, 15 s, 30 s.
const NACOS_TIMEOUTS: HealthTimeouts = HealthTimeouts {
    beat_interval: 5_000,
    unhealthy_after: 15_000,
    delete_after: 30_000,
};

impl HealthTimeouts {
    /// Reads the preserved metadata keys over `defaults`. A present but
    /// malformed or inconsistent value is an error naming the key.
    pub fn from_metadata(metadata: &Metadata, defaults: HealthTimeouts) -> Result<Self, Error> {
        let read = |key: &'static str, default: Millis| -> Result<Millis, Error> {
            match metadata.get(key) {
                None => Ok(default),
                Some(raw) => match raw.trim().parse::<Millis>() {
                    Ok(ms) if ms > 0 => Ok(ms),
                    _ => Err(Error::invalid(
                        "metadata",
                        format!("{key} must be a positive number of milliseconds, got '{raw}'"),
                    )),
                },
            }
        };
        let timeouts = Self {
            beat_interval: read(META_BEAT_INTERVAL, defaults.beat_interval)?,
            unhealthy_after: read(META_BEAT_TIMEOUT, defaults.unhealthy_after)?,
            delete_after: read(META_DELETE_TIMEOUT, defaults.delete_after)?,
        };
        if timeouts.unhealthy_after < timeouts.beat_interval
            || timeouts.delete_after < timeouts.beat_interval
        {
            return Err(Error::invalid(
                "metadata",
                "Instance 'heart beat timeout' and 'ip delete timeout' must greater than 'heart beat interval'",
            ));
        }
        Ok(timeouts)
    }
}

/// Size limits on what a client may store; part of the registry's options
/// so every replica refuses the same commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Most metadata entries per instance or service.
    pub max_metadata_entries: usize,
    /// Longest metadata key, in bytes.
    pub max_metadata_key_bytes: usize,
    /// Longest metadata value, in bytes.
    pub max_metadata_value_bytes: usize,
    /// Most instances in one registration (a batch).
    pub max_instances_per_registration: usize,
    /// Largest config content, in bytes.
    pub max_config_bytes: usize,
    /// Most instances in one service.
    pub max_instances_per_service: usize,
    /// Most services in one namespace.
    pub max_services_per_namespace: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_metadata_entries: 64,
            max_metadata_key_bytes: 256,
            max_metadata_value_bytes: 4096,
            max_instances_per_registration: 1000,
            max_config_bytes: 10 << 20,
            max_instances_per_service: 10_000,
            max_services_per_namespace: 50_000,
        }
    }
}

impl Limits {
    /// Checks a metadata map against the limits.
    pub fn check_metadata(&self, metadata: &Metadata) -> Result<(), Error> {
        if metadata.len() > self.max_metadata_entries {
            return Err(Error::invalid(
                "metadata",
                format!(
                    "{} entries, more than the limit of {}",
                    metadata.len(),
                    self.max_metadata_entries
                ),
            ));
        }
        for (key, value) in metadata {
            if key.is_empty() || key.len() > self.max_metadata_key_bytes {
                return Err(Error::invalid(
                    "metadata",
                    format!(
                        "key '{}' must be 1 to {} bytes",
                        truncate(key),
                        self.max_metadata_key_bytes
                    ),
                ));
            }
            if value.len() > self.max_metadata_value_bytes {
                return Err(Error::invalid(
                    "metadata",
                    format!(
                        "value of '{}' is {} bytes, more than the limit of {}",
                        truncate(key),
                        value.len(),
                        self.max_metadata_value_bytes
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// What a provider asks to register: the client-given fields of an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceSpec {
    /// Client-chosen instance id; generated when `None` or blank.
    pub instance_id: Option<String>,
    /// Ip or host name.
    pub ip: String,
    /// Port.
    pub port: u16,
    /// Weight, 0 to 10000.
    pub weight: f64,
    /// Initial health.
    pub healthy: bool,
    /// Disabled instances are hidden from queries and pushes.
    pub enabled: bool,
    /// Cluster.
    pub cluster: ClusterName,
    /// Metadata.
    pub metadata: Metadata,
}

impl InstanceSpec {
    /// A healthy, enabled instance of weight 1 in the default cluster.
    pub fn new(ip: impl Into<String>, port: u16) -> Self {
        Self {
            instance_id: None,
            ip: ip.into(),
            port,
            weight: 1.0,
            healthy: true,
            enabled: true,
            cluster: ClusterName::default_cluster(),
            metadata: Metadata::new(),
        }
    }

    /// The key this instance will have in its service.
    pub fn key(&self) -> InstanceKey {
        InstanceKey {
            ip: self.ip.to_string(),
            port: self.port,
            cluster: self.cluster.clone(),
        }
    }
}

/// Checks an ip or host name: non-blank, short, no whitespace.
pub fn check_ip(ip: &str) -> Result<(), Error> {
    if ip.trim().is_empty() {
        return Err(Error::invalid("ip", "must not be blank"));
    }
    if ip.len() > 253 || ip.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            "ip",
            "must be an address or host name of at most 253 bytes without whitespace",
        ));
    }
    Ok(())
}

/// Checks a weight: finite, 0 to 10000.
pub fn check_weight(weight: f64) -> Result<(), Error> {
    if !weight.is_finite() || !(0.0..=MAX_WEIGHT).contains(&weight) {
        return Err(Error::invalid(
            "weight",
            // Nacos' words (its weight check names no value).
            "The weights range from 0.0 to 10000.0".to_owned(),
        ));
    }
    Ok(())
}

/// A registered instance as the registry stores and serves it.
///
/// A registry holds hundreds of thousands of these, each in its own
/// allocation, so what can be read off other fields is not stored: the
/// instance id Nacos generates (`ip#port#cluster#group@@service`) is
/// rendered from its service's key when asked for ([`Instance::instance_id`]),
/// and the zone is a span of the packed metadata or the cluster's name
/// ([`Instance::zone`]). A client-given id and timeouts other than Nacos'
/// defaults, which few instances have, are boxed together ([`Rare`]).
#[derive(Debug, Clone)]
pub struct Instance {
    /// Ip or host name: held in place up to 15 bytes (every IPv4
    /// address), on the heap beyond.
    pub ip: ecow::EcoString,
    /// Port.
    pub port: u16,
    /// Weight.
    pub weight: f64,
    /// Health as last decided by registration, beats or an operator.
    pub healthy: bool,
    /// Disabled instances are hidden from queries and pushes.
    pub enabled: bool,
    /// Ephemeral or persistent (always that of its service).
    pub kind: ServiceKind,
    /// Cluster.
    pub cluster: ClusterName,
    /// Metadata. Whoever changes it places the zone again
    /// ([`Instance::place_zone`]).
    pub metadata: Metadata,
    /// Where its zone is read from.
    zone: ZoneAt,
    /// Its client-given id and timeouts, when it has either.
    rare: Rare,
    /// Who published it.
    pub owner: Owner,
}

/// Equal when every field reads the same (two spans of the same metadata
/// may hold the same zone).
impl PartialEq for Instance {
    fn eq(&self, other: &Self) -> bool {
        self.ip == other.ip
            && self.port == other.port
            && self.weight == other.weight
            && self.healthy == other.healthy
            && self.enabled == other.enabled
            && self.kind == other.kind
            && self.cluster == other.cluster
            && self.metadata == other.metadata
            && self.zone() == other.zone()
            && self.rare == other.rare
            && self.owner == other.owner
    }
}

/// Where an instance's zone is: the byte span of the zone key's value in
/// its packed metadata, or, with `len` 0, its cluster's name (a blank
/// zone value falls back to the cluster, so a real span is never empty).
#[derive(Debug, Clone, Copy, Default)]
struct ZoneAt {
    start: u32,
    len: u32,
}

/// What few instances have, boxed so the others carry one null pointer: a
/// client-given instance id, timeouts other than Nacos' defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Rare(Option<Box<RareParts>>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct RareParts {
    instance_id: Option<Box<str>>,
    timeouts: HealthTimeouts,
}

impl Rare {
    fn new(instance_id: Option<Box<str>>, timeouts: HealthTimeouts) -> Self {
        if instance_id.is_none() && timeouts == NACOS_TIMEOUTS {
            Self(None)
        } else {
            Self(Some(Box::new(RareParts {
                instance_id,
                timeouts,
            })))
        }
    }

    fn instance_id(&self) -> Option<&str> {
        self.0.as_ref().and_then(|r| r.instance_id.as_deref())
    }

    fn timeouts(&self) -> HealthTimeouts {
        self.0.as_ref().map_or(NACOS_TIMEOUTS, |r| r.timeouts)
    }
}

/// The id Nacos generates for an instance: `ip#port#cluster#group@@service`.
fn generated_id(ip: &str, port: u16, cluster: &ClusterName, service: &ServiceKey) -> String {
    format!("{ip}#{port}#{cluster}#{}", service.grouped())
}

/// A zone's span of packed metadata as stored: metadata is bounded by
/// [`Limits`] far below 4 GiB, so every span fits.
fn span_at(span: std::ops::Range<usize>) -> Option<ZoneAt> {
    Some(ZoneAt {
        start: u32::try_from(span.start).ok()?,
        len: u32::try_from(span.len()).ok()?,
    })
}

mod stored;

/// The registry's rules an instance is built under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    pub(crate) limits: &'a Limits,
    pub(crate) health: HealthTimeouts,
    /// The metadata key that names an instance's zone.
    pub(crate) zone_key: &'a str,
}

impl Instance {
    /// Validates `spec` and builds the stored instance.
    pub(crate) fn build(
        service: &ServiceKey,
        spec: InstanceSpec,
        owner: Owner,
        rules: Rules<'_>,
    ) -> Result<Self, Error> {
        let Rules {
            limits,
            health,
            zone_key,
        } = rules;
        check_ip(&spec.ip)?;
        check_weight(spec.weight)?;
        limits.check_metadata(&spec.metadata)?;
        let timeouts = HealthTimeouts::from_metadata(&spec.metadata, health)?;
        let instance_id = match spec.instance_id {
            Some(id) if !id.trim().is_empty() => {
                if id.len() > 512 {
                    return Err(Error::invalid("instanceId", "longer than 512 bytes"));
                }
                // The generated form is rendered when asked for.
                (id != generated_id(&spec.ip, spec.port, &spec.cluster, service))
                    .then(|| id.into_boxed_str())
            }
            _ => None,
        };
        let mut instance = Self {
            ip: spec.ip.into(),
            port: spec.port,
            weight: spec.weight,
            healthy: spec.healthy,
            enabled: spec.enabled,
            kind: owner.kind(),
            cluster: spec.cluster,
            metadata: spec.metadata,
            zone: ZoneAt::default(),
            rare: Rare::new(instance_id, timeouts),
            owner,
        };
        instance.place_zone(zone_key);
        Ok(instance)
    }

    /// Its instance id: the client-given one, else the one Nacos generates
    /// (`ip#port#cluster#group@@service`) for `service`, the service it is
    /// in.
    pub fn instance_id(&self, service: &ServiceKey) -> std::borrow::Cow<'_, str> {
        match self.rare.instance_id() {
            Some(id) => id.into(),
            None => generated_id(&self.ip, self.port, &self.cluster, service).into(),
        }
    }

    /// Its client-given instance id, if it has one.
    pub fn given_instance_id(&self) -> Option<&str> {
        self.rare.instance_id()
    }

    /// Whether it stores, as client-given, the id it would be given
    /// anyway (every instance of a snapshot written before ids were
    /// rendered when asked for).
    pub(crate) fn stores_generated_id(&self, service: &ServiceKey) -> bool {
        self.rare
            .instance_id()
            .is_some_and(|id| id == generated_id(&self.ip, self.port, &self.cluster, service))
    }

    /// Forgets a stored id that is the generated one.
    pub(crate) fn forget_generated_id(&mut self) {
        if let Some(rare) = &self.rare.0 {
            self.rare = Rare::new(None, rare.timeouts);
        }
    }

    /// Its beat period and liveness timeouts.
    pub fn timeouts(&self) -> HealthTimeouts {
        self.rare.timeouts()
    }

    /// Its zone: the value of the registry's zone key in its metadata if
    /// present and not blank, else its cluster's name.
    pub fn zone(&self) -> &str {
        let ZoneAt { start, len } = self.zone;
        let span = start as usize..start as usize + len as usize;
        match self.metadata.text().get(span) {
            Some(zone) if len > 0 => zone,
            _ => self.cluster.as_str(),
        }
    }

    /// Places its zone under `zone_key` (after building it or changing its
    /// metadata).
    pub(crate) fn place_zone(&mut self, zone_key: &str) {
        self.zone = match self.metadata.value_span(zone_key) {
            Some(span) if !self.metadata.text()[span.clone()].trim().is_empty() => {
                span_at(span).unwrap_or_default()
            }
            _ => ZoneAt::default(),
        };
    }

    /// Its key inside the service.
    pub fn key(&self) -> InstanceKey {
        InstanceKey {
            ip: self.ip.to_string(),
            port: self.port,
            cluster: self.cluster.clone(),
        }
    }
}

/// An operator's change to an instance's weight, enabled flag or metadata
/// (Nacos `PUT`/`PATCH /instance`). Absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstancePatch {
    /// New weight.
    pub weight: Option<f64>,
    /// New enabled flag.
    pub enabled: Option<bool>,
    /// Metadata to merge over the registered metadata.
    pub metadata: Option<Metadata>,
}

impl InstancePatch {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        if let Some(weight) = self.weight {
            check_weight(weight)?;
        }
        if let Some(metadata) = &self.metadata {
            limits.check_metadata(metadata)?;
        }
        Ok(())
    }

    /// Applies the patch; `true` if anything changed.
    pub(crate) fn apply_to(&self, instance: &mut Instance) -> bool {
        let before = (instance.weight, instance.enabled, instance.metadata.clone());
        if let Some(weight) = self.weight {
            instance.weight = weight;
        }
        if let Some(enabled) = self.enabled {
            instance.enabled = enabled;
        }
        if let Some(metadata) = &self.metadata {
            instance
                .metadata
                .extend(metadata.iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
        }
        (instance.weight, instance.enabled, &instance.metadata) != (before.0, before.1, &before.2)
    }

    /// Folds a later patch into this one.
    pub(crate) fn merge(&mut self, later: &InstancePatch) {
        if later.weight.is_some() {
            self.weight = later.weight;
        }
        if later.enabled.is_some() {
            self.enabled = later.enabled;
        }
        if let Some(metadata) = &later.metadata {
            self.metadata
                .get_or_insert_with(Metadata::new)
                .extend(metadata.iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, Op, Registry, RegistryOptions, RegistrySnapshot};

    #[test]
    fn preserved_metadata_overrides_health_timeouts() {
        let metadata: Metadata = [
            (META_BEAT_INTERVAL.to_owned(), "1000".to_owned()),
            (META_BEAT_TIMEOUT.to_owned(), "3000".to_owned()),
            (META_DELETE_TIMEOUT.to_owned(), "6000".to_owned()),
        ]
        .into();
        let t = HealthTimeouts::from_metadata(&metadata, HealthTimeouts::default()).unwrap();
        assert_eq!(
            (t.beat_interval, t.unhealthy_after, t.delete_after),
            (1000, 3000, 6000)
        );
    }

    #[test]
    fn inconsistent_or_malformed_timeouts_are_refused() {
        for (key, value) in [
            (META_BEAT_TIMEOUT, "1000"),
            (META_DELETE_TIMEOUT, "10"),
            (META_BEAT_INTERVAL, "soon"),
            (META_BEAT_INTERVAL, "0"),
        ] {
            let metadata: Metadata = [(key.to_owned(), value.to_owned())].into();
            assert!(matches!(
                HealthTimeouts::from_metadata(&metadata, HealthTimeouts::default()),
                Err(Error::Invalid {
                    field: "metadata",
                    ..
                })
            ));
        }
    }

    #[test]
    fn weights_outside_the_nacos_range_are_refused() {
        for bad in [-1.0, 10_000.5, f64::NAN, f64::INFINITY] {
            assert!(check_weight(bad).is_err(), "{bad}");
        }
        assert!(check_weight(0.0).is_ok());
        assert!(check_weight(MAX_WEIGHT).is_ok());
    }

    #[test]
    fn metadata_limits_name_the_field() {
        let limits = Limits {
            max_metadata_value_bytes: 4,
            ..Limits::default()
        };
        let metadata: Metadata = [("k".to_owned(), "12345".to_owned())].into();
        assert!(matches!(
            limits.check_metadata(&metadata),
            Err(Error::Invalid {
                field: "metadata",
                ..
            })
        ));
    }

    #[test]
    fn a_snapshot_that_stored_every_id_restores_generated_ones_as_generated() {
        let mut reg = Registry::new(RegistryOptions::default());
        let orders = ServiceKey::parse("", "g", "orders").unwrap();
        let spec = InstanceSpec::new("10.0.0.1", 80);
        let owner = Owner::Beat {
            ip: "10.0.0.1".into(),
            port: 80,
        };
        let op = Op::Register {
            service: orders.clone(),
            owner,
            instances: vec![spec],
        };
        reg.apply(&Command::new(0, op)).unwrap();
        // Snapshots used to hold every instance's id, as a given one.
        let mut old = reg.snapshot();
        let service = Arc::make_mut(&mut old.services[0]);
        for instance in service.instances.values_mut() {
            let instance = Arc::make_mut(instance);
            instance.rare = Rare::new(Some("10.0.0.1#80#DEFAULT#g@@orders".into()), NACOS_TIMEOUTS);
        }
        let old: RegistrySnapshot =
            postcard::from_bytes(&postcard::to_allocvec(&old).unwrap()).unwrap();
        let read = old.services[0].instances().next().unwrap();
        assert_eq!(
            read.given_instance_id(),
            Some("10.0.0.1#80#DEFAULT#g@@orders")
        );

        let restored = Registry::restore(old, RegistryOptions::default());
        let service = restored.service(&orders).unwrap();
        let instance = service.instances().next().unwrap();
        assert_eq!(instance.given_instance_id(), None, "restored as generated");
        assert_eq!(
            instance.instance_id(&orders),
            "10.0.0.1#80#DEFAULT#g@@orders"
        );
    }
}
