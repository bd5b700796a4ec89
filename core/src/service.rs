//! A service and its instances, as an immutable value behind an `Arc`: the
//! registry swaps in a new value on every change, so a reader holding one
//! has a consistent view for free. Instance selection (cluster filter,
//! healthy-only, protect threshold) lives here, exactly as Nacos does it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{
    ClusterName, Error, Instance, InstanceKey, InstancePatch, Metadata, Millis, ServiceKey,
    ServiceKind,
};

/// A service's selector (Nacos `{"type":"none"}` or a label expression).
/// Stored and echoed; the registry does not evaluate it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// `none` or `label`.
    pub kind: String,
    /// The label expression, empty for `none`.
    pub expression: String,
}

impl Default for Selector {
    fn default() -> Self {
        Self {
            kind: "none".to_owned(),
            expression: String::new(),
        }
    }
}

/// What the service API sets on a service. A service created implicitly by
/// a registration has none, and then skips the protect threshold, as Nacos.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceMeta {
    /// 0 to 1: at or below this healthy ratio, unhealthy instances are
    /// served as healthy.
    pub protect_threshold: f32,
    /// Service metadata.
    pub metadata: Metadata,
    /// Selector.
    pub selector: Selector,
}

impl Default for ServiceMeta {
    fn default() -> Self {
        Self {
            protect_threshold: 0.0,
            metadata: Metadata::new(),
            selector: Selector::default(),
        }
    }
}

impl ServiceMeta {
    pub(crate) fn validate(&self, limits: &crate::Limits) -> Result<(), Error> {
        check_protect_threshold(self.protect_threshold)?;
        limits.check_metadata(&self.metadata)
    }
}

/// Checks a protect threshold: finite, 0 to 1.
pub fn check_protect_threshold(threshold: f32) -> Result<(), Error> {
    if !threshold.is_finite() || !(0.0..=1.0).contains(&threshold) {
        return Err(Error::Invalid {
            field: "protectThreshold",
            reason: format!("must be between 0 and 1, got {threshold}"),
        });
    }
    Ok(())
}

/// A change to a service's metadata; absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceMetaPatch {
    /// New protect threshold.
    pub protect_threshold: Option<f32>,
    /// New metadata (replaces the old map).
    pub metadata: Option<Metadata>,
    /// New selector.
    pub selector: Option<Selector>,
}

/// One service: its kind, optional metadata and instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Service {
    pub(crate) key: ServiceKey,
    pub(crate) kind: ServiceKind,
    /// Boxed: most services (those a registration created) have none, and
    /// inline it would make every service's struct half as large again.
    pub(crate) meta: Option<Box<ServiceMeta>>,
    pub(crate) instances: crate::instances::Instances,
    /// Operator updates (`PUT /instance`) that outlive re-registration.
    pub(crate) overlays: BTreeMap<InstanceKey, InstancePatch>,
    pub(crate) revision: u64,
    /// When the last instance left; `None` while it has instances.
    pub(crate) empty_since: Option<Millis>,
}

impl Service {
    pub(crate) fn new(
        key: ServiceKey,
        kind: ServiceKind,
        meta: Option<ServiceMeta>,
        now: Millis,
    ) -> Self {
        Self {
            key,
            kind,
            meta: meta.map(Box::new),
            instances: crate::instances::Instances::default(),
            overlays: BTreeMap::new(),
            revision: 0,
            empty_since: Some(now),
        }
    }

    /// Itself without stored instance ids that are the generated ones: a
    /// snapshot written before ids were rendered when asked for holds
    /// every id.
    pub(crate) fn without_stored_generated_ids(self: Arc<Self>) -> Arc<Self> {
        let key = &self.key;
        if !self.instances.values().any(|i| i.stores_generated_id(key)) {
            return self;
        }
        let mut service = Arc::unwrap_or_clone(self);
        let key = service.key.clone();
        for instance in service.instances.values_mut() {
            if instance.stores_generated_id(&key) {
                Arc::make_mut(instance).forget_generated_id();
            }
        }
        Arc::new(service)
    }

