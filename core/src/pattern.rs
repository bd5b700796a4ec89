//! Fuzzy-watch patterns, as Nacos 3 writes them: `namespace>>group>>name`,
//! where the namespace is exact and the group and the name (a service's,
//! or a config's data id) are each exact, `*`, `prefix*`, `*suffix` or
//! `*infix*`. A pattern names what a client watches the set of: it is
//! told when a matching service or config appears or goes.

use std::fmt;

use crate::{ConfigKey, Error, ServiceKey, DEFAULT_NAMESPACE};

/// The separator between a pattern's parts.
pub const PATTERN_SEPARATOR: &str = ">>";

/// One part's rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Item {
    Exact(String),
    Any,
    Prefix(String),
    Suffix(String),
    Infix(String),
}

impl Item {
    fn parse(field: &'static str, raw: &str) -> Result<Self, Error> {
        if raw.is_empty() {
            return Err(Error::invalid(field, "is blank"));
        }
        let stars = raw.matches('*').count();
        let bare = raw.trim_matches('*');
        let (starts, ends) = (raw.starts_with('*'), raw.ends_with('*'));
        let item = match (stars, starts, ends) {
            (0, _, _) => Item::Exact(raw.to_owned()),
            _ if bare.is_empty() => Item::Any,
            (1, false, true) => Item::Prefix(bare.to_owned()),
            (1, true, false) => Item::Suffix(bare.to_owned()),
            (2, true, true) => Item::Infix(bare.to_owned()),
            _ => {
                return Err(Error::invalid(
                    field,
                    format!(
                        "'{raw}' is none of: exact, '*', 'prefix*', '*suffix', '*infix*' \
                         (a '*' only at either end)"
                    ),
                ))
            }
        };
        Ok(item)
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Item::Exact(exact) => name == exact,
            Item::Any => true,
            Item::Prefix(prefix) => name.starts_with(prefix.as_str()),
            Item::Suffix(suffix) => name.ends_with(suffix.as_str()),
            Item::Infix(infix) => name.contains(infix.as_str()),
        }
    }
}

/// A parsed `namespace>>group>>name` pattern. It keeps the text it was
/// parsed from: that text is how the client names it in every push.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKeyPattern {
    raw: String,
    namespace: String,
    group: Item,
    name: Item,
}

impl GroupKeyPattern {
    /// Parses a pattern; a blank namespace is the default one.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let parts: Vec<&str> = raw.split(PATTERN_SEPARATOR).collect();
        let [namespace, group, name] = parts[..] else {
            return Err(Error::invalid(
                "groupKeyPattern",
                format!("'{raw}' is not namespace>>group>>name"),
            ));
        };
        let namespace = if namespace.is_empty() {
            DEFAULT_NAMESPACE
        } else {
            namespace
        };
        if namespace.contains('*') {
            return Err(Error::invalid(
                "groupKeyPattern",
                format!("the namespace '{namespace}' must be exact"),
            ));
        }
        Ok(Self {
            raw: raw.to_owned(),
            namespace: namespace.to_owned(),
            group: Item::parse("groupKeyPattern (group)", group)?,
            name: Item::parse("groupKeyPattern (name)", name)?,
        })
    }

    /// The text the client sent.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The namespace it watches.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether a service of this name is in the watched set.
    pub fn matches_service(&self, key: &ServiceKey) -> bool {
        key.namespace.as_str() == self.namespace
            && self.group.matches(key.group.as_str())
            && self.name.matches(key.name.as_str())
    }

    /// Whether a config of this key is in the watched set.
    pub fn matches_config(&self, key: &ConfigKey) -> bool {
        key.namespace.as_str() == self.namespace
            && self.group.matches(&key.group)
            && self.name.matches(&key.data_id)
    }
}

impl fmt::Display for GroupKeyPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(ns: &str, group: &str, name: &str) -> ServiceKey {
        ServiceKey::parse(ns, group, name).unwrap()
    }

    #[test]
    fn each_item_form_matches_as_nacos_does() {
        let cases = [
            ("ns>>grp>>svc-*", "grp", "svc-a", true),
            ("ns>>grp>>svc-*", "grp", "other", false),
            ("ns>>grp>>*-a", "grp", "svc-a", true),
            ("ns>>grp>>*-a", "grp", "svc-b", false),
            ("ns>>grp>>*vc*", "grp", "svc-b", true),
            ("ns>>grp>>*", "grp", "anything", true),
            ("ns>>*>>svc", "other-group", "svc", true),
            ("ns>>g*>>svc", "grp", "svc", true),
            ("ns>>grp>>svc", "grp", "svc", true),
            ("ns>>grp>>svc", "grp", "svc2", false),
        ];
        for (raw, group, name, expected) in cases {
            let pattern = GroupKeyPattern::parse(raw).unwrap();
            assert_eq!(
                pattern.matches_service(&service("ns", group, name)),
                expected,
                "{raw} against {group}/{name}"
            );
        }
        let pattern = GroupKeyPattern::parse("ns>>grp>>svc-*").unwrap();
        assert!(!pattern.matches_service(&service("other", "grp", "svc-a")));
    }

    #[test]
    fn a_blank_namespace_is_the_default_one() {
        let pattern = GroupKeyPattern::parse(">>DEFAULT_GROUP>>*").unwrap();
        assert_eq!(pattern.namespace(), "public");
        assert!(pattern.matches_service(&service("", "", "orders")));
        let config = ConfigKey::parse("", "DEFAULT_GROUP", "app.yaml").unwrap();
        assert!(pattern.matches_config(&config));
    }

    #[test]
    fn malformed_patterns_are_refused_naming_the_field() {
        for raw in [
            "ns>>grp",
            "ns>>grp>>a*b",
            "ns>>>>svc",
            "n*>>grp>>svc",
            "a>>b>>c>>d",
        ] {
            let error = GroupKeyPattern::parse(raw).unwrap_err().to_string();
            assert!(error.contains("groupKeyPattern"), "{raw}: {error}");
        }
    }
}
