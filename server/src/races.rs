//! Client races on demand: what this node needs to put a Nacos client
//! into a race window on purpose and to show what happened in it.
//!
//! - **Holds**: a hold names a service (and optionally one connection).
//!   The first connection that subscribes to the service arms it; that
//!   connection's next request (other than a health check) is held before
//!   it is served, while the hold's action (an instance update, as Nacos'
//!   `PUT /nacos/v1/ns/instance` makes it) is applied and the push it
//!   causes is acknowledged by that connection; then the request is served.
//!   Without an action the request waits for the next change of the
//!   service, made by anyone, to be pushed and acknowledged. A hold fires
//!   once, and gives up after its timeout.
//! - **Acknowledgements**: the registry revision of the newest push of a
//!   service each connection acknowledged (kept by [`crate::push`]); the
//!   wait here is woken by every answer while somebody waits.
//! - **The trace**: for services named by a hold or traced on purpose, the
//!   order in which this node answered queries and subscriptions, sent
//!   pushes, had them acknowledged, held and released requests.
//!
//! Holds and traces are this node's own (a connection lives on one node),
//! not part of the replicated fault model. Nothing here costs the request
//! or push paths more than an atomic load while no hold is armed and no
//! service is traced.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use understudy_core::{InstanceKey, InstancePatch, Millis, ServiceKey};

/// Trace events kept; the oldest go first.
pub(crate) const EVENTS: usize = 4096;
/// Holds kept, fired ones included; the oldest fired ones go first.
const HOLDS: usize = 256;

/// What a hold is set up with.
#[derive(Debug, Clone)]
pub(crate) struct HoldSpec {
    /// The service whose subscription arms it, and whose push is awaited.
    pub(crate) service: ServiceKey,
    /// Only this connection arms it, when given.
    pub(crate) connection: Option<String>,
    /// Applied while the request is held; without one, the next change
    /// of the service by anyone is awaited.
    pub(crate) action: Option<HoldAction>,
    /// How long a request is held at most.
    pub(crate) timeout: Duration,
}

/// An instance update of the hold's service.
#[derive(Debug, Clone)]
pub(crate) struct HoldAction {
    /// The instance.
    pub(crate) key: InstanceKey,
    /// The change.
    pub(crate) patch: InstancePatch,
}

impl std::fmt::Display for HoldAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "update {}:", self.key)?;
        if let Some(enabled) = self.patch.enabled {
            write!(f, " enabled={enabled}")?;
        }
        if let Some(weight) = self.patch.weight {
            write!(f, " weight={weight}")?;
        }
        if let Some(metadata) = &self.patch.metadata {
            write!(f, " metadata={}", metadata.len())?;
        }
        Ok(())
    }
}

/// Where a hold is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// No connection has subscribed yet.
    Waiting,
    /// A connection subscribed; its next request will be held.
    Armed,
    /// Holding that request.
    Holding,
    /// The request went on; how it ended.
    Released(String),
    /// Cleared before it fired.
    Cleared,
}

#[derive(Debug)]
struct Hold {
    id: u64,
    spec: HoldSpec,
    stage: Stage,
    /// The connection that armed it.
    armed_by: Option<String>,
    /// The request it held.
    request: Option<String>,
}

/// A hold as the admin API shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HoldView {
    pub(crate) id: u64,
    pub(crate) namespace_id: String,
    pub(crate) service: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) connection_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) action: Option<String>,
    pub(crate) timeout_ms: u64,
    /// `waiting`, `armed`, `holding`, `released` or `cleared`.
    pub(crate) stage: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<String>,
}

