//! The access aggregate: users created through the API, role bindings
//! and permissions (see [`crate::access`]). Checks that need the users
//! of the config file are the adapter's; here a role is bound only to a
//! user this state knows or that the command names (the adapter checks
//! config-file users before proposing).

use std::collections::{BTreeMap, BTreeSet};

use crate::access::{check_user_name, Action, Permission, ADMIN_ROLE};
use crate::Error;

#[derive(Debug, Clone, Default)]
pub(super) struct Access {
    users: BTreeMap<String, String>,
    roles: BTreeSet<(String, String)>,
    permissions: BTreeSet<Permission>,
}

impl Access {
    pub(super) fn restore(
        users: Vec<(String, String)>,
        roles: Vec<(String, String)>,
        permissions: Vec<Permission>,
    ) -> Self {
        Self {
            users: users.into_iter().collect(),
            roles: roles.into_iter().collect(),
            permissions: permissions.into_iter().collect(),
        }
    }

    pub(super) fn users(&self) -> Vec<(String, String)> {
        self.users
            .iter()
            .map(|(u, h)| (u.clone(), h.clone()))
            .collect()
    }

    pub(super) fn roles(&self) -> Vec<(String, String)> {
        self.roles.iter().cloned().collect()
    }

    pub(super) fn permissions(&self) -> Vec<Permission> {
        self.permissions.iter().cloned().collect()
    }

    pub(super) fn create_user(&mut self, name: &str, hash: &str) -> Result<(), Error> {
        check_user_name("username", name)?;
        if self.users.contains_key(name) {
            return Err(Error::invalid(
                "username",
                format!("user '{name}' already exist!"),
            ));
        }
        self.users.insert(name.to_owned(), hash.to_owned());
        Ok(())
    }

    pub(super) fn create_initial_admin(&mut self, name: &str, hash: &str) -> Result<(), Error> {
        if self.roles.iter().any(|(r, _)| r == ADMIN_ROLE) {
            return Err(Error::invalid("username", "have admin user cannot use it."));
        }
        if !self.users.contains_key(name) {
            self.create_user(name, hash)?;
        }
        self.roles.insert((ADMIN_ROLE.to_owned(), name.to_owned()));
        Ok(())
    }

    pub(super) fn set_password(&mut self, name: &str, hash: &str) -> Result<(), Error> {
        let stored = self.users.get_mut(name).ok_or_else(|| Error::NotFound {
            what: "user",
            name: name.to_owned(),
        })?;
        *stored = hash.to_owned();
        Ok(())
    }

    pub(super) fn delete_user(&mut self, name: &str) -> Result<(), Error> {
        if self
            .roles
            .contains(&(ADMIN_ROLE.to_owned(), name.to_owned()))
        {
            return Err(Error::invalid(
                "username",
                format!("cannot delete admin: {name}"),
            ));
        }
        self.users.remove(name);
        self.roles.retain(|(_, user)| user != name);
        Ok(())
    }

    pub(super) fn bind(&mut self, role: &str, user: &str) -> Result<(), Error> {
        check_user_name("role", role)?;
        if role == ADMIN_ROLE {
            return Err(Error::invalid(
                "role",
                format!("role '{ADMIN_ROLE}' is not permitted to create!"),
            ));
        }
        if !self.roles.insert((role.to_owned(), user.to_owned())) {
            return Err(Error::invalid(
                "role",
                format!("user '{user}' already bound to the role '{role}'!"),
            ));
        }
        Ok(())
    }

    pub(super) fn unbind(&mut self, role: &str, user: Option<&str>) -> Result<(), Error> {
        if role == ADMIN_ROLE {
            return Err(Error::invalid(
                "role",
                format!("role '{ADMIN_ROLE}' is not permitted to delete!"),
            ));
        }
        self.roles
            .retain(|(r, u)| r != role || user.is_some_and(|user| u != user));
        if !self.roles.iter().any(|(r, _)| r == role) {
            self.permissions.retain(|p| p.role != role);
        }
        Ok(())
    }

    pub(super) fn grant(&mut self, permission: &Permission) -> Result<(), Error> {
        if !self.roles.iter().any(|(r, _)| *r == permission.role) {
            return Err(Error::NotFound {
                what: "role",
                name: permission.role.clone(),
            });
        }
        if permission.resource.trim().is_empty() {
            return Err(Error::invalid("resource", "must not be blank"));
        }
        self.permissions.insert(permission.clone());
        Ok(())
    }

    pub(super) fn revoke(&mut self, permission: &Permission) {
        self.permissions.remove(permission);
    }

    pub(super) fn user_hash(&self, name: &str) -> Option<&str> {
        self.users.get(name).map(String::as_str)
    }

    pub(super) fn roles_of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.roles
            .iter()
            .filter(move |(_, u)| u == user)
            .map(|(r, _)| r.as_str())
    }

    pub(super) fn allows(&self, user: &str, resource: &str, action: Action) -> bool {
        let roles: Vec<&str> = self.roles_of(user).collect();
        roles.contains(&ADMIN_ROLE)
            || self
                .permissions
                .iter()
                .any(|p| roles.contains(&p.role.as_str()) && p.covers(resource, action))
    }

    pub(super) fn role_bindings(&self) -> &BTreeSet<(String, String)> {
        &self.roles
    }

    pub(super) fn all_permissions(&self) -> &BTreeSet<Permission> {
        &self.permissions
    }

    pub(super) fn user_names(&self) -> impl Iterator<Item = &String> {
        self.users.keys()
    }
}

impl super::Registry {
    /// The password hash of a user created through the API.
    pub fn user_hash(&self, name: &str) -> Option<&str> {
        self.access.user_hash(name)
    }

    /// The users created through the API.
    pub fn user_names(&self) -> impl Iterator<Item = &String> {
        self.access.user_names()
    }

    /// The roles bound to `user`.
    pub fn roles_of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.access.roles_of(user)
    }

    /// Every role binding, as (role, user).
    pub fn role_bindings(&self) -> &BTreeSet<(String, String)> {
        self.access.role_bindings()
    }

    /// Every permission granted.
    pub fn permissions(&self) -> &BTreeSet<crate::access::Permission> {
        self.access.all_permissions()
    }

    /// Whether `user`'s roles allow `action` on `resource`.
    pub fn allows(&self, user: &str, resource: &str, action: crate::access::Action) -> bool {
        self.access.allows(user, resource, action)
    }
}
