//! Nacos 3 gRPC bodies that 2.x did not have, carried in the same
//! [`crate::nacos_rpc`] envelope: fuzzy watch (the request, the initial
//! and diff syncs, the change notices) and the ability names a server
//! announces in its `SetupAckRequest`.

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
/// `changedType`, as in Nacos).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFuzzyWatchChange {
    pub group_key: String,
    pub change_type: &'static str,
    pub sync_type: &'static str,
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