impl Hold {
    fn view(&self) -> HoldView {
        let (stage, outcome) = match &self.stage {
            Stage::Waiting => ("waiting", None),
            Stage::Armed => ("armed", None),
            Stage::Holding => ("holding", None),
            Stage::Released(outcome) => ("released", Some(outcome.clone())),
            Stage::Cleared => ("cleared", None),
        };
        HoldView {
            id: self.id,
            namespace_id: self.spec.service.namespace.to_string(),
            service: self.spec.service.grouped_name(),
            connection_id: self.armed_by.clone().or(self.spec.connection.clone()),
            action: self.spec.action.as_ref().map(ToString::to_string),
            timeout_ms: u64::try_from(self.spec.timeout.as_millis()).unwrap_or(u64::MAX),
            stage,
            request: self.request.clone(),
            outcome,
        }
    }
}

/// A request held by a hold: what the holder needs.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The hold's id.
    pub(crate) id: u64,
    /// What it was set up with.
    pub(crate) spec: HoldSpec,
}

/// One traced event, as this node saw it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Event {
    /// Its place in this node's order.
    pub(crate) seq: u64,
    /// When, epoch ms.
    pub(crate) at_ms: Millis,
    pub(crate) connection_id: String,
    /// `queried`, `subscribed`, `unsubscribed`, `pushSent`, `pushAcked`,
    /// `pushFailed`, `held`, `actionProposed`, `actionApplied`,
    /// `actionFailed` or `released`.
    pub(crate) event: &'static str,
    pub(crate) namespace_id: String,
    pub(crate) service: String,
    /// The registry revision the answer or push showed, or the action made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    holds: VecDeque<Hold>,
    next_hold: u64,
    traced: BTreeSet<ServiceKey>,
    events: VecDeque<Event>,
    next_event: u64,
    /// Pushes of traced services not answered yet, by connection and
    /// request id: the service and the revision they showed.
    sent: HashMap<(String, String), (ServiceKey, u64)>,
}

/// Holds, acknowledgement waits and the trace of one node.
#[derive(Debug, Default)]
pub(crate) struct Races {
    inner: Mutex<Inner>,
    /// Whether any service is traced.
    tracing: AtomicBool,
    /// Holds waiting or armed.
    pending: AtomicUsize,
    /// Woken on push answers while `waiting` is not zero.
    answered: Notify,
    waiting: AtomicUsize,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    fn record(
        &mut self,
        connection: &str,
        key: &ServiceKey,
        event: &'static str,
        revision: Option<u64>,
        detail: Option<String>,
        now: Millis,
    ) {
        if self.events.len() >= EVENTS {
            self.events.pop_front();
        }
        self.next_event += 1;
        self.events.push_back(Event {
            seq: self.next_event,
            at_ms: now,
            connection_id: connection.to_owned(),
            event,
            namespace_id: key.namespace.to_string(),
            service: key.grouped_name(),
            revision,
            detail,
        });
    }
}

impl Races {
    /// Sets up a hold; its service is traced from now on.
    pub(crate) fn add_hold(&self, spec: HoldSpec) -> HoldView {
        let mut inner = lock(&self.inner);
        inner.traced.insert(spec.service.clone());
        self.tracing.store(true, Ordering::Release);
        if inner.holds.len() >= HOLDS {
            let fired = inner
                .holds
                .iter()
                .position(|h| matches!(h.stage, Stage::Released(_) | Stage::Cleared));
            if let Some(at) = fired {
                inner.holds.remove(at);
            }
        }
        inner.next_hold += 1;
        let hold = Hold {
            id: inner.next_hold,
            spec,
            stage: Stage::Waiting,
            armed_by: None,
            request: None,
        };
        let view = hold.view();
        inner.holds.push_back(hold);
        self.pending.fetch_add(1, Ordering::AcqRel);
        view
    }

    /// Every hold, oldest first.
    pub(crate) fn holds(&self) -> Vec<HoldView> {
        lock(&self.inner).holds.iter().map(Hold::view).collect()
    }

