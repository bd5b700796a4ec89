//! The core's error type: why a command was refused or a name was rejected.
//! Every variant is something the caller can act on; the core has no I/O and
//! so no "this node is broken" errors.

use thiserror::Error;

/// Why the registry refused a command or a value.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Error {
    /// A field failed validation. `field` is the Nacos parameter name.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The Nacos name of the offending field (`serviceName`, `port`, ...).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A user, role or permission does not exist.
    #[error("{what} '{name}' not found")]
    NotFound {
        /// What was looked for (`user`, `role`, `permission`).
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// The service does not exist.
    #[error("service not found, namespace: {namespace}, serviceName: {service}")]
    ServiceNotFound {
        /// Namespace id.
        namespace: String,
        /// Grouped service name (`group@@service`).
        service: String,
    },
    /// The service exists already (explicit creation).
    #[error("specified service {service} already exists!")]
    ServiceExists {
        /// Grouped service name.
        service: String,
    },
    /// The service still has instances.
    #[error("Service {service} is not empty, can't be delete. Please unregister instance first")]
    ServiceNotEmpty {
        /// Grouped service name.
        service: String,
    },
    /// Ephemeral and persistent instances never mix in one service.
    /// (Worded as Nacos words it, prefix and trailing space included.)
    #[error(
        "errCode: 400, errMsg: Current service {service} is {existing} service, can't register {requested} instance. "
    )]
    KindMismatch {
        /// Grouped service name.
        service: String,
        /// The kind fixed at the service's creation.
        existing: crate::kind::ServiceKind,
        /// The kind the command asked for.
        requested: crate::kind::ServiceKind,
    },
    /// The instance does not exist.
    #[error("no matched ip found! ip: {ip}, port: {port}, service: {service}")]
    InstanceNotFound {
        /// Grouped service name.
        service: String,
        /// Instance ip.
        ip: String,
        /// Instance port.
        port: u16,
    },
    /// The namespace exists already (explicit creation).
    #[error("namespaceId [{namespace}] already exist.")]
    NamespaceExists {
        /// Namespace id.
        namespace: String,
    },
    /// The namespace was never created explicitly.
    #[error("namespace {namespace} does not exist")]
    NamespaceNotFound {
        /// Namespace id.
        namespace: String,
    },
    /// The namespace still holds services.
    #[error("namespace {namespace} still has {services} services and configs")]
    NamespaceNotEmpty {
        /// Namespace id.
        namespace: String,
        /// How many services and configs it still holds.
        services: usize,
    },
    /// The lock is held by someone and has not expired.
    #[error("lock '{key}' is held until {until}")]
    LockHeld {
        /// Its key.
        key: String,
        /// When it expires, epoch ms.
        until: u64,
    },
    /// The lock is not held.
    #[error("lock '{key}' is not held")]
    LockNotHeld {
        /// Its key.
        key: String,
    },
    /// A compare-and-set publish found another md5.
    #[error("Cas publish fail, server md5 may have changed. dataId: {data_id}, group: {group}")]
    CasMismatch {
        /// Data id.
        data_id: String,
        /// Group.
        group: String,
    },
    /// A configured limit would be exceeded; the command changed nothing.
    #[error("{what}: over the limit of {max} ({setting})")]
    OverLimit {
        /// The setting that holds the limit (`max_instances_per_service`, ...).
        setting: &'static str,
        /// The limit.
        max: usize,
        /// What would have exceeded it.
        what: String,
    },
    /// The change log no longer holds the revisions asked for: take a snapshot.
    #[error("history from revision {requested} is compacted; the oldest kept is {oldest}")]
    HistoryCompacted {
        /// The revision asked for.
        requested: u64,
        /// The oldest revision still in the log.
        oldest: u64,
    },
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            field,
            reason: reason.into(),
        }
    }
}
