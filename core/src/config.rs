//! Config items: what the Nacos config service stores, keyed by
//! (namespace, group, dataId). Names are validated here with Nacos' rules,
//! and the content's md5 is computed here, so every adapter and replica
//! agrees on it.

use std::fmt;

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use crate::{Error, Millis, NamespaceId};

const MAX_DATA_ID_LEN: usize = 256;
const MAX_GROUP_LEN: usize = 128;
const MAX_TENANT_LEN: usize = 128;

fn config_chars(field: &'static str, raw: &str, max: usize) -> Result<(), Error> {
    if raw.trim().is_empty() {
        return Err(Error::invalid(field, "must not be blank"));
    }
    if raw.chars().count() > max {
        return Err(Error::invalid(
            field,
            format!("longer than {max} characters"),
        ));
    }
    if !raw
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
    {
        return Err(Error::invalid(
            field,
            format!("'{raw}' may hold only letters, digits and '-', '_', ':', '.'"),
        ));
    }
    Ok(())
}

/// The identity of a config item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConfigKey {
    /// Namespace (`""`, `public` and `null` are the default one).
    pub namespace: NamespaceId,
    /// Group.
    pub group: String,
    /// Data id.
    pub data_id: String,
}

impl ConfigKey {
    /// Parses a tenant, group and data id as Nacos' config service does.
    pub fn parse(tenant: &str, group: &str, data_id: &str) -> Result<Self, Error> {
        config_chars("dataId", data_id, MAX_DATA_ID_LEN)?;
        config_chars("group", group, MAX_GROUP_LEN)?;
        let tenant = tenant.trim();
        let namespace = if tenant.is_empty()
            || tenant.eq_ignore_ascii_case(crate::DEFAULT_NAMESPACE)
            || tenant.eq_ignore_ascii_case("null")
        {
            NamespaceId::public()
        } else {
            config_chars("tenant", tenant, MAX_TENANT_LEN)?;
            NamespaceId::from_config_tenant(tenant)
        };
        Ok(Self {
            namespace,
            group: group.to_owned(),
            data_id: data_id.to_owned(),
        })
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.group, self.data_id)
    }
}

/// The content types Nacos knows; anything else is `text`.
const TYPES: &[&str] = &["properties", "xml", "json", "text", "html", "yaml", "toml"];

/// What a publisher sends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigSpec {
    /// The content; must not be blank.
    pub content: String,
    /// Its type (`text` when absent or unknown).
    pub kind: String,
    /// Application name.
    pub app_name: String,
    /// Description.
    pub desc: String,
    /// Tags.
    pub tags: String,
    /// Key of encrypted content, returned verbatim.
    pub encrypted_data_key: String,
}

/// Who published or removed a config: the client's address and user, as
/// the adapter saw them (empty when unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConfigSource {
    /// The client's IP address.
    pub ip: String,
    /// The user it acted as.
    pub user: String,
}

/// A stored config item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigItem {
    /// Its id: unique in the registry, kept while the item exists (a
    /// removed and republished config gets a new one).
    pub id: u64,
    /// When it was first published, epoch ms.
    pub created: Millis,
    /// Who first published it.
    pub created_by: ConfigSource,
    /// The content.
    pub content: String,
    /// Lowercase hex MD5 of the content's UTF-8 bytes.
    pub md5: String,
    /// Its type.
    pub kind: String,
    /// When it was last published, epoch ms.
    pub last_modified: Millis,
    /// Application name.
    pub app_name: String,
    /// Description.
    pub desc: String,
    /// Tags.
    pub tags: String,
    /// Key of encrypted content.
    pub encrypted_data_key: String,
}

