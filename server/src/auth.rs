//! Authentication, off by default as in Nacos. Users and their bcrypt
//! password hashes come from the config file (bootstrap accounts) and
//! from the replicated state (created through `/nacos/v3/auth/user`,
//! limited to what their roles' permissions allow); a login issues a token that
//! every API then checks: HTTP (`accessToken` parameter or
//! `Authorization: Bearer`), Nacos gRPC (the `accessToken` header of each
//! request) and the native API (`authorization: Bearer` metadata).
//!
//! Tokens are JWTs signed with HMAC-SHA256 under the cluster-wide
//! `auth_token_secret`, carrying the user and an expiry: any node with the
//! same secret and users accepts a token another node issued, so a client
//! that moves to another node keeps working. The user is looked up again
//! on every check, so removing a user from the config revokes their tokens
//! on the nodes restarted with it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Mac, SimpleHmac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use thiserror::Error;

use crate::config::{AuthConfig, UserSetting};

type Signer = SimpleHmac<Sha256>;

/// `{"alg":"HS256","typ":"JWT"}`, the header issued. Any header is read
/// as JSON, whatever its field order: `alg` must be `HS256` (never
/// `none`), `typ`, if given, `JWT`, and no `crit` extension is known.
const HEADER: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";

/// A token's header, as read.
#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    typ: Option<String>,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

impl Header {
    fn accepted(&self) -> bool {
        self.alg == "HS256"
            && self
                .typ
                .as_deref()
                .is_none_or(|t| t.eq_ignore_ascii_case("JWT"))
            && self.crit.is_none()
    }
}

/// Why a call or a login is refused. The messages are Nacos's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Denied {
    /// No token was given.
    #[error("user not found!")]
    Missing,
    /// The token is not one of ours, or its user is gone.
    #[error("token invalid!")]
    Invalid,
    /// The token's time is up.
    #[error("token expired!")]
    Expired,
    /// The user is not an admin.
    #[error("authorization failed: user '{0}' is not an admin")]
    NotAdmin(String),
    /// Unknown user or wrong password.
    #[error("unknown user!")]
    BadCredentials,
    /// The user's roles do not allow this on this resource.
    #[error("authorization failed! user '{user}' may not {action} {resource}")]
    NoPermission {
        /// The user.
        user: String,
        /// `read` or `write`.
        action: &'static str,
        /// The resource, as `namespace:group:type/name`.
        resource: String,
    },
}

/// Who a valid token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user's name.
    pub user: String,
    /// Whether the user may use the admin endpoints.
    pub admin: bool,
    /// Whether the user is one of the config file's (bootstrap accounts:
    /// not limited to namespaces, never changed through the API).
    pub bootstrap: bool,
}

/// A user as a login or a check finds it.
struct Account {
    password_hash: String,
    admin: bool,
    bootstrap: bool,
}

/// A login's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The token.
    pub token: String,
    /// How long it lasts, s.
    pub ttl_s: u64,
    /// Whether its user is an admin.
    pub admin: bool,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    sub: String,
    /// Expiry, epoch seconds.
    exp: u64,
}

/// How long a password verified for a call (credentials sent with each
/// request instead of a token) is taken again without a bcrypt check.
pub const CREDENTIALS_REMEMBERED: std::time::Duration = std::time::Duration::from_secs(30);

/// Most users whose verified password is remembered at once.
const REMEMBERED_USERS: usize = 1024;

/// Passwords verified lately, by user: a keyed digest of the stored hash
/// and the password (never the password), and until when it holds. A
/// changed password changes the stored hash, so the digest no longer
/// matches; a deleted user is not found before the cache is asked.
#[derive(Debug, Default)]
struct Remembered(std::sync::Mutex<std::collections::HashMap<String, (Vec<u8>, u64)>>);

/// The users, the signing key and the switch.
#[derive(Debug, Clone)]
pub struct Auth {
    config: AuthConfig,
    /// The applied state, whose users, roles and permissions (created
    /// through the API, replicated) are looked up at every check.
    state: Option<std::sync::Arc<crate::state::State>>,
    remembered: std::sync::Arc<Remembered>,
}

impl Auth {
    /// Auth as configured.
    pub fn new(config: AuthConfig) -> Self {
        Self {
            config,
            state: None,
            remembered: std::sync::Arc::default(),
        }
    }

