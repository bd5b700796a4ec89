//! The provider side of a graceful stop, a drain: [`stop_provider`] first
//! takes a provider's instances of a service out of rotation (registers
//! them again, disabled: consumers stop choosing them but still see them),
//! waits (bounded) until a watch of the service shows them disabled or
//! gone, waits (bounded) for the calls counted by an [`InFlight`] to
//! finish, then deregisters them, and only then runs the caller's own
//! `close`. Deregistering first, as Dubbo does, would let a consumer that
//! saw the removal late find an instance already gone from its list while
//! its calls were still being answered; disabling first keeps the instance
//! listed until nothing is in flight. It owns the order and the bounds,
//! and reports what happened in a [`StopReport`]; it does not serve,
//! refuse or cancel calls (consumers that have not seen the change yet
//! must still be answered), and it creates no runtime.

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

    /// An execute limit (Dubbo's `executes`): counts the call as in flight
    /// unless `max` calls already are, in which case it is refused at
    /// once (`None`): a provider past its limit answers "busy" instead of
    /// queueing. 0 means no limit.
    pub fn try_enter(&self, max: usize) -> Option<InFlightGuard> {
        if max == 0 {
            return Some(self.enter());
        }
        self.counter
            .count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some(InFlightGuard {
            counter: self.counter.clone(),
        })
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
    /// How long taking the instances out of rotation and that change's
    /// propagation to the service's watchers may take together (default
    /// 10 s); the deregistration after the drain has the same bound. Past
    /// it the stop goes on: a consumer that still calls then gets an
    /// answer while the drain lasts.
    pub propagation: Duration,
    /// How long the calls in flight may take to finish once the change is
    /// seen (default 30 s). Past it the stop deregisters and closes with
    /// calls still in flight.
    pub drain: Duration,
}

impl Default for StopOptions {
    /// 10 s to see the change: several of the registry's push rounds and
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

/// How a request to the registry (disabling, deregistering) went.
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

/// Whether a watch of the service saw the instances leave rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// A watch of the service stopped offering the instances (it lists
    /// them disabled, or not at all) this long after they were disabled.
    Seen {
        /// Since the disabling was sent.
        after: Duration,
    },
    /// The propagation bound passed with the instances still offered (or
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
    /// How taking the instances out of rotation went.
    pub disabling: Deregistration,
    /// Whether and when a watch saw them out of rotation.
    pub removal: Removal,
    /// How long the drain took, up to the drain bound.
    pub drain_waited: Duration,
    /// The calls still in flight when the drain bound passed; 0 when
    /// every call finished in time.
    pub in_flight_left: usize,
    /// How the deregistration, after the drain, went.
    pub deregistration: Deregistration,
    /// What `close` returned.
    pub closed: T,
}

