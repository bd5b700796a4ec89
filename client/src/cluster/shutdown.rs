//! The provider side of a graceful stop, Dubbo's "deregister, wait,
//! close": [`stop_provider`] deregisters a provider's instances of a
//! service, waits (bounded) until a watch of that service no longer shows
//! them, waits (bounded) for the calls counted by an [`InFlight`] to
//! finish, and only then runs the caller's own `close`. It owns the order
//! and the bounds, and reports what happened in a [`StopReport`]; it does
//! not serve, refuse or cancel calls (consumers that have not seen the
//! removal yet must still be answered), and it creates no runtime.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use understudy_core::ServiceKey;

use crate::{Client, ClientError, InstanceSpec};

/// The shared state behind an [`InFlight`] and its guards.
#[derive(Debug, Default)]
struct Counter {
    count: AtomicUsize,
    /// Woken when the count drops to zero.
    idle: Notify,
}

/// Counts a provider's calls in flight. Cheap to clone: clones share the
/// count, so the server's handlers and the stop see the same number.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    counter: Arc<Counter>,
}

/// Holds one call in its [`InFlight`] count until dropped.
#[derive(Debug)]
#[must_use = "the call counts as in flight only while the guard is held"]
pub struct InFlightGuard {
    counter: Arc<Counter>,
}

impl InFlight {
    /// A counter with no call in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts a call as in flight until the returned guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.counter.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard {
            counter: self.counter.clone(),
        }
    }

    /// The calls in flight now.
    pub fn count(&self) -> usize {
        self.counter.count.load(Ordering::SeqCst)
    }

    /// Waits until no call is in flight; returns at once if none is.
    /// Calls entered while waiting are waited for too. Bound it with
    /// `tokio::time::timeout`.
    pub async fn idle(&self) {
        loop {
            let notified = self.counter.idle.notified();
            tokio::pin!(notified);
            // Registered before the count is read, so a guard dropped
            // between the read and the `.await` still wakes this waiter.
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.counter.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.counter.idle.notify_waiters();
        }
    }
}

/// The bounds of a graceful stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopOptions {
    /// How long the deregistration and the removal's propagation to the
    /// service's watchers may take together (default 10 s). Past it the
    /// stop drains anyway: a consumer that still calls then gets an
    /// answer while the drain lasts.
    pub propagation: Duration,
    /// How long the calls in flight may take to finish once the removal
    /// is seen (default 30 s). Past it `close` runs with calls still in
    /// flight.
    pub drain: Duration,
}

impl Default for StopOptions {
    /// 10 s to see the removal: several of the registry's push rounds and
    /// a client's reconnect. 30 s to drain: longer than the usual call
    /// timeout, so a call that is still running after it has already
    /// failed at its caller.
    fn default() -> Self {
        Self {
            propagation: Duration::from_secs(10),
            drain: Duration::from_secs(30),
        }
    }
}

/// How the deregistration went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deregistration {
    /// The registry acknowledged it.
    Done,
    /// The registry or the client refused it; the stop went on.
    Failed(ClientError),
    /// No answer came within the propagation bound (the registry is
    /// unreachable); the stop went on.
    TimedOut,
}

/// Whether the removal was seen by a watch of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// A watch of the service stopped listing the instances this long
    /// after the deregistration was sent.
    Seen {
        /// Since the deregistration was sent.
        after: Duration,
    },
    /// The propagation bound passed with the instances still listed (or
    /// the watch never got a view).
    NotSeen {
        /// How long the stop waited: the propagation bound.
        waited: Duration,
    },
    /// Not watched: the client is shut down, so no watch could show it.
    NotWatched,
}

/// What a graceful stop did, step by step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport<T> {
    /// How the deregistration went.
    pub deregistration: Deregistration,
    /// Whether and when the removal was seen.
    pub removal: Removal,
    /// How long the drain took, up to the drain bound.
    pub drain_waited: Duration,
    /// The calls still in flight when the drain bound passed; 0 when
    /// every call finished in time.
    pub in_flight_left: usize,
    /// What `close` returned.
    pub closed: T,
}