    /// Also knows the users, roles and permissions of `state`.
    pub(crate) fn with_state(mut self, state: std::sync::Arc<crate::state::State>) -> Self {
        self.state = Some(state);
        self
    }

    /// Whether `name` is a user of the config file.
    pub fn is_bootstrap(&self, name: &str) -> bool {
        self.user(name).is_some()
    }

    /// Whether `name` is a user, of the config file or created through
    /// the API.
    pub fn knows(&self, name: &str) -> bool {
        self.account(name).is_some()
    }

    fn account(&self, name: &str) -> Option<Account> {
        if let Some(user) = self.user(name) {
            return Some(Account {
                password_hash: user.password_hash.clone(),
                admin: user.admin,
                bootstrap: true,
            });
        }
        let registry = self.state.as_ref()?.registry();
        let password_hash = registry.user_hash(name)?.to_owned();
        let admin = registry
            .roles_of(name)
            .any(|r| r == understudy_core::access::ADMIN_ROLE);
        Some(Account {
            password_hash,
            admin,
            bootstrap: false,
        })
    }

    /// Whether `identity` may do `action` on `resource`: the config
    /// file's users and admins everywhere, other users as their roles'
    /// permissions say.
    pub fn allows(
        &self,
        identity: &Identity,
        resource: &str,
        action: understudy_core::access::Action,
    ) -> bool {
        identity.bootstrap
            || identity.admin
            || self
                .state
                .as_ref()
                .is_some_and(|s| s.registry().allows(&identity.user, resource, action))
    }

    /// [`Auth::allows`], or the refusal naming the user, the action and
    /// the resource.
    pub fn permit(
        &self,
        identity: &Identity,
        resource: String,
        action: understudy_core::access::Action,
    ) -> Result<(), Denied> {
        if self.allows(identity, &resource, action) {
            return Ok(());
        }
        Err(Denied::NoPermission {
            user: identity.user.clone(),
            action: match action {
                understudy_core::access::Action::Read => "read",
                _ => "write",
            },
            resource,
        })
    }

    /// Whether `user` may still do `action` on `resource` now: looked up
    /// again, so a subscription made earlier stops being served once its
    /// user is deleted or loses the permission.
    pub fn still_allows(
        &self,
        user: &str,
        resource: &str,
        action: understudy_core::access::Action,
    ) -> bool {
        self.account(user).is_some_and(|account| {
            let identity = Identity {
                user: user.to_owned(),
                admin: account.admin,
                bootstrap: account.bootstrap,
            };
            self.allows(&identity, resource, action)
        })
    }

    /// Who `token` belongs to when auth is on (`None` with auth off:
    /// everyone may do everything).
    pub fn identify(&self, token: Option<&str>, now_ms: u64) -> Result<Option<Identity>, Denied> {
        if !self.config.enabled {
            return Ok(None);
        }
        self.verify(token, now_ms).map(Some)
    }

