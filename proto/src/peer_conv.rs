//! Conversions between the core's types and the peer service's messages.

use understudy_core::{BeatOutcome, ClusterName, InstanceKey, LiveKey, ServiceKey};

use crate::peer;

impl peer::BeatRequest {
    /// The beat of `key`, from node `from` to node `to`.
    pub fn of(from: u64, to: u64, key: &LiveKey) -> Self {
        Self {
            route: Some(peer::Route { from, to }),
            namespace: key.service.namespace.to_string(),
            group: key.service.group.to_string(),
            service: key.service.name.to_string(),
            ip: key.instance.ip.clone(),
            port: u32::from(key.instance.port),
            cluster: key.instance.cluster.to_string(),
        }
    }

    /// The instance beaten.
    pub fn key(&self) -> Result<LiveKey, crate::DecodeError> {
        let service = ServiceKey::parse(&self.namespace, &self.group, &self.service)?;
        let port = u16::try_from(self.port).map_err(|_| {
            crate::DecodeError::new("port", format!("{} is beyond 65535", self.port))
        })?;
        Ok(LiveKey {
            service,
            instance: InstanceKey {
                ip: self.ip.clone(),
                port,
                cluster: ClusterName::parse(&self.cluster)?,
            },
        })
    }
}

impl From<BeatOutcome> for peer::BeatOutcome {
    fn from(outcome: BeatOutcome) -> Self {
        match outcome {
            BeatOutcome::Unknown => peer::BeatOutcome::Unknown,
            BeatOutcome::Alive => peer::BeatOutcome::Alive,
            BeatOutcome::Revived => peer::BeatOutcome::Revived,
        }
    }
}

impl TryFrom<peer::BeatOutcome> for BeatOutcome {
    type Error = crate::DecodeError;

    fn try_from(outcome: peer::BeatOutcome) -> Result<Self, Self::Error> {
        match outcome {
            peer::BeatOutcome::Unknown => Ok(BeatOutcome::Unknown),
            peer::BeatOutcome::Alive => Ok(BeatOutcome::Alive),
            peer::BeatOutcome::Revived => Ok(BeatOutcome::Revived),
            peer::BeatOutcome::Unspecified => Err(crate::DecodeError::new(
                "outcome",
                "a beat answer names no outcome",
            )),
        }
    }
}