/// Stops a provider of `service` gracefully, in Dubbo's order:
///
/// 1. deregisters this client's instances of `service`
///    ([`Client::deregister`]);
/// 2. waits until a watch of `service` no longer lists any of
///    `instances`' `ip:port`: the registry has pushed the removal to its
///    watchers, so consumers stop picking this provider;
/// 3. waits for the calls counted by `in_flight` to finish;
/// 4. runs `close` (shutting down the provider's own server, say) and
///    returns its output in the report.
///
/// Steps 1 and 2 share the `propagation` bound and step 3 has the `drain`
/// bound of `options`. No failure stops the sequence: a provider going
/// down must still drain and close, so a failed or unanswered
/// deregistration is reported and the stop goes on.
///
/// The watch opened for step 2 lives until the client is shut down. Must
/// be called inside a tokio runtime; it creates none.
pub async fn stop_provider<C: Future>(
    client: &Client,
    service: ServiceKey,
    instances: &[InstanceSpec],
    in_flight: &InFlight,
    options: StopOptions,
    close: C,
) -> StopReport<C::Output> {
    let start = Instant::now();
    let deadline = start + options.propagation;
    // A shut-down client's watches end at once: watching would only burn
    // the whole bound.
    let watch = (!client.inner.cancel.is_cancelled()).then(|| {
        let directory = client.directory(service.clone());
        // Subscribed before the deregistration is sent, so every list
        // published after it is a change this receiver sees, even one
        // that equals the list it started with.
        let changes = directory.changes();
        (directory, changes)
    });

    tracing::info!(%service, instances = instances.len(), "graceful stop: deregistering");
    let deregistration = match tokio::time::timeout_at(deadline, client.deregister(service.clone()))
        .await
    {
        Ok(Ok(())) => Deregistration::Done,
        Ok(Err(e)) => {
            tracing::warn!(%service, error = %e, "graceful stop: deregistration failed; stopping anyway");
            Deregistration::Failed(e)
        }
        Err(_) => {
            tracing::warn!(%service, bound = ?options.propagation, "graceful stop: deregistration unanswered; stopping anyway");
            Deregistration::TimedOut
        }
    };

    let removal = match watch {
        None => {
            tracing::warn!(%service, "graceful stop: the client is shut down; the removal cannot be watched");
            Removal::NotWatched
        }
        Some((_directory, mut changes)) => {
            let seen = async {
                loop {
                    if changes.changed().await.is_err() {
                        // The directory is gone: nothing more will show.
                        return std::future::pending().await;
                    }
                    if !lists_any(&changes.borrow_and_update(), instances) {
                        return;
                    }
                }
            };
            match tokio::time::timeout_at(deadline, seen).await {
                Ok(()) => {
                    let after = start.elapsed();
                    tracing::info!(%service, ?after, "graceful stop: the removal is visible to watchers");
                    Removal::Seen { after }
                }
                Err(_) => {
                    tracing::warn!(%service, bound = ?options.propagation, "graceful stop: the removal was not seen in time; draining anyway");
                    Removal::NotSeen {
                        waited: options.propagation,
                    }
                }
            }
        }
    };

    tracing::info!(%service, in_flight = in_flight.count(), "graceful stop: draining calls in flight");
    let drain_start = Instant::now();
    let in_flight_left = match tokio::time::timeout(options.drain, in_flight.idle()).await {
        Ok(()) => 0,
        Err(_) => in_flight.count(),
    };
    let drain_waited = drain_start.elapsed();
    if in_flight_left == 0 {
        tracing::info!(%service, took = ?drain_waited, "graceful stop: drained");
    } else {
        tracing::warn!(%service, left = in_flight_left, bound = ?options.drain, "graceful stop: drain bound passed with calls in flight; closing anyway");
    }

    tracing::info!(%service, "graceful stop: closing");
    let closed = close.await;
    tracing::info!(%service, took = ?start.elapsed(), "graceful stop: closed");
    StopReport {
        deregistration,
        removal,
        drain_waited,
        in_flight_left,
        closed,
    }
}

