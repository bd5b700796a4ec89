//! Changes: what applying a command did, each with its revision. The same
//! values feed the change log (watch resume), the liveness tracker and, in
//! the server, pushes to subscribers.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{
    ConfigKey, Error, Instance, InstanceKey, Millis, NamespaceId, RemovalCause, ServiceKey,
    ServiceKind, ServiceMeta,
};

/// One change to the registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Its revision: one cluster-wide counter, strictly increasing.
    pub revision: u64,
    /// The timestamp of the command that made it.
    pub at: Millis,
    /// What happened.
    pub event: Event,
}

/// A saved namespace, its display name and description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespaceDetails {
    /// The namespace.
    pub namespace: NamespaceId,
    /// Display name.
    pub name: String,
    /// Description.
    pub description: String,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// An instance appeared.
    InstanceAdded {
        /// Its service.
        service: ServiceKey,
        /// The instance.
        instance: Arc<Instance>,
    },
    /// An instance changed (health, weight, metadata, owner, ...).
    InstanceChanged {
        /// Its service.
        service: ServiceKey,
        /// The instance as it is now.
        instance: Arc<Instance>,
    },
    /// An instance left.
    InstanceRemoved {
        /// Its service.
        service: ServiceKey,
        /// The instance as it was.
        instance: Arc<Instance>,
        /// Why.
        cause: RemovalCause,
    },
    /// A service appeared.
    ServiceCreated {
        /// The service.
        service: ServiceKey,
        /// Ephemeral or persistent.
        kind: ServiceKind,
        /// Metadata if created through the service API (boxed, as in
        /// [`Event::ServiceUpdated`]).
        meta: Option<Box<ServiceMeta>>,
    },
    /// A service's metadata changed.
    ServiceUpdated {
        /// The service.
        service: ServiceKey,
        /// The metadata as it is now, boxed: every event is as large as
        /// its largest kind, and the change log holds many thousands.
        meta: Box<ServiceMeta>,
    },
    /// A service was deleted or purged.
    ServiceRemoved {
        /// The service.
        service: ServiceKey,
    },
    /// A namespace was created or updated explicitly.
    NamespaceSaved {
        /// The namespace, its display name and description, boxed: every
        /// event is as large as its largest kind, and the change log
        /// holds many thousands.
        info: Box<NamespaceDetails>,
    },
    /// An explicit namespace was deleted.
    NamespaceRemoved {
        /// The namespace.
        namespace: NamespaceId,
    },
    /// A config item was published.
    ConfigPublished {
        /// Its key (boxed, as in [`Event::ConfigRemoved`]); its content
        /// and md5 are the registry's to read.
        key: Box<ConfigKey>,
        /// Whether the content changed (listeners are told only then).
        changed: bool,
    },
    /// A config item was removed.
    ConfigRemoved {
        /// Its key, boxed: every event is as large as its largest kind,
        /// and the change log holds many thousands of them.
        key: Box<ConfigKey>,
    },
}

impl Event {
    /// The service it concerns, if any.
    pub fn service(&self) -> Option<&ServiceKey> {
        match self {
            Event::InstanceAdded { service, .. }
            | Event::InstanceChanged { service, .. }
            | Event::InstanceRemoved { service, .. }
            | Event::ServiceCreated { service, .. }
            | Event::ServiceUpdated { service, .. }
            | Event::ServiceRemoved { service } => Some(service),
            Event::NamespaceSaved { .. }
            | Event::NamespaceRemoved { .. }
            | Event::ConfigPublished { .. }
            | Event::ConfigRemoved { .. } => None,
        }
    }

    /// The config item it concerns, if any.
    pub fn config(&self) -> Option<&ConfigKey> {
        match self {
            Event::ConfigPublished { key, .. } | Event::ConfigRemoved { key } => Some(key),
            _ => None,
        }
    }

    /// The namespace it concerns.
    pub fn namespace(&self) -> &NamespaceId {
        match self {
            Event::NamespaceSaved { info } => &info.namespace,
            Event::NamespaceRemoved { namespace } => namespace,
            Event::ConfigPublished { key, .. } | Event::ConfigRemoved { key } => &key.namespace,
            other => {
                &other
                    .service()
                    .expect("every other event names a service")
                    .namespace
            }
        }
    }

    /// The instance key, for instance events.
    pub fn instance_key(&self) -> Option<InstanceKey> {
        match self {
            Event::InstanceAdded { instance, .. }
            | Event::InstanceChanged { instance, .. }
            | Event::InstanceRemoved { instance, .. } => Some(instance.key()),
            _ => None,
        }
    }
}

/// The bounded log of recent changes, oldest first. It serves resume for a
/// single service and for whole namespace or group views alike.
///
/// Its revisions are consecutive, so an entry does not store its own: it
/// is the oldest's plus its position. The log holds up to its capacity
/// (100,000 by default) of them, each 32 bytes where a [`Change`] is 40.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChangeLog {
    entries: VecDeque<Logged>,
    /// The revision of the oldest entry (set by the push into an empty log).
    oldest: u64,
    capacity: usize,
}

/// A change as the log holds it: without its revision.
#[derive(Debug, Clone)]
struct Logged {
    at: Millis,
    event: Event,
}

impl ChangeLog {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::with_capacity(capacity.min(4096)),
            oldest: 0,
            capacity,
        }
    }

    pub(crate) fn push(&mut self, change: Change) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.is_empty() {
            self.oldest = change.revision;
        }
        debug_assert_eq!(
            change.revision,
            self.oldest + self.entries.len() as u64,
            "revisions in the log are consecutive"
        );
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
            self.oldest += 1;
        } else if self.entries.len() == self.entries.capacity() {
            // Grow by doubling, but never past the capacity: a full log
            // holds no room it will not use.
            let more = self
                .entries
                .len()
                .max(16)
                .min(self.capacity - self.entries.len());
            self.entries.reserve_exact(more);
        }
        self.entries.push_back(Logged {
            at: change.at,
            event: change.event,
        });
    }

    /// Every change with a revision above `after`, given that `current` is
    /// the registry's revision. Errs if any of them has left the log, or if
    /// `after` is from the future (another cluster or an earlier life).
    pub(crate) fn since(
        &self,
        after: u64,
        current: u64,
    ) -> Result<impl Iterator<Item = Change> + '_, Error> {
        let oldest = if self.entries.is_empty() {
            current + 1
        } else {
            self.oldest
        };
        if after > current || after + 1 < oldest {
            return Err(Error::HistoryCompacted {
                requested: after,
                oldest,
            });
        }
        // Revisions in the log are consecutive, so the position is arithmetic.
        let skip = usize::try_from(after + 1 - oldest)
            .unwrap_or(usize::MAX)
            .min(self.entries.len());
        Ok(self
            .entries
            .range(skip..)
            .zip(after + 1..)
            .map(|(logged, revision)| Change {
                revision,
                at: logged.at,
                event: logged.event.clone(),
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_and_instances_stay_small() {
        // The change log holds up to 100,000 of them by default: every
        // byte here is 100 kB of resident memory.
        assert_eq!(std::mem::size_of::<ServiceKey>(), 8);
        // An instance and its reference counts fit one 128-byte block.
        assert!(
            std::mem::size_of::<Instance>() <= 112,
            "{} bytes",
            std::mem::size_of::<Instance>()
        );
        assert!(
            std::mem::size_of::<Change>() <= 40,
            "{} bytes",
            std::mem::size_of::<Change>()
        );
        assert!(
            std::mem::size_of::<Logged>() <= 32,
            "{} bytes",
            std::mem::size_of::<Logged>()
        );
    }
}
