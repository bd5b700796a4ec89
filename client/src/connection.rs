//! What every background task of a client shares: its endpoints (its own
//! DC's first), credentials and token, reconnect backoff, the return to
//! its own DC, and the cancellation and task tracker that own the tasks.
//! The client handle (`client.rs`) builds it; directories, views and the
//! provider session hold it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::LoginRequest;

/// What a directory does with an update that would empty its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmptyProtection {
    /// Keep the last non-empty list unless the last instance was
    /// explicitly deregistered (the default).
    #[default]
    UnlessDeregistered,
    /// Always apply updates, empty or not.
    Off,
}

/// An endpoint and its datacenter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) uri: String,
    pub(crate) dc: Option<String>,
    /// The CA to check an `https` endpoint's certificate against.
    pub(crate) tls_ca: Option<Arc<[u8]>>,
}

/// A user's name and password, exchanged for a token with the server.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) username: String,
    pub(crate) password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) endpoints: Vec<Endpoint>,
    /// How many of the first endpoints are the local DC's (0: no home).
    pub(crate) home: usize,
    pub(crate) probe_min: Duration,
    pub(crate) probe_max: Duration,
    /// When the client was built, epoch ms: the provider's start time its
    /// registrations carry (metadata `timestamp`, as Dubbo sets it).
    pub(crate) started_ms: u64,
    pub(crate) backoff_min: Duration,
    pub(crate) backoff_max: Duration,
    /// The backoff's jitter draws.
    pub(crate) jitter: std::sync::Mutex<rand::rngs::StdRng>,
    pub(crate) connect_timeout: Duration,
    pub(crate) empty_protection: EmptyProtection,
    pub(crate) keepalive: Duration,
    pub(crate) cache_dir: Option<std::path::PathBuf>,
    pub(crate) cancel: CancellationToken,
    pub(crate) tasks: TaskTracker,
    pub(crate) credentials: Option<Credentials>,
    /// The token and when to log in again.
    pub(crate) token: tokio::sync::Mutex<Option<(String, tokio::time::Instant)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Inner {
    /// `message` as a call carrying this client's token, logging in over
    /// `channel` first when there is no token or it is past half its life.
    pub(crate) async fn request<T>(
        &self,
        channel: &tonic::transport::Channel,
        message: T,
    ) -> Result<tonic::Request<T>, String> {
        let mut request = tonic::Request::new(message);
        let Some(credentials) = &self.credentials else {
            return Ok(request);
        };
        let mut token = self.token.lock().await;
        let now = tokio::time::Instant::now();
        let fresh = token.as_ref().filter(|(_, renew_at)| *renew_at > now);
        let value = match fresh {
            Some((value, _)) => value.clone(),
            None => {
                let answer = RegistryClient::new(channel.clone())
                    .login(LoginRequest {
                        username: credentials.username.clone(),
                        password: credentials.password.clone(),
                    })
                    .await
                    .map_err(|s| format!("login as {}: {}", credentials.username, s.message()))?
                    .into_inner();
                let renew_at = now + Duration::from_secs(answer.ttl_seconds / 2);
                *token = Some((answer.token.clone(), renew_at));
                answer.token
            }
        };
        let bearer = format!("Bearer {value}")
            .parse()
            .map_err(|_| "the server issued a token that is no header value".to_owned())?;
        request.metadata_mut().insert("authorization", bearer);
        Ok(request)
    }

    /// A refused call's message; a refused token is dropped, so the next
    /// attempt logs in again.
    pub(crate) async fn refused(&self, status: tonic::Status) -> String {
        if status.code() == tonic::Code::Unauthenticated {
            *self.token.lock().await = None;
        }
        status.message().to_owned()
    }

    /// The reconnect delay after `failures` consecutive failures, with
    /// jitter between half and all of the exponential step.
    pub(crate) fn backoff(&self, failures: u32) -> Duration {
        let step = self
            .backoff_min
            .saturating_mul(1u32 << failures.min(16))
            .min(self.backoff_max);
        let jitter: f64 = rand::RngExt::random_range(
            &mut *self.jitter.lock().unwrap_or_else(|p| p.into_inner()),
            0.5..=1.0,
        );
        step.mul_f64(jitter)
    }
}