/// Stops a provider of `service` gracefully, by draining it:
///
/// 1. registers this client's `instances` of `service` again, disabled
///    ([`Client::register`]): consumers that see the change stop choosing
///    them, and still see them listed;
/// 2. waits until a watch of `service` no longer offers any of
///    `instances`' `ip:port` (lists it disabled or not at all);
/// 3. waits for the calls counted by `in_flight` to finish;
/// 4. deregisters this client's instances of `service`
///    ([`Client::deregister`]);
/// 5. runs `close` (shutting down the provider's own server, say) and
///    returns its output in the report.
///
/// Steps 1 and 2 share the `propagation` bound, step 3 has the `drain`
/// bound and step 4 the `propagation` bound again. No failure stops the
/// sequence: a provider going down must still drain and close, so a
/// failed or unanswered request only shortens the wait it would have
/// started. Everything is logged and reported.
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
        // Subscribed before the change is sent, so every list published
        // after it is a change this receiver sees, even one that equals
        // the list it started with.
        let changes = directory.changes();
        (directory, changes)
    });

    tracing::info!(%service, instances = instances.len(), "graceful stop: taking the instances out of rotation");
    let disabled: Vec<InstanceSpec> = instances
        .iter()
        .map(|spec| InstanceSpec {
            disabled: true,
            ..spec.clone()
        })
        .collect();
    let disabling = bounded(
        deadline,
        client.register(service.clone(), disabled),
        &service,
        "disabling",
    )
    .await;

    let removal = match watch {
        None => {
            tracing::warn!(%service, "graceful stop: the client is shut down; the change cannot be watched");
            Removal::NotWatched
        }
        Some((_directory, mut changes)) => {
            let seen = async {
                loop {
                    if changes.changed().await.is_err() {
                        // The directory is gone: nothing more will show.
                        return std::future::pending().await;
                    }
                    if !offers_any(&changes.borrow_and_update(), instances) {
                        return;
                    }
                }
            };
            match tokio::time::timeout_at(deadline, seen).await {
                Ok(()) => {
                    let after = start.elapsed();
                    tracing::info!(%service, ?after, "graceful stop: watchers see the instances out of rotation");
                    Removal::Seen { after }
                }
                Err(_) => {
                    tracing::warn!(%service, bound = ?options.propagation, "graceful stop: the change was not seen in time; draining anyway");
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
        tracing::warn!(%service, left = in_flight_left, bound = ?options.drain, "graceful stop: drain bound passed with calls in flight; deregistering anyway");
    }

    tracing::info!(%service, "graceful stop: deregistering");
    let deregistration = bounded(
        Instant::now() + options.propagation,
        client.deregister(service.clone()),
        &service,
        "deregistration",
    )
    .await;

    tracing::info!(%service, "graceful stop: closing");
    let closed = close.await;
    tracing::info!(%service, took = ?start.elapsed(), "graceful stop: closed");
    StopReport {
        disabling,
        removal,
        drain_waited,
        in_flight_left,
        deregistration,
        closed,
    }
}

/// A registry request of the stop, bounded by `deadline`.
async fn bounded(
    deadline: Instant,
    request: impl Future<Output = Result<(), ClientError>>,
    service: &ServiceKey,
    what: &str,
) -> Deregistration {
    match tokio::time::timeout_at(deadline, request).await {
        Ok(Ok(())) => Deregistration::Done,
        Ok(Err(e)) => {
            tracing::warn!(%service, error = %e, "graceful stop: {what} failed; going on");
            Deregistration::Failed(e)
        }
        Err(_) => {
            tracing::warn!(%service, "graceful stop: {what} unanswered; going on");
            Deregistration::TimedOut
        }
    }
}

/// Whether `list` offers any of `instances`: lists it enabled.
fn offers_any(list: &[crate::Instance], instances: &[InstanceSpec]) -> bool {
    list.iter().any(|listed| {
        listed.enabled
            && instances
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

    #[test]
    fn an_execute_limit_refuses_at_once_above_its_max_and_frees_on_drop() {
        let in_flight = InFlight::new();
        let first = in_flight.try_enter(2).expect("under the limit");
        let second = in_flight.try_enter(2).expect("at the limit");
        assert!(in_flight.try_enter(2).is_none(), "over the limit");
        assert_eq!(in_flight.count(), 2, "a refusal counts nothing");
        drop(first);
        let third = in_flight.try_enter(2).expect("room again");
        assert!(in_flight.try_enter(0).is_some(), "0 is no limit");
        drop((second, third));
        assert_eq!(in_flight.count(), 0);
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
            matches!(report.disabling, Deregistration::Failed(_)),
            "{report:?}"
        );
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
    fn an_instance_is_offered_while_listed_enabled_matched_by_ip_and_port() {
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
        assert!(offers_any(&[listed("10.0.0.1", 80)], &ours));
        assert!(!offers_any(
            &[listed("10.0.0.1", 81), listed("10.0.0.2", 80)],
            &ours
        ));
        assert!(!offers_any(&[], &ours));
        let disabled = crate::Instance {
            enabled: false,
            ..listed("10.0.0.1", 80)
        };
        assert!(!offers_any(&[disabled], &ours));
    }
}