    /// Clears every hold that has not fired, and lets a request being
    /// held go on at once. Returns how many were cleared.
    pub(crate) fn clear_holds(&self) -> usize {
        let mut inner = lock(&self.inner);
        let mut cleared = 0;
        for hold in &mut inner.holds {
            if matches!(hold.stage, Stage::Waiting | Stage::Armed | Stage::Holding) {
                if hold.stage != Stage::Holding {
                    self.pending.fetch_sub(1, Ordering::AcqRel);
                }
                hold.stage = Stage::Cleared;
                cleared += 1;
            }
        }
        drop(inner);
        self.answered.notify_waiters();
        cleared
    }

    /// Whether hold `id` was cleared.
    pub(crate) fn cleared(&self, id: u64) -> bool {
        lock(&self.inner)
            .holds
            .iter()
            .any(|h| h.id == id && h.stage == Stage::Cleared)
    }

    /// Traces `key` from now on.
    pub(crate) fn trace(&self, key: ServiceKey) {
        lock(&self.inner).traced.insert(key);
        self.tracing.store(true, Ordering::Release);
    }

    /// The traced events, oldest first, narrowed to a service and a
    /// connection when given.
    pub(crate) fn events(&self, key: Option<&ServiceKey>, connection: Option<&str>) -> Vec<Event> {
        let inner = lock(&self.inner);
        let service = key.map(|k| (k.namespace.to_string(), k.grouped_name()));
        inner
            .events
            .iter()
            .filter(|e| {
                service
                    .as_ref()
                    .is_none_or(|(ns, name)| e.namespace_id == *ns && e.service == *name)
            })
            .filter(|e| connection.is_none_or(|c| e.connection_id == c))
            .cloned()
            .collect()
    }

    /// Records `event` of connection `connection` about `key`, if `key` is
    /// traced.
    pub(crate) fn record(
        &self,
        connection: &str,
        key: &ServiceKey,
        event: &'static str,
        revision: Option<u64>,
        detail: Option<String>,
        now: Millis,
    ) {
        if let Some(mut inner) = self.traced(key) {
            inner.record(connection, key, event, revision, detail, now);
        }
    }

