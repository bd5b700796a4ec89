//! Validated names: namespace ids, groups, services, clusters and the
//! service key that combines them. Parsing is the only way to build one, so
//! every name inside the registry has passed the Nacos rules. Defaults for
//! blank input (`public`, `DEFAULT_GROUP`, `DEFAULT`) are applied here, once.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::Error;

/// The default naming namespace. Nacos clients also address it as `""`.
pub const DEFAULT_NAMESPACE: &str = "public";
/// The default group.
pub const DEFAULT_GROUP: &str = "DEFAULT_GROUP";
/// The default cluster.
pub const DEFAULT_CLUSTER: &str = "DEFAULT";
/// Separator of a grouped service name (`group@@service`).
pub const GROUP_SEPARATOR: &str = "@@";

const MAX_NAMESPACE_LEN: usize = 128;
const MAX_GROUP_LEN: usize = 128;
const MAX_SERVICE_LEN: usize = 512;
const MAX_CLUSTER_LEN: usize = 64;

/// The names nearly every instance carries (`public`, `DEFAULT_GROUP`,
/// `DEFAULT`), allocated once and shared by every name that equals one.
fn shared(raw: &str) -> Arc<str> {
    static DEFAULTS: OnceLock<[Arc<str>; 3]> = OnceLock::new();
    DEFAULTS
        .get_or_init(|| {
            [
                DEFAULT_NAMESPACE.into(),
                DEFAULT_GROUP.into(),
                DEFAULT_CLUSTER.into(),
            ]
        })
        .iter()
        .find(|d| ***d == *raw)
        .cloned()
        .unwrap_or_else(|| raw.into())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Clones share one allocation, so the keys copied into indexes,
        /// events and the change log cost a pointer each.
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// A name already checked (or read back from our own log).
            fn of(raw: &str) -> Self {
                Self(shared(raw))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let raw = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Ok(Self::of(&raw))
            }
        }
    };
}

name_type!(
    /// A naming namespace id. `""` and `public` are the same namespace and
    /// are both stored as `public`.
    NamespaceId
);
name_type!(
    /// A service group (`DEFAULT_GROUP` by default).
    GroupName
);
name_type!(
    /// A plain service name, without its group.
    ServiceName
);
name_type!(
    /// A cluster name inside a service (`DEFAULT` by default).
    ClusterName
);

impl NamespaceId {
    /// Parses a namespace id; blank means the default namespace.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let raw = raw.trim();
        if raw.is_empty() || raw == DEFAULT_NAMESPACE {
            return Ok(Self::public());
        }
        check_len("namespaceId", raw, MAX_NAMESPACE_LEN)?;
        if !raw
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            return Err(Error::invalid(
                "namespaceId",
                format!("'{raw}' may hold only letters, digits, '_' and '-'"),
            ));
        }
        Ok(Self::of(raw))
    }

    /// The default namespace, `public`.
    pub fn public() -> Self {
        Self::of(DEFAULT_NAMESPACE)
    }

    /// A config tenant already checked by the config rules (which allow
    /// `:` and `.` too).
    pub(crate) fn from_config_tenant(tenant: &str) -> Self {
        Self::of(tenant)
    }

    /// Whether this is the default namespace.
    pub fn is_public(&self) -> bool {
        *self.0 == *DEFAULT_NAMESPACE
    }
}

impl GroupName {
    /// Parses a group; blank means `DEFAULT_GROUP`.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Ok(Self::default_group());
        }
        check_len("groupName", raw, MAX_GROUP_LEN)?;
        if !raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        {
            return Err(Error::invalid(
                "groupName",
                format!("'{raw}' may hold only letters, digits and '-', '_', ':', '.'"),
            ));
        }
        Ok(Self::of(raw))
    }

    /// `DEFAULT_GROUP`.
    pub fn default_group() -> Self {
        Self::of(DEFAULT_GROUP)
    }
}

impl ServiceName {
    /// Parses a plain service name. It must not be blank, start with `@`,
    /// contain `@@`, whitespace or CJK ideographs, as in Nacos.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        if raw.trim().is_empty() {
            return Err(Error::invalid("serviceName", "must not be blank"));
        }
        check_len("serviceName", raw, MAX_SERVICE_LEN)?;
        if raw.starts_with('@') {
            return Err(Error::invalid("serviceName", "must not start with '@'"));
        }
        if raw.contains(GROUP_SEPARATOR) {
            return Err(Error::invalid("serviceName", "must not contain '@@'"));
        }
        if raw
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || ('\u{4E00}'..='\u{9FA5}').contains(&c))
        {
            return Err(Error::invalid(
                "serviceName",
                "must not contain whitespace, control characters or CJK ideographs",
            ));
        }
        Ok(Self::of(raw))
    }
}

impl ServiceName {
    /// The smallest name, for range queries.
    pub(crate) fn min() -> Self {
        Self::of("")
    }
}

impl ClusterName {
    /// Parses a cluster name; blank means `DEFAULT`.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Ok(Self::default_cluster());
        }
        check_len("clusterName", raw, MAX_CLUSTER_LEN)?;
        if !raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::invalid(
                "clusterName",
                format!("'{raw}' may hold only letters, digits, '-' and '_'"),
            ));
        }
        Ok(Self::of(raw))
    }

    /// `DEFAULT`.
    pub fn default_cluster() -> Self {
        Self::of(DEFAULT_CLUSTER)
    }
}

