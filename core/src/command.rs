//! Commands: every mutation of the registry as a value. A command carries
//! the time it was issued (the leader's clock once replicated), so applying
//! it never reads a clock and every replica reaches the same state.

use serde::{Deserialize, Serialize};

use crate::{
    ConfigKey, ConfigSource, ConfigSpec, GrayRule, InstanceKey, InstancePatch, InstanceSpec,
    Millis, NamespaceId, Owner, ServiceKey, ServiceKind, ServiceMeta, ServiceMetaPatch,
};

/// A mutation and the time it was issued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// When it was issued, epoch ms.
    pub at: Millis,
    /// What to do.
    pub op: Op,
}

impl Command {
    /// A command issued at `at`.
    pub fn new(at: Millis, op: Op) -> Self {
        Self { at, op }
    }
}

/// Why instances left a service. Subscribers see it on removals, so an
/// update that empties a service says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemovalCause {
    /// The owner deregistered it.
    Deregistered,
    /// Its beats stopped for longer than the delete timeout.
    Expired,
    /// Its owner node left or was cut off longer than the grace period.
    OwnerLost,
    /// The connection that registered it closed.
    ConnectionClosed,
    /// The owner re-registered the service without it.
    Replaced,
}

/// Who decided a health change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthSource {
    /// The liveness rules (beats or their absence) for an instance held by
    /// `owner`; ignored if the instance changed owner meanwhile.
    Liveness {
        /// The owner the decision was made for.
        owner: Owner,
    },
    /// An operator (`PUT /ns/health/instance`); persistent instances only.
    Operator,
    /// A server-side probe of a persistent instance; ignored if the
    /// instance left or became ephemeral meanwhile.
    Probe,
}

/// How an instance update finds its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpdateMode {
    /// Nacos `PUT /instance`: stored as an overlay on the service, applied
    /// now and to later registrations of that instance.
    Overlay,
    /// Nacos `PATCH /instance`: the instance must exist.
    Existing,
}

