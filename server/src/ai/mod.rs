//! Nacos 3's AI registry: MCP servers ([`mcp`]) and A2A agents
//! ([`a2a`]), kept as Nacos keeps them: on the replicated config and
//! naming state, so they replicate, snapshot, survive restarts and are
//! watched like everything else.
//!
//! These modules plan writes and read the registry: no I/O; the gRPC and
//! HTTP adapters propose what they plan and render what they read.

pub(crate) mod a2a;
pub(crate) mod mcp;

use understudy_core::{ConfigKey, ConfigSpec, Millis};

/// Why an AI registry request cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AiError {
    /// A field is missing or malformed.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The Nacos name of the field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// No such server or agent.
    #[error("{0}")]
    NotFound(String),
    /// The server or agent has no such version.
    #[error("{0}")]
    VersionNotFound(String),
    /// It exists already.
    #[error("{0}")]
    Conflict(String),
}

impl AiError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        AiError::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// Nacos' error code for it, as a gRPC answer carries it.
    pub(crate) fn code(&self) -> i32 {
        match self {
            AiError::Invalid { .. } => 400,
            AiError::NotFound(_) | AiError::VersionNotFound(_) => 404,
            AiError::Conflict(_) => 409,
        }
    }
}

/// The namespace a request names; blank is `public`.
pub(crate) fn namespace(raw: Option<&str>) -> String {
    match raw.map(str::trim) {
        None | Some("") => understudy_core::DEFAULT_NAMESPACE.to_owned(),
        Some(ns) => ns.to_owned(),
    }
}

/// Whether a list that asks for `wanted` shows `name`: every name when it
/// asks for none; names containing it (`blur`, `*` around it ignored), or
/// that name alone.
fn listed(name: &str, wanted: Option<&str>, blur: bool) -> bool {
    match wanted
        .filter(|w| !w.is_empty())
        .map(|w| w.trim_matches('*'))
    {
        None => true,
        Some(w) if blur => name.contains(w),
        Some(w) => name == w,
    }
}

/// The config key of an item the registry stores; a name the key cannot
/// hold is a bad `field`.
fn config_key(
    namespace: &str,
    group: &str,
    data_id: &str,
    field: &'static str,
) -> Result<ConfigKey, AiError> {
    ConfigKey::parse(namespace, group, data_id).map_err(|e| AiError::invalid(field, e.to_string()))
}

/// A JSON config item tagged as Nacos tags the registry's items.
fn json_config(tags: &str, content: String) -> ConfigSpec {
    ConfigSpec {
        content,
        kind: "json".to_owned(),
        app_name: String::new(),
        desc: String::new(),
        tags: tags.to_owned(),
        encrypted_data_key: String::new(),
    }
}

/// A release time as Nacos writes one: RFC 3339 to the second, UTC.
fn release_date(now: Millis) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(now);
    humantime::format_rfc3339_seconds(at).to_string()
}
