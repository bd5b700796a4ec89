//! The auth and TLS settings groups.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::groups::positive;
use super::{invalid, ConfigError, Settings, UserSetting};

/// Authentication: off by default, as in Nacos.
#[derive(Clone, PartialEq)]
pub struct AuthConfig {
    /// Whether calls need a token.
    pub enabled: bool,
    /// The token signing key (set when enabled).
    pub token_secret: Vec<u8>,
    /// How long a token lasts.
    pub token_ttl: Duration,
    /// The users who may log in.
    pub users: Vec<UserSetting>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token_secret: Vec::new(),
            // Nacos' token lifetime.
            token_ttl: Duration::from_secs(18_000),
            users: Vec::new(),
        }
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("enabled", &self.enabled)
            .field("token_ttl", &self.token_ttl)
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

impl AuthConfig {
    pub(super) fn read(s: &Settings) -> Result<Self, ConfigError> {
        let d = Self::default();
        let enabled = s.auth_enabled.unwrap_or(d.enabled);
        let token_ttl = Duration::from_secs(positive(
            "auth_token_ttl_s",
            s.auth_token_ttl_s,
            d.token_ttl.as_secs(),
        )?);
        let users = s.users.clone().unwrap_or(d.users);
        let mut names = std::collections::BTreeSet::new();
        for user in &users {
            if user.name.trim().is_empty() || user.name.chars().any(char::is_control) {
                return Err(invalid("users", "a user's name must not be empty"));
            }
            if !names.insert(user.name.as_str()) {
                return Err(invalid(
                    "users",
                    format!("user '{}' is given twice", user.name),
                ));
            }
            if user.password_hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(invalid(
                    "users",
                    format!(
                        "the password_hash of user '{}' is not a bcrypt hash ($2b$...); make one with `understudy ctl hash-password`",
                        user.name
                    ),
                ));
            }
        }
        let token_secret = s
            .auth_token_secret
            .clone()
            .filter(|s| !s.is_empty())
            .map(String::into_bytes);
        if !enabled {
            return Ok(Self {
                enabled,
                token_secret: token_secret.unwrap_or(d.token_secret),
                token_ttl,
                users,
            });
        }
        let Some(token_secret) = token_secret else {
            return Err(invalid(
                "auth_token_secret",
                "is required when auth_enabled is true: at least 32 bytes, the same on every node",
            ));
        };
        if token_secret.len() < 32 {
            return Err(invalid(
                "auth_token_secret",
                format!("must be at least 32 bytes, got {}", token_secret.len()),
            ));
        }
        if users.is_empty() {
            return Err(invalid(
                "users",
                "auth_enabled needs at least one [[users]] entry in the config file",
            ));
        }
        Ok(Self {
            enabled,
            token_secret,
            token_ttl,
            users,
        })
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.auth_enabled = Some(self.enabled);
        s.auth_token_secret = (!self.token_secret.is_empty())
            .then(|| String::from_utf8_lossy(&self.token_secret).into_owned());
        s.auth_token_ttl_s = Some(self.token_ttl.as_secs());
        s.users = Some(self.users.clone());
    }
}

/// The PEM files TLS is served with, read at start-up. No TLS is the
/// default.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// Where the certificate chain was read from.
    pub cert_file: PathBuf,
    /// Where the private key was read from.
    pub key_file: PathBuf,
    /// Where the CA certificate was read from.
    pub ca_file: Option<PathBuf>,
    /// This node's certificate chain.
    pub cert_pem: Vec<u8>,
    /// Its private key.
    pub key_pem: Vec<u8>,
    /// The CA of the nodes' certificates, for the raft port.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    pub(super) fn read(s: &Settings, peers: bool) -> Result<Option<Self>, ConfigError> {
        let read = |key: &'static str, path: &Path, marker: &str| {
            let bytes = std::fs::read(path)
                .map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))?;
            if !String::from_utf8_lossy(&bytes).contains(marker) {
                return Err(invalid(
                    key,
                    format!("{} holds no PEM {marker}", path.display()),
                ));
            }
            Ok(bytes)
        };
        let (cert_file, key_file) = match (&s.tls_cert, &s.tls_key) {
            (None, None) => {
                if s.tls_ca.is_some() {
                    return Err(invalid("tls_ca", "needs tls_cert and tls_key"));
                }
                return Ok(None);
            }
            (Some(_), None) => return Err(invalid("tls_key", "is required with tls_cert")),
            (None, Some(_)) => return Err(invalid("tls_cert", "is required with tls_key")),
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        };
        let ca_pem = match &s.tls_ca {
            Some(ca) => Some(read("tls_ca", ca, "CERTIFICATE")?),
            None if peers => {
                return Err(invalid(
                    "tls_ca",
                    "is required with TLS and peers: the nodes verify each other's certificates with it",
                ))
            }
            None => None,
        };
        Ok(Some(Self {
            cert_pem: read("tls_cert", &cert_file, "CERTIFICATE")?,
            key_pem: read("tls_key", &key_file, "PRIVATE KEY")?,
            ca_pem,
            cert_file,
            key_file,
            ca_file: s.tls_ca.clone(),
        }))
    }

    pub(super) fn lower(this: Option<&Self>, s: &mut Settings) {
        s.tls_cert = this.map(|tls| tls.cert_file.clone());
        s.tls_key = this.map(|tls| tls.key_file.clone());
        s.tls_ca = this.and_then(|tls| tls.ca_file.clone());
    }
}