/// Whether `list` still shows any of `instances` (by ip and port: the
/// cluster a spec leaves empty is filled in by the registry).
fn lists_any(list: &[crate::Instance], instances: &[InstanceSpec]) -> bool {
    list.iter().any(|listed| {
        instances
            .iter()
            .any(|spec| listed.ip == spec.ip && listed.port == spec.port)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_drain_wait_returns_as_soon_as_the_last_guard_drops() {
        let in_flight = InFlight::new();
        let first = in_flight.enter();
        let second = in_flight.clone().enter();
        assert_eq!(in_flight.count(), 2);
        let start = Instant::now();
        let calls = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(first);
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(second);
        });
        tokio::time::timeout(Duration::from_secs(5), in_flight.idle())
            .await
            .expect("drained before the bound");
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        assert_eq!(in_flight.count(), 0);
        calls.await.expect("the calls task finished");
    }

    #[tokio::test(start_paused = true)]
    async fn the_drain_wait_with_no_call_in_flight_returns_at_once() {
        let in_flight = InFlight::new();
        drop(in_flight.enter());
        let start = Instant::now();
        in_flight.idle().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_drain_bound_is_honoured_while_a_call_is_held() {
        let in_flight = InFlight::new();
        let _held = in_flight.enter();
        let start = Instant::now();
        let waited = tokio::time::timeout(Duration::from_secs(5), in_flight.idle()).await;
        assert!(waited.is_err(), "the wait ended with a call in flight");
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(in_flight.count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_entered_during_the_drain_is_waited_for_too() {
        let in_flight = InFlight::new();
        let first = in_flight.enter();
        let counter = in_flight.clone();
        let start = Instant::now();
        let calls = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let late = counter.enter();
            drop(first);
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(late);
        });
        in_flight.idle().await;
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        calls.await.expect("the calls task finished");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_on_a_shut_down_client_still_drains_and_closes_without_watching() {
        let client = Client::builder()
            .endpoint("127.0.0.1:9", None)
            .build()
            .expect("a valid client");
        client.shutdown().await;
        let in_flight = InFlight::new();
        let call = in_flight.enter();
        let start = Instant::now();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(call);
        });
        let service = ServiceKey::parse("", "", "gone").expect("a valid key");
        let report = stop_provider(
            &client,
            service,
            &[InstanceSpec::new("10.0.0.1", 80)],
            &in_flight,
            StopOptions::default(),
            async { "closed" },
        )
        .await;
        assert!(
            matches!(report.deregistration, Deregistration::Failed(_)),
            "{report:?}"
        );
        assert_eq!(report.removal, Removal::NotWatched);
        assert_eq!(report.in_flight_left, 0);
        assert_eq!(report.drain_waited, Duration::from_millis(50));
        assert_eq!(report.closed, "closed");
        assert_eq!(start.elapsed(), Duration::from_millis(50));
        release.await.expect("the release task finished");
    }

    #[test]
    fn a_removal_is_matched_by_ip_and_port_whatever_the_cluster() {
        let listed = |ip: &str, port: u16| crate::Instance {
            instance_id: format!("{ip}#{port}#DEFAULT"),
            ip: ip.to_owned(),
            port,
            weight: 1.0,
            healthy: true,
            enabled: true,
            cluster: "DEFAULT".to_owned(),
            zone: String::new(),
            metadata: Default::default(),
        };
        let ours = [InstanceSpec::new("10.0.0.1", 80)];
        assert!(lists_any(&[listed("10.0.0.1", 80)], &ours));
        assert!(!lists_any(
            &[listed("10.0.0.1", 81), listed("10.0.0.2", 80)],
            &ours
        ));
        assert!(!lists_any(&[], &ours));
    }
}
