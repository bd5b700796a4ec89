//! Nacos 3 gRPC bodies that 2.x did not have, carried in the same
//! [`crate::nacos_rpc`] envelope: fuzzy watch (the request, the initial
//! and diff syncs, the change notices), locks, and the ability names a
//! server announces in its `SetupAckRequest`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use understudy_core::GroupKeyPattern;

use crate::DecodeError;

/// Ability names of Nacos 3's `SetupAckRequest` table.
pub mod ability {
    /// Persistent instances over gRPC (`PersistentInstanceRequest`).
    pub const PERSISTENT_INSTANCE_BY_GRPC: &str = "supportPersistentInstanceByGrpc";
    /// Fuzzy watch of services and configs.
    pub const FUZZY_WATCH: &str = "fuzzyWatch";
    /// Distributed locks.
    pub const LOCK: &str = "lock";
    /// The MCP server registry.
    pub const MCP: &str = "mcp";
    /// The A2A agent registry.
    pub const AGENT: &str = "agent";
}

/// Error code: the client watches as many patterns as it may.
pub const FUZZY_WATCH_PATTERN_OVER_LIMIT: i32 = 50310;
/// Error code: a pattern matches more than its limit; the rest are not
/// reported.
pub const FUZZY_WATCH_PATTERN_MATCH_COUNT_OVER_LIMIT: i32 = 50311;

/// `watchType` of a fuzzy watch request that starts (or re-syncs) one.
pub const WATCH: &str = "WATCH";
/// `watchType` of a fuzzy watch request that ends one.
pub const CANCEL_WATCH: &str = "CANCEL_WATCH";

/// `syncType` of the batches of a watch's first sync.
pub const FUZZY_WATCH_INIT_NOTIFY: &str = "FUZZY_WATCH_INIT_NOTIFY";
/// `syncType` of the message that ends a watch's first sync.
pub const FINISH_FUZZY_WATCH_INIT_NOTIFY: &str = "FINISH_FUZZY_WATCH_INIT_NOTIFY";
/// `syncType` of the batches of a later sync (the client re-sent its set).
pub const FUZZY_WATCH_DIFF_SYNC_NOTIFY: &str = "FUZZY_WATCH_DIFF_SYNC_NOTIFY";
/// `syncType` of a change notice.
pub const FUZZY_WATCH_RESOURCE_CHANGED: &str = "FUZZY_WATCH_RESOURCE_CHANGED";

/// `NamingFuzzyWatchRequest` and `ConfigFuzzyWatchRequest`: the pattern,
/// what the client already holds of it, and whether this is its first
/// sync. Java's `isInitializing` field is written `initializing` by its
/// getter; both spellings are read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FuzzyWatchRequest {
    pub namespace: Option<String>,
    pub group_key_pattern: Option<String>,
    pub received_group_keys: Option<BTreeSet<String>>,
    pub watch_type: Option<String>,
    #[serde(alias = "isInitializing")]
    pub initializing: bool,
}

impl FuzzyWatchRequest {
    /// The pattern, parsed.
    pub fn pattern(&self) -> Result<GroupKeyPattern, DecodeError> {
        let raw = self
            .group_key_pattern
            .as_deref()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| DecodeError::new("groupKeyPattern", "is required"))?;
        Ok(GroupKeyPattern::parse(raw)?)
    }

    /// Whether it ends the watch (`CANCEL_WATCH`) rather than starting or
    /// syncing it (`WATCH`, the default).
    pub fn cancels(&self) -> Result<bool, DecodeError> {
        match self.watch_type.as_deref().unwrap_or(WATCH) {
            WATCH => Ok(false),
            CANCEL_WATCH => Ok(true),
            other => Err(DecodeError::new(
                "watchType",
                format!("'{other}' is neither {WATCH} nor {CANCEL_WATCH}"),
            )),
        }
    }
}

/// One entry of a sync: a service key (`ns@@group@@name`) or a config
/// group key (`dataId+group+tenant`) and whether it was added or deleted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamingSyncContext {
    pub service_key: String,
    pub changed_type: &'static str,
}

/// One entry of a config sync.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSyncContext {
    pub group_key: String,
    pub changed_type: &'static str,
}

/// `NamingFuzzyWatchSyncRequest` and `ConfigFuzzyWatchSyncRequest` (with
/// their context types): one batch of a sync.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FuzzyWatchSync<C> {
    pub group_key_pattern: String,
    pub contexts: Vec<C>,
    pub sync_type: &'static str,
    pub total_batch: usize,
    pub current_batch: usize,
}

/// `NamingFuzzyWatchChangeNotifyRequest`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamingFuzzyWatchChange {
    pub service_key: String,
    pub changed_type: &'static str,
    pub sync_type: &'static str,
}

/// `ConfigFuzzyWatchChangeNotifyRequest` (its field is `changeType`, not
/// `changedType`, and it has no `syncType`, as in Nacos).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFuzzyWatchChange {
    pub group_key: String,
    pub change_type: &'static str,
}