fn check_len(field: &'static str, raw: &str, max: usize) -> Result<(), Error> {
    if raw.chars().count() > max {
        return Err(Error::invalid(
            field,
            format!("longer than {max} characters"),
        ));
    }
    Ok(())
}

/// The identity of a service: namespace, group and name, behind one
/// shared allocation. A clone is one pointer, so the registry, its change
/// log, owner index and events all name a service with the key it was
/// stored under (8 bytes each, where the three parts would take 48).
/// Compares, orders and hashes by value; reads its parts through
/// [`ServiceKeyParts`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey(Arc<ServiceKeyParts>);

/// The parts of a [`ServiceKey`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServiceKeyParts {
    /// Namespace id.
    pub namespace: NamespaceId,
    /// Group.
    pub group: GroupName,
    /// Plain service name.
    pub name: ServiceName,
}

impl std::ops::Deref for ServiceKey {
    type Target = ServiceKeyParts;

    fn deref(&self) -> &ServiceKeyParts {
        &self.0
    }
}

impl fmt::Debug for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for ServiceKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ServiceKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ServiceKeyParts::deserialize(deserializer).map(|parts| Self(Arc::new(parts)))
    }
}

impl ServiceKey {
    /// Builds a key from its three parts.
    pub fn new(namespace: NamespaceId, group: GroupName, name: ServiceName) -> Self {
        Self(Arc::new(ServiceKeyParts {
            namespace,
            group,
            name,
        }))
    }

    /// Whether both are the same allocation (then certainly equal).
    pub fn same(&self, other: &ServiceKey) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Parses raw namespace, group and service strings. A service name that
    /// is already grouped (`group@@name`) carries its own group, which wins
    /// over `group`, as Nacos' v1 service-name filter does.
    pub fn parse(namespace: &str, group: &str, service: &str) -> Result<Self, Error> {
        let namespace = NamespaceId::parse(namespace)?;
        let (group, name) = match service.split_once(GROUP_SEPARATOR) {
            Some((g, n)) => {
                if g.trim().is_empty() || n.trim().is_empty() {
                    return Err(Error::invalid(
                        "serviceName",
                        format!("'{service}' is not of the form group@@service"),
                    ));
                }
                (GroupName::parse(g)?, ServiceName::parse(n)?)
            }
            None => (GroupName::parse(group)?, ServiceName::parse(service)?),
        };
        Ok(Self::new(namespace, group, name))
    }

    /// `group@@service`, the name Nacos uses on HTTP and in instance ids.
    pub fn grouped_name(&self) -> String {
        self.grouped().to_string()
    }

    /// [`ServiceKey::grouped_name`], written where it is formatted.
    pub fn grouped(&self) -> impl fmt::Display + '_ {
        Grouped(self)
    }
}

/// A service key shown as `group@@service`.
struct Grouped<'a>(&'a ServiceKey);

impl fmt::Display for Grouped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{GROUP_SEPARATOR}{}", self.0.group, self.0.name)
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}{GROUP_SEPARATOR}{}",
            self.namespace, self.group, self.name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_and_public_namespaces_are_the_same_namespace() {
        assert_eq!(NamespaceId::parse("").unwrap(), NamespaceId::public());
        assert_eq!(NamespaceId::parse("public").unwrap(), NamespaceId::public());
        assert_eq!(NamespaceId::parse("  ").unwrap(), NamespaceId::public());
        assert_ne!(NamespaceId::parse("dev").unwrap(), NamespaceId::public());
    }

    #[test]
    fn grouped_service_names_carry_their_group() {
        let key = ServiceKey::parse("", "ignored", "grp@@svc").unwrap();
        assert_eq!(key.group.as_str(), "grp");
        assert_eq!(key.name.as_str(), "svc");
        assert_eq!(key.grouped_name(), "grp@@svc");
        let plain = ServiceKey::parse("", "", "svc").unwrap();
        assert_eq!(plain.group.as_str(), DEFAULT_GROUP);
    }

    #[test]
    fn malformed_names_name_their_field() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("", "", "", "serviceName"),
            ("", "", "@svc", "serviceName"),
            ("", "", "a b", "serviceName"),
            ("", "", "@@svc", "serviceName"),
            ("", "", "grp@@", "serviceName"),
            ("", "", "服务", "serviceName"),
            ("", "bad group", "svc", "groupName"),
            ("bad ns!", "", "svc", "namespaceId"),
        ];
        for (ns, group, service, field) in cases {
            match ServiceKey::parse(ns, group, service) {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, *field, "{service}"),
                other => panic!("{ns}/{group}/{service}: expected invalid {field}, got {other:?}"),
            }
        }
    }

    #[test]
    fn dubbo_style_service_names_are_legal() {
        assert!(ServiceName::parse("providers:com.foo.DemoService:1.0.0:").is_ok());
    }

    #[test]
    fn clusters_default_and_validate() {
        assert_eq!(ClusterName::parse("").unwrap().as_str(), DEFAULT_CLUSTER);
        assert!(ClusterName::parse("None").is_ok());
        assert!(ClusterName::parse("a.b").is_err());
        assert!(ClusterName::parse(&"x".repeat(65)).is_err());
    }
}