/// Lowercase hex MD5 of `content`'s UTF-8 bytes, as Nacos clients compute it.
pub fn content_md5(content: &str) -> String {
    let digest = Md5::digest(content.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl ConfigItem {
    /// The item `spec` describes, published at `at`, not yet given its
    /// id and origin (see the registry's publish).
    pub(crate) fn build(spec: &ConfigSpec, at: Millis, max_bytes: usize) -> Result<Self, Error> {
        if spec.content.trim().is_empty() {
            return Err(Error::invalid("content", "must not be blank"));
        }
        if spec.content.len() > max_bytes {
            return Err(Error::invalid(
                "content",
                format!(
                    "{} bytes, more than the limit of {max_bytes}",
                    spec.content.len()
                ),
            ));
        }
        let kind = if TYPES.contains(&spec.kind.as_str()) {
            spec.kind.clone()
        } else {
            "text".to_owned()
        };
        Ok(Self {
            id: 0,
            created: at,
            created_by: ConfigSource::default(),
            md5: content_md5(&spec.content),
            content: spec.content.clone(),
            kind,
            last_modified: at,
            app_name: spec.app_name.clone(),
            desc: spec.desc.clone(),
            tags: spec.tags.clone(),
            encrypted_data_key: spec.encrypted_data_key.clone(),
        })
    }
}

/// Who a gray release is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GrayRule {
    /// Clients at these addresses (Nacos' beta, `betaIps`).
    Beta {
        /// The addresses.
        ips: Vec<String>,
    },
    /// Clients that carry this tag (Nacos' `Vipserver-Tag`).
    Tag {
        /// The tag.
        tag: String,
    },
}

impl GrayRule {
    /// The rule a publish asks for, as Nacos reads it: `betaIps` (comma
    /// separated) makes a beta release, else `tag` a tag release; neither
    /// is a formal publish. A tag is at most 16 of the config name
    /// characters.
    pub fn requested(beta_ips: &str, tag: &str) -> Result<Option<Self>, Error> {
        let ips: Vec<String> = beta_ips
            .split(',')
            .map(str::trim)
            .filter(|ip| !ip.is_empty())
            .map(str::to_owned)
            .collect();
        if !ips.is_empty() {
            return Ok(Some(GrayRule::Beta { ips }));
        }
        let tag = tag.trim();
        if tag.is_empty() {
            return Ok(None);
        }
        config_chars("tag", tag, 16)?;
        Ok(Some(GrayRule::Tag {
            tag: tag.to_owned(),
        }))
    }

    /// The release's name: `beta`, or `tag_<tag>`, as Nacos names them.
    pub fn name(&self) -> String {
        match self {
            GrayRule::Beta { .. } => "beta".to_owned(),
            GrayRule::Tag { tag } => format!("tag_{tag}"),
        }
    }

    /// Nacos' priority: a beta release wins over a tag release.
    fn priority(&self) -> u32 {
        match self {
            GrayRule::Beta { .. } => 2,
            GrayRule::Tag { .. } => 1,
        }
    }

    /// Whether a client at `ip` carrying `tag` gets the release.
    pub fn matches(&self, ip: &str, tag: Option<&str>) -> bool {
        match self {
            GrayRule::Beta { ips } => ips.iter().any(|i| i == ip),
            GrayRule::Tag { tag: wanted } => tag == Some(wanted.as_str()),
        }
    }

    /// The rule as Nacos 3 writes it (`{"type":"beta","version":"1.0.0",
    /// "expr":"1.1.1.1,2.2.2.2","priority":2147483647}`).
    pub fn to_nacos_json(&self) -> String {
        let (kind, expr, priority) = match self {
            GrayRule::Beta { ips } => ("beta", ips.join(","), i32::MAX),
            GrayRule::Tag { tag } => ("tag", tag.clone(), i32::MAX - 1),
        };
        format!(
            r#"{{"type":"{kind}","version":"1.0.0","expr":"{}","priority":{priority}}}"#,
            expr.replace('\\', "\\\\").replace('"', "\\\"")
        )
    }
}

/// A gray release of a config: its rule and the content its clients get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrayRelease {
    /// Who gets it.
    pub rule: GrayRule,
    /// What they get.
    pub item: std::sync::Arc<ConfigItem>,
}

/// The release with the highest priority among `grays` whose rule takes
/// a client at `ip` carrying `tag`.
pub fn gray_for<'a>(
    grays: &'a [std::sync::Arc<GrayRelease>],
    ip: &str,
    tag: Option<&str>,
) -> Option<&'a std::sync::Arc<GrayRelease>> {
    grays
        .iter()
        .filter(|g| g.rule.matches(ip, tag))
        .max_by_key(|g| g.rule.priority())
}

/// What a history entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HistoryOp {
    /// A config was published for the first time: the entry holds what
    /// was published.
    Insert,
    /// A config was published over another: the entry holds what it
    /// replaced, as Nacos keeps it.
    Update,
    /// A config was removed: the entry holds what was removed.
    Delete,
}

impl HistoryOp {
    /// Nacos' letter for it: `I`, `U` or `D`.
    pub fn letter(self) -> &'static str {
        match self {
            HistoryOp::Insert => "I",
            HistoryOp::Update => "U",
            HistoryOp::Delete => "D",
        }
    }
}

/// One entry of a config's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Its id (Nacos' `nid`), increasing with every entry.
    pub nid: u64,
    /// The config it is about.
    pub key: ConfigKey,
    /// What happened.
    pub op: HistoryOp,
    /// The item it records (see [`HistoryOp`]), whose `id` is the
    /// config's.
    pub item: std::sync::Arc<ConfigItem>,
    /// When it happened, epoch ms (the command's timestamp).
    pub at: Millis,
    /// Who did it.
    pub source: ConfigSource,
    /// The gray release it concerns; empty for the formal config.
    pub gray_name: String,
}

/// How much config history is kept: at most `max_per_config` entries per
/// config, none older than `max_age` ms (judged by the entries' own
/// timestamps against the newest command's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRetention {
    /// Entries kept per config.
    pub max_per_config: usize,
    /// The oldest an entry may be, ms.
    pub max_age: Millis,
}

impl Default for HistoryRetention {
    /// 100 entries per config, 30 days (Nacos' `config_retention_days`).
    fn default() -> Self {
        Self {
            max_per_config: 100,
            max_age: 30 * 24 * 3600 * 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_is_lowercase_hex_of_utf8() {
        assert_eq!(content_md5("中文"), "a7bac2239fcdcb3a067903d8077c4a07");
        assert_eq!(content_md5(""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(content_md5("hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn default_tenants_are_one_namespace_and_bad_names_name_their_field() {
        for tenant in ["", "public", "PUBLIC", "null"] {
            assert!(
                ConfigKey::parse(tenant, "g", "d")
                    .unwrap()
                    .namespace
                    .is_public(),
                "{tenant}"
            );
        }
        assert_eq!(
            ConfigKey::parse("dev", "g", "d")
                .unwrap()
                .namespace
                .as_str(),
            "dev"
        );
        for (tenant, group, data_id, field) in [
            ("", "g", "", "dataId"),
            ("", "g", "a b", "dataId"),
            ("", "", "d", "group"),
            ("", "g/h", "d", "group"),
            ("a b", "g", "d", "tenant"),
        ] {
            match ConfigKey::parse(tenant, group, data_id) {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("expected invalid {field}: {other:?}"),
            }
        }
    }
}
