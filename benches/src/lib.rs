//! understudy-benches: shared fixtures for the criterion benches, the load
//! generator ([`load`]) and the cluster-layer simulations ([`sim`]).
//!
//! The standard layout is 1000 services of 100 instances (100k in all),
//! each instance beat-owned, spread over two clusters, so that queries,
//! snapshots and expiry are measured at a realistic size.

use understudy_core::{
    Command, InstanceKey, InstanceSpec, LiveKey, Liveness, Millis, Op, Owner, Registry,
    RegistryOptions, ServiceKey,
};

/// How many services and instances per service a fixture holds.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Services.
    pub services: u32,
    /// Instances per service.
    pub per_service: u32,
}

impl Layout {
    /// Instances in all.
    pub fn instances(self) -> u32 {
        self.services * self.per_service
    }
}

/// 1000 services × 100 instances.
pub const LAYOUT: Layout = Layout {
    services: 1000,
    per_service: 100,
};

/// The key of service `i`.
pub fn service(i: u32) -> ServiceKey {
    ServiceKey::parse("", "", &format!("svc-{i:04}")).expect("a valid name")
}

fn ip(n: u32) -> String {
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

/// The beat owner of instance `n` of service `s`.
pub fn owner(n: u32, s: u32) -> Owner {
    Owner::Beat {
        ip: ip(s * 1000 + n).into(),
        port: 8080,
    }
}

fn spec(n: u32, s: u32) -> InstanceSpec {
    let mut spec = InstanceSpec::new(ip(s * 1000 + n), 8080);
    spec.cluster = understudy_core::ClusterName::parse(if n % 2 == 0 { "c0" } else { "c1" })
        .expect("a valid cluster");
    spec.metadata.insert("version".into(), "1.0".into());
    spec
}

/// Registering instance `n` of service `s`.
pub fn register_op(service_key: &ServiceKey, n: u32, s: u32) -> Op {
    Op::Register {
        service: service_key.clone(),
        owner: owner(n, s),
        instances: vec![spec(n, s)],
    }
}

/// The liveness key of instance `n` of service `s`.
pub fn live_key(s: u32, n: u32) -> LiveKey {
    let spec = spec(n, s);
    LiveKey {
        service: service(s),
        instance: InstanceKey {
            ip: spec.ip,
            port: spec.port,
            cluster: spec.cluster,
        },
    }
}

/// Registers the whole layout at time `at`, returning the changes' count.
pub fn register_all(registry: &mut Registry, at: Millis) -> usize {
    let mut changes = 0;
    for s in 0..LAYOUT.services {
        let key = service(s);
        for n in 0..LAYOUT.per_service {
            changes += registry
                .apply(&Command::new(at, register_op(&key, n, s)))
                .expect("a valid registration")
                .len();
        }
    }
    changes
}

/// A registry holding the layout and a liveness tracker following it, all
/// registered at time 0.
pub fn populated() -> (Registry, Liveness) {
    let mut registry = Registry::new(RegistryOptions::default());
    let mut liveness = Liveness::new();
    for s in 0..LAYOUT.services {
        let key = service(s);
        for n in 0..LAYOUT.per_service {
            for change in registry
                .apply(&Command::new(0, register_op(&key, n, s)))
                .expect("a valid registration")
            {
                liveness.observe(&change, 0);
            }
        }
    }
    (registry, liveness)
}

pub mod load;
pub mod sim;
