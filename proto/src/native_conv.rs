//! Conversions between the core's types and the native API's messages.

use understudy_core::{Instance, RemovalCause, ServiceKey};

use crate::native;

impl From<&ServiceKey> for native::ServiceRef {
    fn from(key: &ServiceKey) -> Self {
        Self {
            namespace: key.namespace.to_string(),
            group: key.group.to_string(),
            name: key.name.to_string(),
        }
    }
}

impl native::Instance {
    /// The native form of `i`, an instance of `service`.
    pub fn of(service: &ServiceKey, i: &Instance) -> Self {
        Self {
            instance_id: i.instance_id(service).into_owned(),
            ip: i.ip.to_string(),
            port: u32::from(i.port),
            weight: i.weight,
            healthy: i.healthy,
            enabled: i.enabled,
            ephemeral: i.kind.is_ephemeral(),
            cluster: i.cluster.to_string(),
            zone: i.zone().to_owned(),
            metadata: i
                .metadata
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }
}

impl From<RemovalCause> for native::RemovalCause {
    fn from(cause: RemovalCause) -> Self {
        match cause {
            RemovalCause::Deregistered => native::RemovalCause::Deregistered,
            RemovalCause::Expired => native::RemovalCause::Expired,
            RemovalCause::OwnerLost => native::RemovalCause::OwnerLost,
            RemovalCause::ConnectionClosed => native::RemovalCause::ConnectionClosed,
            RemovalCause::Replaced => native::RemovalCause::Replaced,
        }
    }
}

impl TryFrom<&native::ServiceRef> for ServiceKey {
    type Error = crate::DecodeError;

    fn try_from(service: &native::ServiceRef) -> Result<Self, Self::Error> {
        ServiceKey::parse(&service.namespace, &service.group, &service.name).map_err(Into::into)
    }
}
