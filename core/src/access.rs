//! Who may do what: users (name and bcrypt hash, hashed by the adapter),
//! their roles, and the roles' permissions on resources, as Nacos' default
//! auth plugin keeps them. A resource is `namespace:group:type/name`
//! (`public:DEFAULT_GROUP:naming/orders`, `dev:*:*`); a permission's
//! resource is a pattern where `*` is any run of characters, and its
//! action `r`, `w` or `rw`. The role `ROLE_ADMIN` may do everything.

use serde::{Deserialize, Serialize};

use crate::Error;

/// The role that may do everything; it is neither bound nor removed
/// through the API.
pub const ADMIN_ROLE: &str = "ROLE_ADMIN";

/// What a permission allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Read.
    Read,
    /// Write.
    Write,
    /// Both.
    ReadWrite,
}

impl Action {
    /// Parses Nacos' `r`, `w` or `rw`.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        match raw.trim() {
            "r" => Ok(Action::Read),
            "w" => Ok(Action::Write),
            "rw" => Ok(Action::ReadWrite),
            other => Err(Error::invalid(
                "action",
                format!("'{other}' is none of r, w, rw"),
            )),
        }
    }

    /// Nacos' letters.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Read => "r",
            Action::Write => "w",
            Action::ReadWrite => "rw",
        }
    }

    /// Whether a permission with this action allows `wanted`.
    pub fn allows(self, wanted: Action) -> bool {
        self == Action::ReadWrite || self == wanted
    }
}

/// A role's permission on the resources its pattern matches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Permission {
    /// The role.
    pub role: String,
    /// The resource pattern.
    pub resource: String,
    /// What it allows.
    pub action: Action,
}

impl Permission {
    /// Whether it covers `resource` (as Nacos: a pattern starting with
    /// `:` is in the default namespace).
    pub fn covers(&self, resource: &str, wanted: Action) -> bool {
        let pattern = if self.resource.starts_with(':') {
            format!("{}{}", crate::DEFAULT_NAMESPACE, self.resource)
        } else {
            self.resource.clone()
        };
        self.action.allows(wanted) && glob(&pattern, resource)
    }
}

/// The resource a naming or config request touches, as Nacos writes it.
pub fn resource(namespace: &str, group: &str, kind: &str, name: &str) -> String {
    let or_any = |s: &str| {
        if s.is_empty() {
            "*".to_owned()
        } else {
            s.to_owned()
        }
    };
    let namespace = if namespace.is_empty() {
        crate::DEFAULT_NAMESPACE
    } else {
        namespace
    };
    format!("{namespace}:{}:{kind}/{}", or_any(group), or_any(name))
}

/// The resource of a naming request, from its namespace, group and
/// service as the request gave them: a service written `group@@name`
/// names its own group; a service without one is in `DEFAULT_GROUP`; no
/// service at all is every service of the group given (or of every
/// group).
pub fn naming_resource(namespace: &str, group: &str, service: &str) -> String {
    let (group, name) = match service.split_once(crate::GROUP_SEPARATOR) {
        Some((group, name)) => (group, name),
        None if service.is_empty() => (group, ""),
        None if group.is_empty() => (crate::DEFAULT_GROUP, service),
        None => (group, service),
    };
    resource(namespace, group, "naming", name)
}

/// The resource of one service.
pub fn service_resource(key: &crate::ServiceKey) -> String {
    resource(
        key.namespace.as_str(),
        key.group.as_str(),
        "naming",
        key.name.as_str(),
    )
}

/// The resource of one config item.
pub fn config_resource(key: &crate::ConfigKey) -> String {
    resource(key.namespace.as_str(), &key.group, "config", &key.data_id)
}

/// Whether `value` matches `pattern` whole, `*` being any run of
/// characters.
pub fn glob(pattern: &str, value: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = value.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// A user name: 1 to 64 characters, no blank and no `:`.
pub fn check_user_name(field: &'static str, name: &str) -> Result<(), Error> {
    if name.trim().is_empty() || name.chars().count() > 64 {
        return Err(Error::invalid(field, "must be 1 to 64 characters"));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            field,
            format!("'{name}' may not hold blanks"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_naming_resource_reads_the_group_from_the_service_first() {
        assert_eq!(naming_resource("", "", ""), "public:*:naming/*");
        assert_eq!(
            naming_resource("dev", "", "orders"),
            "dev:DEFAULT_GROUP:naming/orders"
        );
        assert_eq!(
            naming_resource("dev", "other", "g1@@orders"),
            "dev:g1:naming/orders"
        );
        assert_eq!(naming_resource("dev", "g2", ""), "dev:g2:naming/*");
    }

    #[test]
    fn patterns_match_whole_resources() {
        let p = |resource: &str, action| Permission {
            role: "dev".into(),
            resource: resource.into(),
            action,
        };
        let orders = resource("dev", "DEFAULT_GROUP", "naming", "orders");
        assert_eq!(orders, "dev:DEFAULT_GROUP:naming/orders");
        assert!(p("dev:*:*", Action::Read).covers(&orders, Action::Read));
        assert!(!p("dev:*:*", Action::Read).covers(&orders, Action::Write));
        assert!(p("dev:*:*", Action::ReadWrite).covers(&orders, Action::Write));
        assert!(!p("prod:*:*", Action::ReadWrite).covers(&orders, Action::Read));
        assert!(p(":*:*", Action::Read).covers(&resource("", "g", "config", "a"), Action::Read));
        assert!(p("dev:DEFAULT_GROUP:naming/ord*", Action::Read).covers(&orders, Action::Read));
        assert!(!p("dev:DEFAULT_GROUP:naming/ord", Action::Read).covers(&orders, Action::Read));
        assert!(!p("dev", Action::Read).covers(&orders, Action::Read));
        assert_eq!(Action::parse("rw"), Ok(Action::ReadWrite));
        assert!(Action::parse("x").is_err());
    }
}