    /// The state, locked, when `key` is traced (an atomic load when
    /// nothing is).
    fn traced(&self, key: &ServiceKey) -> Option<MutexGuard<'_, Inner>> {
        if !self.tracing.load(Ordering::Acquire) {
            return None;
        }
        let inner = lock(&self.inner);
        inner.traced.contains(key).then_some(inner)
    }

    /// Connection `connection` subscribed to `key` and was answered with
    /// revision `revision`: traced, and the first hold of `key` waiting
    /// for it is armed.
    pub(crate) fn subscribed(
        &self,
        connection: &str,
        key: &ServiceKey,
        revision: u64,
        now: Millis,
    ) {
        let Some(mut inner) = self.traced(key) else {
            return;
        };
        inner.record(connection, key, "subscribed", Some(revision), None, now);
        let waiting = inner.holds.iter_mut().find(|h| {
            h.stage == Stage::Waiting
                && h.spec.service == *key
                && h.spec.connection.as_deref().is_none_or(|c| c == connection)
        });
        if let Some(hold) = waiting {
            hold.stage = Stage::Armed;
            hold.armed_by = Some(connection.to_owned());
        }
    }

    /// The hold armed by `connection`, if any: its stage becomes holding,
    /// and what the request was (`request()`, asked only then) is
    /// recorded. The caller must [`Races::release`] it.
    pub(crate) fn take_armed(
        &self,
        connection: &str,
        request: impl FnOnce() -> String,
        now: Millis,
    ) -> Option<Held> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut inner = lock(&self.inner);
        let hold = inner
            .holds
            .iter_mut()
            .find(|h| h.stage == Stage::Armed && h.armed_by.as_deref() == Some(connection))?;
        let request = request();
        hold.stage = Stage::Holding;
        hold.request = Some(request.clone());
        self.pending.fetch_sub(1, Ordering::AcqRel);
        let held = Held {
            id: hold.id,
            spec: hold.spec.clone(),
        };
        let detail = Some(format!("hold {}: {request}", held.id));
        inner.record(connection, &held.spec.service, "held", None, detail, now);
        Some(held)
    }

    /// Hold `id` let its request go on, for `outcome`.
    pub(crate) fn release(&self, id: u64, connection: &str, outcome: String, now: Millis) {
        let mut inner = lock(&self.inner);
        let Some(hold) = inner.holds.iter_mut().find(|h| h.id == id) else {
            return;
        };
        if hold.stage == Stage::Holding {
            hold.stage = Stage::Released(outcome.clone());
        }
        let key = hold.spec.service.clone();
        let detail = Some(format!("hold {id}: {outcome}"));
        inner.record(connection, &key, "released", None, detail, now);
    }

    /// `connection` closed: a hold it armed ends unfired (it has no next
    /// request), and its unanswered pushes are forgotten.
    pub(crate) fn closed(&self, connection: &str, now: Millis) {
        if self.pending.load(Ordering::Acquire) == 0 && !self.tracing.load(Ordering::Acquire) {
            return;
        }
        let mut inner = lock(&self.inner);
        inner.sent.retain(|(c, _), _| c != connection);
        let mut ended = Vec::new();
        for hold in &mut inner.holds {
            if hold.stage == Stage::Armed && hold.armed_by.as_deref() == Some(connection) {
                let outcome = "the connection closed before its next request".to_owned();
                hold.stage = Stage::Released(outcome.clone());
                self.pending.fetch_sub(1, Ordering::AcqRel);
                ended.push((
                    hold.spec.service.clone(),
                    format!("hold {}: {outcome}", hold.id),
                ));
            }
        }
        for (key, detail) in ended {
            inner.record(connection, &key, "released", None, Some(detail), now);
        }
    }

    /// A push of `key` went out to `connection` under `request_id`,
    /// showing `revision`.
    pub(crate) fn push_sent(
        &self,
        connection: &str,
        key: &ServiceKey,
        request_id: &str,
        revision: u64,
        now: Millis,
    ) {
        let Some(mut inner) = self.traced(key) else {
            return;
        };
        inner.record(connection, key, "pushSent", Some(revision), None, now);
        // Pushes that time out are never answered: bounded all the same.
        if inner.sent.len() >= EVENTS {
            inner.sent.clear();
        }
        inner.sent.insert(
            (connection.to_owned(), request_id.to_owned()),
            (key.clone(), revision),
        );
    }

    /// `connection` answered its push `request_id`.
    pub(crate) fn push_answered(
        &self,
        connection: &str,
        request_id: &str,
        success: bool,
        now: Millis,
    ) {
        if self.tracing.load(Ordering::Acquire) {
            let mut inner = lock(&self.inner);
            let sent = inner
                .sent
                .remove(&(connection.to_owned(), request_id.to_owned()));
            if let Some((key, revision)) = sent {
                let event = if success { "pushAcked" } else { "pushFailed" };
                inner.record(connection, &key, event, Some(revision), None, now);
            }
        }
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.answered.notify_waiters();
        }
    }

    /// Waits until `done` holds, checking it again after every push
    /// answer (and when a hold is cleared), for at most `timeout`.
    /// Answers whether it held.
    pub(crate) async fn wait_for(&self, timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.waiting);
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if done() {
                return true;
            }
            if !wake_or_deadline(answered, deadline).await {
                return done();
            }
        }
    }
}