/// The mutations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Replace `owner`'s entry in `service` with `instances` (one, or a
    /// batch; an empty batch deregisters). Creates the service if needed.
    Register {
        /// The service.
        service: ServiceKey,
        /// The publishing owner.
        owner: Owner,
        /// The owner's complete entry for the service.
        instances: Vec<InstanceSpec>,
    },
    /// Remove `owner`'s whole entry in `service`.
    Deregister {
        /// The service.
        service: ServiceKey,
        /// The owner.
        owner: Owner,
    },
    /// Remove everything `owner` published, in every service.
    RemoveOwner {
        /// The owner.
        owner: Owner,
        /// Why (connection closed, owner lost).
        cause: RemovalCause,
    },
    /// Change an instance's weight, enabled flag or metadata.
    UpdateInstance {
        /// The service.
        service: ServiceKey,
        /// The instance.
        key: InstanceKey,
        /// The change.
        patch: InstancePatch,
        /// Overlay or existing-only.
        mode: UpdateMode,
    },
    /// Set an instance's healthy flag.
    SetHealth {
        /// The service.
        service: ServiceKey,
        /// The instance.
        key: InstanceKey,
        /// New flag.
        healthy: bool,
        /// Who decided.
        source: HealthSource,
    },
    /// Remove an instance whose beats stopped, if `owner` still owns it.
    Expire {
        /// The service.
        service: ServiceKey,
        /// The instance.
        key: InstanceKey,
        /// The owner the expiry was decided for.
        owner: Owner,
    },
    /// Create a service through the service API.
    CreateService {
        /// The service.
        service: ServiceKey,
        /// Ephemeral or persistent.
        kind: ServiceKind,
        /// Its metadata.
        meta: ServiceMeta,
    },
    /// Change a service's metadata.
    UpdateService {
        /// The service.
        service: ServiceKey,
        /// The change.
        patch: ServiceMetaPatch,
    },
    /// Delete an empty service.
    DeleteService {
        /// The service.
        service: ServiceKey,
    },
    /// Remove implicitly created services that have been empty for the
    /// configured time as of the command's timestamp.
    PurgeEmptyServices,
    /// Create a namespace explicitly.
    CreateNamespace {
        /// Its id.
        namespace: NamespaceId,
        /// Display name.
        name: String,
        /// Description.
        description: String,
    },
    /// Rename or re-describe an explicitly created namespace.
    UpdateNamespace {
        /// Its id.
        namespace: NamespaceId,
        /// Display name.
        name: String,
        /// Description.
        description: String,
    },
    /// Delete an explicitly created namespace that holds no services.
    DeleteNamespace {
        /// Its id.
        namespace: NamespaceId,
    },
    /// Publish a config item (insert or overwrite).
    PublishConfig {
        /// Its key.
        key: ConfigKey,
        /// What to store.
        spec: ConfigSpec,
        /// Compare-and-set: when the item exists, publish only if its md5
        /// is this one. Ignored when the item does not exist.
        cas_md5: Option<String>,
    },
    /// Remove a config item (a no-op when absent).
    RemoveConfig {
        /// Its key.
        key: ConfigKey,
    },
    /// The leader has not heard from node `node` for longer than the owner
    /// grace period: everything its connections own is removed (cause
    /// [`RemovalCause::OwnerLost`]) and the node is marked lost until
    /// [`Op::NodeBack`]. Instances that moved to another owner in time
    /// are no longer its own and stay.
    NodeLost {
        /// The node.
        node: u64,
    },
    /// A node marked lost answers the leader again.
    NodeBack {
        /// The node.
        node: u64,
    },
    /// Publish a config item, as [`Op::PublishConfig`], recording who did
    /// (kept in its history and as its creator).
    PublishConfigFrom {
        /// Its key.
        key: ConfigKey,
        /// What to store.
        spec: ConfigSpec,
        /// Compare-and-set, as in [`Op::PublishConfig`].
        cas_md5: Option<String>,
        /// Who publishes it.
        source: ConfigSource,
    },
    /// Remove a config item, as [`Op::RemoveConfig`], recording who did.
    RemoveConfigFrom {
        /// Its key.
        key: ConfigKey,
        /// Who removes it.
        source: ConfigSource,
    },
    /// Publish a gray release of a config: clients its rule takes get
    /// `spec` instead of the formal content. Replaces the release of the
    /// same name (`beta`, `tag_<tag>`).
    PublishConfigGray {
        /// The config.
        key: ConfigKey,
        /// Who gets it.
        rule: GrayRule,
        /// What they get.
        spec: ConfigSpec,
        /// Who publishes it.
        source: ConfigSource,
    },
    /// Stop a gray release: its clients get the formal content again (a
    /// no-op when there is no release of that name).
    RemoveConfigGray {
        /// The config.
        key: ConfigKey,
        /// The release's name.
        name: String,
        /// Who stops it.
        source: ConfigSource,
    },
    /// Create a user (the adapter hashes the password).
    CreateUser {
        /// The name.
        name: String,
        /// The password's bcrypt hash.
        password_hash: String,
    },
    /// Create the first admin: a user bound to `ROLE_ADMIN`, refused
    /// when any user holds that role.
    CreateInitialAdmin {
        /// The name.
        name: String,
        /// The password's bcrypt hash.
        password_hash: String,
    },
    /// Change a user's password.
    SetPassword {
        /// The name.
        name: String,
        /// The new password's bcrypt hash.
        password_hash: String,
    },
    /// Delete a user, with its role bindings.
    DeleteUser {
        /// The name.
        name: String,
    },
    /// Give a user a role.
    BindRole {
        /// The role.
        role: String,
        /// The user.
        user: String,
    },
    /// Take a role from one user, or from everyone (`user` `None`), with
    /// the role's permissions once nobody holds it.
    UnbindRole {
        /// The role.
        role: String,
        /// The user.
        user: Option<String>,
    },
    /// Grant a role a permission.
    Grant {
        /// The permission.
        permission: crate::access::Permission,
    },
    /// Revoke a permission (a no-op when not granted).
    Revoke {
        /// The permission.
        permission: crate::access::Permission,
    },
    /// Remove metadata keys from an existing instance, and from what
    /// operators laid over it (the opposite of an [`Op::UpdateInstance`]
    /// that sets them). Variants are only ever added at the end: the raft
    /// log holds them by position.
    RemoveInstanceMetadata {
        /// The service.
        service: ServiceKey,
        /// The instance.
        key: InstanceKey,
        /// The metadata keys to remove.
        keys: Vec<String>,
    },
    /// Take a lock for `ttl` ms from the command's timestamp (the
    /// leader's clock), unless it is held and not yet expired.
    AcquireLock {
        /// Its type (`NACOS_LOCK`).
        kind: String,
        /// Its key.
        key: String,
        /// How long it is held unless released, ms.
        ttl: Millis,
    },
    /// Release a held lock.
    ReleaseLock {
        /// Its type.
        kind: String,
        /// Its key.
        key: String,
    },
    /// Publish and remove config items as one write: when an item of
    /// `expect` is not as expected, or one of `publish` cannot be stored,
    /// nothing is written. What a registry kept as several items (an MCP
    /// server, an agent) changes whole or not at all.
    WriteConfigs {
        /// Items that must be as given: of that md5, or absent (`None`).
        expect: Vec<(ConfigKey, Option<String>)>,
        /// Items to publish (insert or overwrite).
        publish: Vec<(ConfigKey, ConfigSpec)>,
        /// Items to remove (absent ones are no-ops).
        remove: Vec<ConfigKey>,
    },
}

impl Op {
    /// A publish of `spec` as `key`: a gray release under `gray`'s rule,
    /// else the formal config (compared with `cas_md5` when given).
    pub fn publish_config(
        key: ConfigKey,
        spec: ConfigSpec,
        cas_md5: Option<String>,
        source: ConfigSource,
        gray: Option<GrayRule>,
    ) -> Op {
        match gray {
            Some(rule) => Op::PublishConfigGray {
                key,
                rule,
                spec,
                source,
            },
            None => Op::PublishConfigFrom {
                key,
                spec,
                cas_md5,
                source,
            },
        }
    }

    /// Whether this mutation only removes or demotes (deregistrations,
    /// expiry, health changes): such commands go ahead of registrations so
    /// that a flood of registrations never delays a removal.
    pub fn is_urgent(&self) -> bool {
        matches!(
            self,
            Op::Deregister { .. }
                | Op::RemoveOwner { .. }
                | Op::SetHealth { .. }
                | Op::Expire { .. }
                | Op::PurgeEmptyServices
                | Op::NodeLost { .. }
        )
    }
}