/// `ConfigFuzzyWatchChangeNotifyRequest`'s `changeType` for a config that
/// exists after the change: Nacos 3 cannot tell a new one from a changed
/// one there, so it says `CONFIG_CHANGED` of both.
pub const CONFIG_CHANGED: &str = "CONFIG_CHANGED";

/// The `ConfigFuzzyWatchSyncRequest` that ends a watch's first sync: Nacos
/// leaves out its empty `contexts` (its naming twin keeps them).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFuzzyWatchFinish {
    pub group_key_pattern: String,
    pub sync_type: &'static str,
    pub total_batch: usize,
    pub current_batch: usize,
}

/// The only lock type Nacos serves.
pub const NACOS_LOCK: &str = "NACOS_LOCK";
/// How long a lock is held when the request gives no (or a negative)
/// `expiredTime`, ms (Nacos' `nacos.lock.default_expire_time`).
pub const LOCK_DEFAULT_TTL_MS: u64 = 30_000;
/// The longest a lock is held, ms (Nacos' `nacos.lock.max_expire_time`).
pub const LOCK_MAX_TTL_MS: u64 = 1_800_000;

/// `LockOperationRequest` (module `lock`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LockOperationRequest {
    pub lock_instance: Option<LockInstance>,
    pub lock_operation_enum: Option<String>,
}

/// `LockInstance`: the lock's key, type, and how long to hold it (ms).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LockInstance {
    pub key: Option<String>,
    pub expired_time: Option<i64>,
    pub lock_type: Option<String>,
    pub params: Option<serde_json::Value>,
}

/// What a lock request asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockOperation {
    /// Take the lock for `ttl` ms.
    Acquire {
        /// Its type.
        kind: String,
        /// Its key.
        key: String,
        /// How long, ms.
        ttl: u64,
    },
    /// Release it.
    Release {
        /// Its type.
        kind: String,
        /// Its key.
        key: String,
    },
}

impl LockOperationRequest {
    /// The operation, checked: a key, the `NACOS_LOCK` type (the default),
    /// `ACQUIRE` (its time defaulted and capped as Nacos does) or
    /// `RELEASE`.
    pub fn operation(&self) -> Result<LockOperation, DecodeError> {
        let instance = self
            .lock_instance
            .as_ref()
            .ok_or_else(|| DecodeError::new("lockInstance", "is required"))?;
        let key = instance
            .key
            .clone()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| DecodeError::new("lockInstance.key", "is required"))?;
        let kind = instance
            .lock_type
            .clone()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| NACOS_LOCK.to_owned());
        if kind != NACOS_LOCK {
            return Err(DecodeError::new(
                "lockInstance.lockType",
                format!("'{kind}' is not a lock type; the one served is {NACOS_LOCK}"),
            ));
        }
        match self.lock_operation_enum.as_deref() {
            Some("ACQUIRE") => {
                let ttl = match instance.expired_time {
                    Some(ms) if ms >= 0 => (ms as u64).min(LOCK_MAX_TTL_MS),
                    _ => LOCK_DEFAULT_TTL_MS,
                };
                Ok(LockOperation::Acquire { kind, key, ttl })
            }
            Some("RELEASE") => Ok(LockOperation::Release { kind, key }),
            other => Err(DecodeError::new(
                "lockOperationEnum",
                format!(
                    "'{}' is neither ACQUIRE nor RELEASE (there is no handler of such operations)",
                    other.unwrap_or("")
                ),
            )),
        }
    }
}

/// `LockOperationResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockOperationBody {
    pub result: bool,
}

/// A service's key in fuzzy-watch messages: `namespace@@group@@name`.
pub fn service_key(namespace: &str, group: &str, name: &str) -> String {
    format!("{namespace}@@{group}@@{name}")
}

/// A config's group key in fuzzy-watch messages: `dataId+group+tenant`,
/// with `+` and `%` in each part escaped as `%2B` and `%25`.
pub fn config_group_key(data_id: &str, group: &str, tenant: &str) -> String {
    let escape = |part: &str| part.replace('%', "%25").replace('+', "%2B");
    let mut key = format!("{}+{}", escape(data_id), escape(group));
    if !tenant.is_empty() {
        key.push('+');
        key.push_str(&escape(tenant));
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_keys_escape_their_separator() {
        assert_eq!(config_group_key("a+b", "g%", "ns"), "a%2Bb+g%25+ns");
        assert_eq!(
            config_group_key("app", "DEFAULT_GROUP", ""),
            "app+DEFAULT_GROUP"
        );
        assert_eq!(service_key("public", "g", "s"), "public@@g@@s");
    }

    #[test]
    fn both_spellings_of_initializing_are_read() {
        for raw in [r#"{"initializing":true}"#, r#"{"isInitializing":true}"#] {
            let request: FuzzyWatchRequest = serde_json::from_str(raw).unwrap();
            assert!(request.initializing, "{raw}");
        }
    }
}