/// Counts a waiter for as long as it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `true` when `woken` fired first, `false` at the deadline.
async fn wake_or_deadline(woken: impl Future<Output = ()>, deadline: tokio::time::Instant) -> bool {
    tokio::select! {
        () = woken => true,
        () = tokio::time::sleep_until(deadline) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ServiceKey {
        ServiceKey::parse("", "", name).unwrap()
    }

    fn query() -> String {
        "ServiceQueryRequest".into()
    }

    fn spec(name: &str, connection: Option<&str>) -> HoldSpec {
        HoldSpec {
            service: key(name),
            connection: connection.map(str::to_owned),
            action: None,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_hold_is_armed_by_the_first_matching_subscription_and_fires_once() {
        let races = Races::default();
        races.add_hold(spec("a", Some("c2")));
        assert!(races.take_armed("c2", query, 1).is_none(), "not armed yet");
        races.subscribed("c1", &key("a"), 3, 1);
        races.subscribed("c2", &key("b"), 3, 1);
        assert!(
            races.take_armed("c1", query, 2).is_none(),
            "another connection's"
        );
        races.subscribed("c2", &key("a"), 3, 2);
        let held = races
            .take_armed("c2", || "SubscribeServiceRequest b".into(), 3)
            .expect("armed by c2");
        assert!(races.take_armed("c2", query, 4).is_none(), "fires once");
        assert_eq!(races.holds()[0].stage, "holding");
        races.release(held.id, "c2", "acknowledged".into(), 5);
        let view = &races.holds()[0];
        assert_eq!(
            (view.stage, view.outcome.as_deref()),
            ("released", Some("acknowledged"))
        );
        let events: Vec<_> = races
            .events(None, Some("c2"))
            .iter()
            .map(|e| e.event)
            .collect();
        assert_eq!(
            events,
            ["subscribed", "held", "released"],
            "b is not traced"
        );
    }

    #[test]
    fn pushes_of_traced_services_are_logged_with_their_answers() {
        let races = Races::default();
        races.push_sent("c", &key("a"), "1", 4, 1);
        assert!(races.events(None, None).is_empty(), "nothing traced");
        races.trace(key("a"));
        races.push_sent("c", &key("a"), "2", 5, 2);
        races.push_sent("c", &key("b"), "3", 5, 2);
        races.push_answered("c", "3", true, 3);
        races.push_answered("c", "2", false, 3);
        let events: Vec<_> = races
            .events(Some(&key("a")), None)
            .iter()
            .map(|e| (e.event, e.revision))
            .collect();
        assert_eq!(events, [("pushSent", Some(5)), ("pushFailed", Some(5))]);
    }

    #[test]
    fn clearing_lets_a_held_request_go_and_disarms_the_rest() {
        let races = Races::default();
        races.add_hold(spec("a", None));
        races.add_hold(spec("b", None));
        races.subscribed("c", &key("a"), 1, 1);
        let held = races.take_armed("c", query, 2).unwrap();
        assert_eq!(races.clear_holds(), 2);
        assert!(races.cleared(held.id));
        races.subscribed("c", &key("b"), 1, 3);
        assert!(
            races.take_armed("c", query, 4).is_none(),
            "cleared holds never arm"
        );
        assert_eq!(races.pending.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_hold_armed_by_a_connection_that_closes_ends_unfired() {
        let races = Races::default();
        races.add_hold(spec("a", None));
        races.subscribed("c", &key("a"), 1, 1);
        races.closed("c", 2);
        let view = &races.holds()[0];
        assert_eq!(view.stage, "released");
        assert_eq!(
            view.outcome.as_deref(),
            Some("the connection closed before its next request")
        );
        assert_eq!(
            races.pending.load(Ordering::Acquire),
            0,
            "requests pay nothing again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_is_woken_by_an_answer_and_ends_at_its_deadline() {
        let races = std::sync::Arc::new(Races::default());
        let flag = std::sync::Arc::new(AtomicBool::new(false));
        let (r, f) = (races.clone(), flag.clone());
        let started = tokio::time::Instant::now();
        let waiter = tokio::spawn(async move {
            r.wait_for(Duration::from_secs(10), || f.load(Ordering::Acquire))
                .await
        });
        while races.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        flag.store(true, Ordering::Release);
        races.push_answered("c", "1", true, 1);
        assert!(waiter.await.unwrap());
        // Time stands still unless the waiter sleeps to its deadline.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "woken, not timed out"
        );
        let never = races.wait_for(Duration::from_secs(1), || false).await;
        assert!(!never);
        assert_eq!(races.waiting.load(Ordering::Acquire), 0);
    }
}