    /// Whether calls need a token.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    fn user(&self, name: &str) -> Option<&UserSetting> {
        self.config.users.iter().find(|u| u.name == name)
    }

    /// Checks a user's password and issues a token at `now_ms`. With auth
    /// off any credentials get a token, as clients require (Python 3.x
    /// fails every call when its login fails). Checking a password costs
    /// a bcrypt verification: call it off the async threads.
    pub fn login(&self, user: &str, password: &str, now_ms: u64) -> Result<Issued, Denied> {
        let admin = if self.config.enabled {
            let known = self.account(user).ok_or(Denied::BadCredentials)?;
            if !bcrypt::verify(password, &known.password_hash).unwrap_or(false) {
                return Err(Denied::BadCredentials);
            }
            known.admin
        } else {
            true
        };
        let ttl_s = self.config.token_ttl.as_secs();
        let claims = Claims {
            sub: user.to_owned(),
            exp: now_ms / 1000 + ttl_s,
        };
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims encode"));
        let signed = format!("{HEADER}.{payload}");
        let signature = URL_SAFE_NO_PAD.encode(self.signature(&signed));
        Ok(Issued {
            token: format!("{signed}.{signature}"),
            ttl_s,
            admin,
        })
    }

    /// The HS256 signature of a token's `header.payload`.
    pub(crate) fn signature(&self, signed: &str) -> Vec<u8> {
        self.signer()
            .chain_update(signed)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    fn signer(&self) -> Signer {
        Signer::new_from_slice(&self.config.token_secret).expect("HMAC takes a key of any length")
    }

    fn digest(&self, password_hash: &str, password: &str) -> Vec<u8> {
        self.signer()
            .chain_update(password_hash)
            .chain_update([0])
            .chain_update(password)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Who `user` is, if `password` was verified for it within
    /// [`CREDENTIALS_REMEMBERED`] of `now_ms` (no bcrypt check).
    pub fn remembered(&self, user: &str, password: &str, now_ms: u64) -> Option<Identity> {
        use subtle::ConstantTimeEq as _;
        let account = self.account(user)?;
        let digest = self.digest(&account.password_hash, password);
        let remembered = self.remembered.0.lock().unwrap_or_else(|p| p.into_inner());
        let (kept, until) = remembered.get(user)?;
        (*until > now_ms && bool::from(kept.ct_eq(&digest))).then(|| Identity {
            user: user.to_owned(),
            admin: account.admin,
            bootstrap: account.bootstrap,
        })
    }

    /// Who `user` is, checking `password` with bcrypt (call it off the
    /// async threads) and remembering it for [`CREDENTIALS_REMEMBERED`]:
    /// a caller that sends its credentials with every request, as Nacos
    /// allows, pays for one check per user and period.
    pub fn authenticate(
        &self,
        user: &str,
        password: &str,
        now_ms: u64,
    ) -> Result<Identity, Denied> {
        let account = self.account(user).ok_or(Denied::BadCredentials)?;
        if !bcrypt::verify(password, &account.password_hash).unwrap_or(false) {
            return Err(Denied::BadCredentials);
        }
        let digest = self.digest(&account.password_hash, password);
        let until = now_ms + crate::clock::millis(CREDENTIALS_REMEMBERED);
        let mut remembered = self.remembered.0.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.len() >= REMEMBERED_USERS && !remembered.contains_key(user) {
            remembered.retain(|_, (_, kept_until)| *kept_until > now_ms);
            if remembered.len() >= REMEMBERED_USERS {
                remembered.clear();
            }
        }
        remembered.insert(user.to_owned(), (digest, until));
        Ok(Identity {
            user: user.to_owned(),
            admin: account.admin,
            bootstrap: account.bootstrap,
        })
    }

    /// Who `user` is by `password`, as every API checks credentials sent
    /// with a call: remembered if verified lately, else checked with
    /// bcrypt off the async threads (and remembered).
    pub async fn sign_in(
        &self,
        user: String,
        password: String,
        now_ms: u64,
    ) -> Result<Identity, Denied> {
        if let Some(identity) = self.remembered(&user, &password, now_ms) {
            return Ok(identity);
        }
        let auth = self.clone();
        tokio::task::spawn_blocking(move || auth.authenticate(&user, &password, now_ms))
            .await
            .unwrap_or(Err(Denied::BadCredentials))
    }

    /// Who `token` belongs to at `now_ms`.
    pub fn verify(&self, token: Option<&str>, now_ms: u64) -> Result<Identity, Denied> {
        let token = token
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Denied::Missing)?;
        let (signed, signature) = token.rsplit_once('.').ok_or(Denied::Invalid)?;
        let (header, payload) = signed.split_once('.').ok_or(Denied::Invalid)?;
        if header != HEADER {
            let header = URL_SAFE_NO_PAD
                .decode(header)
                .map_err(|_| Denied::Invalid)?;
            let header: Header = serde_json::from_slice(&header).map_err(|_| Denied::Invalid)?;
            if !header.accepted() {
                return Err(Denied::Invalid);
            }
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| Denied::Invalid)?;
        self.signer()
            .chain_update(signed)
            .verify_slice(&signature)
            .map_err(|_| Denied::Invalid)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| Denied::Invalid)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| Denied::Invalid)?;
        // As Nacos reads `exp`: a token is good through its last second
        // (the Java client's renewal schedule counts on that second).
        if claims.exp < now_ms / 1000 {
            return Err(Denied::Expired);
        }
        let account = self.account(&claims.sub).ok_or(Denied::Invalid)?;
        Ok(Identity {
            user: claims.sub,
            admin: account.admin,
            bootstrap: account.bootstrap,
        })
    }

    /// Lets a call through: always with auth off, else with a valid token
    /// (of an admin, if `admin`).
    pub fn check(&self, token: Option<&str>, admin: bool, now_ms: u64) -> Result<(), Denied> {
        if !self.config.enabled {
            return Ok(());
        }
        let identity = self.verify(token, now_ms)?;
        if admin && !identity.admin {
            return Err(Denied::NotAdmin(identity.user));
        }
        Ok(())
    }
}

