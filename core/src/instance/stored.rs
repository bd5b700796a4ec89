//! An instance as snapshots and raft entries hold it: the shape it had
//! when every field was stored, so data written before the instance id and
//! zone were derived reads the same.

use serde::{Deserialize, Serialize};

use super::{span_at, HealthTimeouts, Instance, Rare, ZoneAt};
use crate::kind::ServiceKind;
use crate::{ClusterName, Metadata, Owner};

/// An instance as snapshots write it: the shape it had when every field
/// was stored, with `instance_id` empty where it is the generated one.
#[derive(Serialize)]
#[serde(rename = "Instance")]
struct InstanceOut<'a> {
    instance_id: &'a str,
    ip: &'a str,
    port: u16,
    weight: f64,
    healthy: bool,
    enabled: bool,
    kind: ServiceKind,
    cluster: &'a ClusterName,
    metadata: &'a Metadata,
    zone: &'a str,
    timeouts: HealthTimeouts,
    owner: &'a Owner,
}

/// An instance as snapshots hold it ([`InstanceOut`]).
#[derive(Deserialize)]
#[serde(rename = "Instance")]
struct InstanceIn {
    instance_id: String,
    ip: ecow::EcoString,
    port: u16,
    weight: f64,
    healthy: bool,
    enabled: bool,
    kind: ServiceKind,
    cluster: ClusterName,
    metadata: Metadata,
    zone: String,
    timeouts: HealthTimeouts,
    owner: Owner,
}

impl Serialize for Instance {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        InstanceOut {
            instance_id: self.rare.instance_id().unwrap_or_default(),
            ip: &self.ip,
            port: self.port,
            weight: self.weight,
            healthy: self.healthy,
            enabled: self.enabled,
            kind: self.kind,
            cluster: &self.cluster,
            metadata: &self.metadata,
            zone: self.zone(),
            timeouts: self.timeouts(),
            owner: &self.owner,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Instance {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = InstanceIn::deserialize(deserializer)?;
        let instance_id = (!stored.instance_id.is_empty()).then(|| stored.instance_id.into());
        let zone = if stored.zone == stored.cluster.as_str() {
            ZoneAt::default()
        } else {
            // The zone was read off the metadata when the instance was
            // built or its metadata changed, so its value is there.
            stored
                .metadata
                .span_of_value(&stored.zone)
                .and_then(span_at)
                .unwrap_or_default()
        };
        Ok(Self {
            ip: stored.ip,
            port: stored.port,
            weight: stored.weight,
            healthy: stored.healthy,
            enabled: stored.enabled,
            kind: stored.kind,
            cluster: stored.cluster,
            metadata: stored.metadata,
            zone,
            rare: Rare::new(instance_id, stored.timeouts),
            owner: stored.owner,
        })
    }
}