/// Epoch milliseconds now.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Waits until one of the local DC's endpoints answers a listing,
/// probing after the client's `probe_min`, then backing off to its
/// `probe_max`; answers its index. Never returns when the client has no
/// home or is gone. Holds the client only while probing.
pub(crate) async fn home_answers(inner: &Weak<Inner>) -> usize {
    let Some((home, mut wait, max)) = inner.upgrade().map(|i| (i.home, i.probe_min, i.probe_max))
    else {
        return std::future::pending().await;
    };
    if home == 0 {
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(wait).await;
        let Some(client) = inner.upgrade() else {
            return std::future::pending().await;
        };
        for index in 0..home {
            if client.answers(&client.endpoints[index]).await {
                return index;
            }
        }
        wait = (wait * 2).min(max);
    }
}

impl Inner {
    /// Whether `endpoint` answers a cheap call within the connect timeout.
    async fn answers(&self, endpoint: &Endpoint) -> bool {
        let probe = async {
            let channel = connect(endpoint, self.connect_timeout).await.ok()?;
            let request = self
                .request(&channel, understudy_proto::native::ListNamespacesRequest {})
                .await
                .ok()?;
            RegistryClient::new(channel)
                .list_namespaces(request)
                .await
                .ok()
        };
        tokio::time::timeout(self.connect_timeout * 2, probe)
            .await
            .ok()
            .flatten()
            .is_some()
    }
}

/// Where a reconnecting task stands: consecutive failures and the next
/// endpoint to try.
#[derive(Debug, Default)]
pub(crate) struct Reconnect {
    failures: u32,
    next: usize,
}

impl Reconnect {
    /// The endpoint to try now.
    pub(crate) fn endpoint(&self, inner: &Inner) -> Endpoint {
        inner.endpoints[self.index(inner)].clone()
    }

    fn index(&self, inner: &Inner) -> usize {
        self.next % inner.endpoints.len()
    }

    /// Whether the task follows another DC's endpoint while it has a home.
    pub(crate) fn away(&self, inner: &Inner) -> bool {
        inner.home > 0 && self.index(inner) >= inner.home
    }

    /// Go to the home endpoint `index` next, at once.
    pub(crate) fn go_home(&mut self, index: usize) {
        self.next = index;
        self.failures = 0;
    }

    /// The connection works (it delivered something).
    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Records a failure and returns the delay before the next attempt;
    /// from the second failure in a row, the next endpoint is tried.
    pub(crate) fn failed(&mut self, inner: &Inner) -> Duration {
        self.failures = self.failures.saturating_add(1);
        if self.failures > 1 {
            self.next += 1;
        }
        inner.backoff(self.failures)
    }
}

/// Opens a channel to an endpoint.
pub(crate) async fn connect(
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<tonic::transport::Channel, String> {
    let mut channel = tonic::transport::Endpoint::from_shared(endpoint.uri.clone())
        .map_err(|e| e.to_string())?
        .connect_timeout(timeout);
    if endpoint.uri.starts_with("https://") {
        let mut tls = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = &endpoint.tls_ca {
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(ca));
        }
        channel = channel.tls_config(tls).map_err(|e| e.to_string())?;
    }
    channel.connect().await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Client;

    fn backoffs(seed: u64) -> Vec<Duration> {
        let client = Client::builder()
            .endpoint("127.0.0.1:1", None)
            .backoff(Duration::from_millis(100), Duration::from_secs(1))
            .seed(seed)
            .build()
            .unwrap();
        (0..8)
            .map(|failures| client.inner.backoff(failures))
            .collect()
    }

    /// The backoff's jitter comes from the client's seeded draws: the same
    /// seed replays the same delays, another seed draws others, and each
    /// delay is between half and all of its exponential step.
    #[test]
    fn backoff_jitter_is_drawn_from_the_seeded_rng() {
        let first = backoffs(7);
        assert_eq!(first, backoffs(7));
        assert_ne!(first, backoffs(8));
        for (failures, delay) in first.iter().enumerate() {
            let step = Duration::from_millis(100 << failures).min(Duration::from_secs(1));
            assert!(
                *delay >= step / 2 && *delay <= step,
                "after {failures} failures: {delay:?} is not within half of {step:?} and it"
            );
        }
    }
}