/// The bcrypt cost `understudy ctl hash-password` uses (bcrypt's default).
pub const DEFAULT_COST: u32 = bcrypt::DEFAULT_COST;

/// A bcrypt hash of `password` for the `[[users]]` list; each login then
/// costs about 2^`cost` bcrypt rounds.
pub fn hash_password(password: &str, cost: u32) -> Result<String, bcrypt::BcryptError> {
    bcrypt::hash(password, cost)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn auth(enabled: bool) -> Auth {
        Auth::new(AuthConfig {
            enabled,
            token_secret: b"0123456789abcdef0123456789abcdef".to_vec(),
            token_ttl: Duration::from_secs(60),
            users: vec![
                UserSetting {
                    name: "root".to_owned(),
                    password_hash: bcrypt::hash("s3cret", 4).unwrap(),
                    admin: true,
                },
                UserSetting {
                    name: "app".to_owned(),
                    password_hash: bcrypt::hash("app-pw", 4).unwrap(),
                    admin: false,
                },
            ],
        })
    }

    #[test]
    fn a_token_is_a_signed_jwt_that_expires() {
        let auth = auth(true);
        let issued = auth.login("app", "app-pw", 1_000_000).unwrap();
        assert_eq!(issued.ttl_s, 60);
        assert!(!issued.admin);
        assert_eq!(issued.token.split('.').count(), 3);
        // exp is second 1_060: good through it, as Nacos reads exp.
        let who = auth.verify(Some(&issued.token), 1_060_999).unwrap();
        assert_eq!(who.user, "app");
        assert_eq!(
            auth.verify(Some(&issued.token), 1_061_000),
            Err(Denied::Expired)
        );
    }

    #[test]
    fn wrong_passwords_forged_tokens_and_other_keys_are_refused() {
        let auth = auth(true);
        assert_eq!(auth.login("app", "wrong", 0), Err(Denied::BadCredentials));
        assert_eq!(auth.login("nobody", "x", 0), Err(Denied::BadCredentials));
        let token = auth.login("app", "app-pw", 0).unwrap().token;
        // The same claims with another user name, the signature kept.
        let (_, rest) = token.split_once('.').unwrap();
        let (_, signature) = rest.split_once('.').unwrap();
        let forged_claims = URL_SAFE_NO_PAD.encode(br#"{"sub":"root","exp":99999999999}"#);
        let forged = format!("{HEADER}.{forged_claims}.{signature}");
        assert_eq!(auth.verify(Some(&forged), 0), Err(Denied::Invalid));
        let mut other = auth.config.clone();
        other.token_secret = b"another key, another cluster.....".to_vec();
        assert_eq!(
            Auth::new(other).verify(Some(&token), 0),
            Err(Denied::Invalid)
        );
        assert_eq!(auth.verify(None, 0), Err(Denied::Missing));
        assert_eq!(auth.verify(Some("garbage"), 0), Err(Denied::Invalid));
    }

    #[test]
    fn a_verified_password_is_remembered_until_it_changes_or_its_time_is_up() {
        let auth = auth(true);
        assert_eq!(auth.remembered("app", "app-pw", 0), None);
        assert_eq!(
            auth.authenticate("app", "wrong", 0),
            Err(Denied::BadCredentials)
        );
        assert_eq!(auth.remembered("app", "wrong", 0), None);
        let who = auth.authenticate("app", "app-pw", 0).unwrap();
        assert_eq!(who.user, "app");
        let ttl = crate::clock::millis(CREDENTIALS_REMEMBERED);
        assert_eq!(auth.remembered("app", "app-pw", ttl - 1), Some(who));
        assert_eq!(auth.remembered("app", "other", 1), None, "another password");
        assert_eq!(auth.remembered("app", "app-pw", ttl), None, "time is up");
        // A changed password changes the stored hash: the old one is
        // not taken again.
        auth.authenticate("app", "app-pw", 0).unwrap();
        let mut changed = auth.config.clone();
        changed.users[1].password_hash = bcrypt::hash("new-pw", 4).unwrap();
        let changed = Auth {
            config: changed,
            ..auth.clone()
        };
        assert_eq!(changed.remembered("app", "app-pw", 1), None);
    }

    /// jsonwebtoken, given HS256 on the hmac and sha2 the server already
    /// uses (its bundled providers bring RSA, EC and Ed25519 code): the
    /// library writes and reads the tokens, the provider only signs.
    mod jwt {
        use hmac::Mac as _;
        use jsonwebtoken::crypto::{CryptoProvider, JwkUtils, JwtSigner, JwtVerifier};
        use jsonwebtoken::errors::{ErrorKind, Result};
        use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};

        pub(super) struct Hs256(super::Signer);

        impl signature::Signer<Vec<u8>> for Hs256 {
            fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
                Ok(self
                    .0
                    .clone()
                    .chain_update(message)
                    .finalize()
                    .into_bytes()
                    .to_vec())
            }
        }

        impl signature::Verifier<Vec<u8>> for Hs256 {
            fn verify(
                &self,
                message: &[u8],
                signature: &Vec<u8>,
            ) -> std::result::Result<(), signature::Error> {
                self.0
                    .clone()
                    .chain_update(message)
                    .verify_slice(signature)
                    .map_err(|_| signature::Error::new())
            }
        }

        impl JwtSigner for Hs256 {
            fn algorithm(&self) -> Algorithm {
                Algorithm::HS256
            }
        }

        impl JwtVerifier for Hs256 {
            fn algorithm(&self) -> Algorithm {
                Algorithm::HS256
            }
        }

        fn hs256(algorithm: &Algorithm, secret: &[u8]) -> Result<Box<Hs256>> {
            if *algorithm != Algorithm::HS256 {
                return Err(ErrorKind::InvalidAlgorithm.into());
            }
            let mac = super::Signer::new_from_slice(secret)
                .map_err(|_| jsonwebtoken::errors::Error::from(ErrorKind::InvalidKeyFormat))?;
            Ok(Box::new(Hs256(mac)))
        }

        fn signer(algorithm: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
            Ok(hs256(algorithm, key.try_get_hmac_secret()?)?)
        }

        fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
            Ok(hs256(algorithm, key.try_get_hmac_secret()?)?)
        }

        static PROVIDER: CryptoProvider = CryptoProvider {
            signer_factory: signer,
            verifier_factory: verifier,
            jwk_utils: JwkUtils::new_unimplemented(),
        };

        pub(super) fn install() {
            // Another test may have installed it first: the same provider.
            let _ = PROVIDER.install_default();
        }
    }

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// A token jsonwebtoken mints with `header` and `claims`.
    fn minted(header: jsonwebtoken::Header, claims: &serde_json::Value, secret: &[u8]) -> String {
        jwt::install();
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_secret(secret),
        )
        .expect("jsonwebtoken mints it")
    }

    #[test]
    fn tokens_a_jwt_library_mints_are_accepted_and_ours_read_by_it() {
        let auth = auth(true);
        let claims = serde_json::json!({"sub": "app", "exp": 2_000});
        // jsonwebtoken's header: `{"typ":"JWT","alg":"HS256"}`.
        let theirs = minted(
            jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            SECRET,
        );
        assert_eq!(auth.verify(Some(&theirs), 1_000_000).unwrap().user, "app");
        // Nacos' own tokens carry only `{"alg":"HS256"}`.
        let bare = jsonwebtoken::Header {
            typ: None,
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256)
        };
        let nacos_like = minted(bare, &claims, SECRET);
        assert_eq!(
            auth.verify(Some(&nacos_like), 1_000_000).unwrap().user,
            "app"
        );
        // And the library reads ours (its expiry check reads the real
        // clock; the expiry is compared here instead).
        let ours = auth.login("app", "app-pw", 1_000_000).unwrap().token;
        jwt::install();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        validation.validate_exp = false;
        let read = jsonwebtoken::decode::<serde_json::Value>(
            &ours,
            &jsonwebtoken::DecodingKey::from_secret(SECRET),
            &validation,
        )
        .expect("jsonwebtoken reads ours");
        assert_eq!(read.claims["sub"], "app");
        assert_eq!(read.claims["exp"], 1_000 + 60);
    }

    #[test]
    fn expired_malformed_wrongly_signed_and_unsigned_tokens_are_refused() {
        let auth = auth(true);
        let header = || jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        let live = serde_json::json!({"sub": "app", "exp": 2_000});
        let expired = minted(
            header(),
            &serde_json::json!({"sub": "app", "exp": 999}),
            SECRET,
        );
        // Good through second 999, as Nacos reads `exp`; expired after it.
        assert!(auth.verify(Some(&expired), 999_999).is_ok());
        assert_eq!(auth.verify(Some(&expired), 1_000_000), Err(Denied::Expired));
        let other_key = minted(header(), &live, b"another secret, another cluster");
        assert_eq!(auth.verify(Some(&other_key), 0), Err(Denied::Invalid));
        let no_exp = minted(header(), &serde_json::json!({"sub": "app"}), SECRET);
        assert_eq!(auth.verify(Some(&no_exp), 0), Err(Denied::Invalid));
        let gone = minted(
            header(),
            &serde_json::json!({"sub": "gone", "exp": 2_000}),
            SECRET,
        );
        assert_eq!(auth.verify(Some(&gone), 0), Err(Denied::Invalid));

        // `alg: none`, other algorithms and unknown critical extensions,
        // each with a valid HS256 signature over what it says.
        let encode = |json: &str| URL_SAFE_NO_PAD.encode(json);
        let payload = encode(r#"{"sub":"app","exp":2000}"#);
        let signed_with = |header: &str| {
            let signed = format!("{}.{payload}", encode(header));
            let signature = auth.signer().chain_update(&signed).finalize().into_bytes();
            format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
        };
        let none = format!("{}.{payload}", encode(r#"{"alg":"none","typ":"JWT"}"#));
        for token in [
            format!("{none}."),
            none.clone(),
            signed_with(r#"{"alg":"none"}"#),
            signed_with(r#"{"alg":"HS512","typ":"JWT"}"#),
            signed_with(r#"{"alg":"HS256","typ":"JWE"}"#),
            signed_with(r#"{"alg":"HS256","crit":["exp"]}"#),
            signed_with("not json"),
        ] {
            assert_eq!(
                auth.verify(Some(&token), 0),
                Err(Denied::Invalid),
                "{token}"
            );
        }
        assert_eq!(
            auth.verify(Some(&signed_with(r#"{"alg":"HS256"}"#)), 0)
                .unwrap()
                .user,
            "app"
        );
        let valid = minted(header(), &live, SECRET);
        let parts: Vec<&str> = valid.split('.').collect();
        for token in [
            String::new(),
            ".".to_owned(),
            "..".to_owned(),
            format!("{}.{}", parts[0], parts[1]),
            format!("{valid}.{}", parts[2]),
            format!("{}.{}.{}!", parts[0], parts[1], parts[2]),
            format!("{}.%%%.{}", parts[0], parts[2]),
        ] {
            let refused = auth.verify(Some(&token), 0);
            assert!(
                matches!(refused, Err(Denied::Invalid | Denied::Missing)),
                "{token}: {refused:?}"
            );
        }
    }

    #[test]
    fn admin_calls_need_an_admin() {
        let auth = auth(true);
        let app = auth.login("app", "app-pw", 0).unwrap().token;
        let root = auth.login("root", "s3cret", 0).unwrap().token;
        assert_eq!(auth.check(Some(&app), false, 0), Ok(()));
        assert_eq!(
            auth.check(Some(&app), true, 0),
            Err(Denied::NotAdmin("app".to_owned()))
        );
        assert_eq!(auth.check(Some(&root), true, 0), Ok(()));
    }

    #[test]
    fn with_auth_off_anything_goes_and_any_login_succeeds() {
        let auth = auth(false);
        assert_eq!(auth.check(None, true, 0), Ok(()));
        assert!(auth.login("whoever", "whatever", 0).is_ok());
    }
}