    /// Its key.
    pub fn key(&self) -> &ServiceKey {
        &self.key
    }

    /// Ephemeral or persistent.
    pub fn kind(&self) -> ServiceKind {
        self.kind
    }

    /// Metadata set through the service API, if any.
    pub fn meta(&self) -> Option<&ServiceMeta> {
        self.meta.as_deref()
    }

    /// The revision of its last change.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// All instances, sorted by key, disabled and unhealthy ones included.
    pub fn instances(&self) -> impl ExactSizeIterator<Item = &Instance> {
        self.instances.values().map(|i| &**i)
    }

    /// One instance.
    pub fn instance(&self, key: &InstanceKey) -> Option<&Instance> {
        self.instances.get(key).map(|i| &**i)
    }

    /// The clusters that currently have instances.
    pub fn clusters(&self) -> Vec<&ClusterName> {
        let mut clusters: Vec<&ClusterName> = self.instances.values().map(|i| &i.cluster).collect();
        clusters.dedup();
        clusters
    }

    /// The enabled instances grouped by zone.
    pub fn zones(&self) -> BTreeMap<&str, Vec<&Instance>> {
        let mut zones: BTreeMap<&str, Vec<&Instance>> = BTreeMap::new();
        for instance in self.instances().filter(|i| i.enabled) {
            zones.entry(instance.zone()).or_default().push(instance);
        }
        zones
    }

    /// Selects instances as Nacos' `selectInstancesWithHealthyProtection`.
    pub fn select(&self, selection: &Selection<'_>) -> Selected {
        let candidates: Vec<&Arc<Instance>> = self
            .instances
            .values()
            .filter(|i| selection.clusters.is_empty() || selection.clusters.contains(&i.cluster))
            .filter(|i| !selection.enabled_only || i.enabled)
            .collect();
        let healthy = candidates.iter().filter(|i| i.healthy).count();
        let mut result: Vec<Arc<Instance>> = candidates
            .into_iter()
            .filter(|i| !selection.healthy_only || i.healthy)
            .cloned()
            .collect();
        let mut reach_protection_threshold = false;
        if let Some(meta) = &self.meta {
            let threshold = f64::from(meta.protect_threshold.max(0.0));
            // 0/0 is NaN, which compares false: an empty result never reaches it.
            let ratio = healthy as f64 / result.len() as f64;
            if ratio <= threshold {
                reach_protection_threshold = true;
                for instance in result.iter_mut().filter(|i| !i.healthy) {
                    Arc::make_mut(instance).healthy = true;
                }
            }
        }
        Selected {
            instances: result,
            reach_protection_threshold,
        }
    }
}

/// Which instances a query wants.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection<'a> {
    /// Only these clusters; empty means all.
    pub clusters: &'a [ClusterName],
    /// Drop unhealthy instances.
    pub healthy_only: bool,
    /// Drop disabled instances.
    pub enabled_only: bool,
}

/// The answer to a [`Selection`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selected {
    /// The selected instances, sorted by key. Shared with the registry
    /// unless the protect threshold rewrote their health.
    pub instances: Vec<Arc<Instance>>,
    /// Whether the protect threshold fired (unhealthy ones are then served
    /// as healthy).
    pub reach_protection_threshold: bool,
}

/// Selects from a service that may not exist: a missing service has no
/// instances, never an error (Dubbo's start-up probe relies on that).
pub fn select(service: Option<&Service>, selection: &Selection<'_>) -> Selected {
    service.map(|s| s.select(selection)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_and_its_reference_counts_fit_a_112_byte_block() {
        // A registry holds one per service, tens of thousands of them;
        // the service API's metadata, which most services lack, is boxed.
        assert!(
            std::mem::size_of::<Service>() <= 96,
            "{} bytes",
            std::mem::size_of::<Service>()
        );
    }
}
