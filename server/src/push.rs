//! Push fan-out shared by every subscriber protocol: which subscriber
//! watches which service (and with which cluster filter), and per
//! subscription whether a push is due, in flight or to be retried.
//!
//! Subscribe-then-snapshot: a subscription is installed before its first
//! view is rendered, and every applied change marks the subscriptions of
//! its service dirty, so no change can fall between the snapshot and the
//! pushes. Coalescing is adaptive: a dirty subscription is pushed at once
//! unless a push to it is still unacknowledged, in which case later
//! changes merge into the next push, rendered from the newest state. The
//! backlog per subscriber is therefore bounded by its subscriptions, never
//! by the number of changes. Rendering happens under the subscriber's lock
//! together with the `lastRefTime` it is stamped with, so a later stamp
//! always carries a state at least as new.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use understudy_core::{ClusterName, Millis};

/// What can be subscribed to: services (naming) and config items.
pub(crate) trait Topic:
    Ord + Hash + Clone + std::fmt::Debug + Send + Sync + 'static
{
}

impl<T: Ord + Hash + Clone + std::fmt::Debug + Send + Sync + 'static> Topic for T {}

/// The subscribers of one topic, by subscriber id.
type Subscribers<K> = HashMap<u64, Arc<Subscriber<K>>>;

/// All subscriptions, by topic.
#[derive(Debug)]
pub(crate) struct Hub<K: Topic> {
    services: Mutex<HashMap<K, Subscribers<K>>>,
}

impl<K: Topic> Default for Hub<K> {
    fn default() -> Self {
        Self {
            services: Mutex::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K: Topic> Hub<K> {
    /// Marks the subscriptions of every changed topic dirty.
    pub(crate) fn changed<'a>(&self, keys: impl IntoIterator<Item = &'a K>) {
        let services = lock(&self.services);
        for key in keys {
            for subscriber in services.get(key).into_iter().flat_map(HashMap::values) {
                subscriber.mark_dirty(key);
            }
        }
    }

    /// Installs a subscription, held back from pushes until
    /// [`Subscriber::release`]: the caller renders the first view after
    /// this returns, then releases. A subscriber that holds `max`
    /// subscriptions gets no new one: the error is how many it holds.
    pub(crate) fn subscribe(
        &self,
        subscriber: &Arc<Subscriber<K>>,
        key: &K,
        clusters_raw: &str,
        clusters: Vec<ClusterName>,
        max: usize,
    ) -> Result<(), Full> {
        let mut services = lock(&self.services);
        subscriber.install(key, clusters_raw, clusters, max)?;
        services
            .entry(key.clone())
            .or_default()
            .insert(subscriber.id, subscriber.clone());
        Ok(())
    }

    /// Removes a subscriber's subscriptions to `key`.
    pub(crate) fn unsubscribe(&self, subscriber: &Subscriber<K>, key: &K) {
        let mut services = lock(&self.services);
        if let Some(subs) = services.get_mut(key) {
            subs.remove(&subscriber.id);
            if subs.is_empty() {
                services.remove(key);
            }
        }
        lock(&subscriber.state).subs.remove(key);
    }

    /// Removes every subscription of a subscriber (its connection closed).
    pub(crate) fn remove(&self, subscriber: &Subscriber<K>) {
        let keys: Vec<K> = lock(&subscriber.state).subs.keys().cloned().collect();
        let mut services = lock(&self.services);
        for key in keys {
            if let Some(subs) = services.get_mut(&key) {
                subs.remove(&subscriber.id);
                if subs.is_empty() {
                    services.remove(&key);
                }
            }
        }
        lock(&subscriber.state).subs.clear();
    }

    /// How many (subscriber, service) pairs there are.
    pub(crate) fn len(&self) -> usize {
        lock(&self.services).values().map(HashMap::len).sum()
    }
}

/// A subscriber already holds the most subscriptions allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full {
    /// How many it holds.
    pub(crate) held: usize,
    /// The limit.
    pub(crate) max: usize,
}

/// One subscription: a service seen through one cluster filter.
#[derive(Debug)]
struct Sub {
    clusters: Vec<ClusterName>,
    dirty: bool,
    /// Not pushed until its first view has been answered.
    held: bool,
    in_flight: Option<InFlight>,
    /// Not retried before this time (after a failed or lost push).
    retry_at: Millis,
    /// The last push failed or went unanswered; the next one is a retry.
    retrying: bool,
    last_ref_time: Millis,
    /// The registry revision of the newest push the client acknowledged
    /// (0 before any).
    acked_revision: u64,
}

#[derive(Debug, Clone)]
struct InFlight {
    request_id: String,
    sent_at: Millis,
    /// The registry revision the push was rendered at.
    revision: u64,
}

#[derive(Debug)]
struct SubscriberState<K> {
    /// Topic -> variant (a service's cluster filter; the tenant a config
    /// listener sent) -> subscription.
    subs: BTreeMap<K, BTreeMap<String, Sub>>,
}

impl<K> Default for SubscriberState<K> {
    fn default() -> Self {
        Self {
            subs: BTreeMap::new(),
        }
    }
}

/// What a push renderer is given.
pub(crate) struct PushTarget<'a, K> {
    pub(crate) key: &'a K,
    pub(crate) clusters_raw: &'a str,
    pub(crate) clusters: &'a [ClusterName],
    /// Strictly increasing per subscription.
    pub(crate) ref_time: Millis,
    /// This push repeats one that failed or went unanswered.
    pub(crate) retry: bool,
}

/// A subscriber (a connection) and its subscriptions.
#[derive(Debug)]
pub(crate) struct Subscriber<K> {
    id: u64,
    state: Mutex<SubscriberState<K>>,
    /// Woken when a push may be due; shared by the subscribers of one
    /// connection, so its pusher waits on one.
    wake: Arc<Notify>,
    request_ids: AtomicU64,
    /// Starts its pushes' request ids, so that two subscribers of one
    /// connection (services, configs) never send the same id.
    prefix: &'static str,
}

impl<K: Topic> Subscriber<K> {
    pub(crate) fn new(id: u64) -> Self {
        Self::with_prefix(id, "", Arc::default())
    }

    /// A subscriber whose pushes' request ids start with `prefix`, woken
    /// through `wake`.
    pub(crate) fn with_prefix(id: u64, prefix: &'static str, wake: Arc<Notify>) -> Self {
        Self {
            id,
            state: Mutex::default(),
            wake,
            request_ids: AtomicU64::new(1),
            prefix,
        }
    }

    /// Whether `request_id` is one of its pushes'.
    pub(crate) fn sent(&self, request_id: &str) -> bool {
        request_id
            .strip_prefix(self.prefix)
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty())
    }

    /// The topics it subscribes to.
    pub(crate) fn keys(&self) -> Vec<K> {
        lock(&self.state).subs.keys().cloned().collect()
    }

    /// Woken when a push may be due.
    pub(crate) fn wake(&self) -> &Notify {
        &self.wake
    }

    /// The wake-up itself, for others that feed the same pusher.
    pub(crate) fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    fn install(
        &self,
        key: &K,
        clusters_raw: &str,
        clusters: Vec<ClusterName>,
        max: usize,
    ) -> Result<(), Full> {
        let mut state = lock(&self.state);
        let exists = state
            .subs
            .get(key)
            .is_some_and(|subs| subs.contains_key(clusters_raw));
        if !exists {
            let held = state.subs.values().map(BTreeMap::len).sum::<usize>();
            if held >= max {
                return Err(Full { held, max });
            }
        }
        let subs = state.subs.entry(key.clone()).or_default();
        let sub = subs.entry(clusters_raw.to_owned()).or_insert_with(|| Sub {
            clusters: Vec::new(),
            dirty: false,
            held: true,
            in_flight: None,
            retry_at: 0,
            retrying: false,
            last_ref_time: 0,
            acked_revision: 0,
        });
        sub.clusters = clusters;
        sub.held = true;
        Ok(())
    }

    fn mark_dirty(&self, key: &K) {
        let mut state = lock(&self.state);
        if let Some(subs) = state.subs.get_mut(key) {
            for sub in subs.values_mut() {
                sub.dirty = true;
            }
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Renders the view of one subscription now (the answer to a
    /// subscribe), stamping it with the subscription's next `lastRefTime`.
    /// Whatever changed before this render is in it, so the subscription
    /// is clean afterwards.
    pub(crate) fn render_now<T>(
        &self,
        key: &K,
        clusters_raw: &str,
        now: Millis,
        render: impl FnOnce(PushTarget<'_, K>) -> T,
    ) -> Option<T> {
        let mut state = lock(&self.state);
        let sub = state.subs.get_mut(key)?.get_mut(clusters_raw)?;
        sub.dirty = false;
        sub.last_ref_time = now.max(sub.last_ref_time + 1);
        Some(render(PushTarget {
            key,
            clusters_raw,
            clusters: &sub.clusters,
            ref_time: sub.last_ref_time,
            retry: false,
        }))
    }

    /// Lets a held subscription be pushed.
    pub(crate) fn release(&self, key: &K, clusters_raw: &str) {
        let mut state = lock(&self.state);
        if let Some(sub) = state
            .subs
            .get_mut(key)
            .and_then(|s| s.get_mut(clusters_raw))
        {
            sub.held = false;
            let due = sub.dirty;
            drop(state);
            if due {
                self.wake.notify_one();
            }
        }
    }

    /// Renders every push that is due: dirty, released, not in flight and
    /// not waiting for a retry. Each is marked in flight under a fresh
    /// request id, which the renderer must put on the wire; the renderer
    /// also answers the registry revision it rendered (read before the
    /// state it rendered, so never newer than it), which the push is
    /// acknowledged at.
    pub(crate) fn due_pushes<T>(
        &self,
        now: Millis,
        mut render: impl FnMut(&str, PushTarget<'_, K>) -> (T, u64),
    ) -> Vec<T> {
        let mut state = lock(&self.state);
        let mut out = Vec::new();
        for (key, subs) in &mut state.subs {
            for (clusters_raw, sub) in subs.iter_mut() {
                if !sub.dirty || sub.held || sub.in_flight.is_some() || sub.retry_at > now {
                    continue;
                }
                let serial = self.request_ids.fetch_add(1, Ordering::Relaxed);
                let request_id = format!("{}{serial}", self.prefix);
                sub.dirty = false;
                sub.last_ref_time = now.max(sub.last_ref_time + 1);
                let (rendered, revision) = render(
                    &request_id,
                    PushTarget {
                        key,
                        clusters_raw,
                        clusters: &sub.clusters,
                        ref_time: sub.last_ref_time,
                        retry: sub.retrying,
                    },
                );
                sub.in_flight = Some(InFlight {
                    request_id,
                    sent_at: now,
                    revision,
                });
                out.push(rendered);
            }
        }
        out
    }

    /// The client answered a push. A failure is retried after `retry`.
    /// Returns how long the push was in flight, when the id was a push of
    /// this subscriber's.
    pub(crate) fn ack(
        &self,
        request_id: &str,
        success: bool,
        now: Millis,
        retry: Millis,
    ) -> Option<Millis> {
        let mut state = lock(&self.state);
        let found = state
            .subs
            .values_mut()
            .flat_map(|s| s.values_mut())
            .find(|sub| {
                sub.in_flight
                    .as_ref()
                    .is_some_and(|f| f.request_id == request_id)
            });
        let sub = found?;
        let (sent_at, revision) = sub
            .in_flight
            .take()
            .map_or((now, 0), |f| (f.sent_at, f.revision));
        sub.retrying = !success;
        if success {
            sub.acked_revision = sub.acked_revision.max(revision);
        } else {
            sub.dirty = true;
            sub.retry_at = now.saturating_add(retry);
        }
        // Only a subscription with something to push (changes merged while
        // this push was in flight, or a retry) needs the pusher: waking it
        // for every answer would double its wake-ups for nothing.
        let due = sub.dirty;
        drop(state);
        if due {
            self.wake.notify_one();
        }
        Some(now.saturating_sub(sent_at))
    }

    /// Gives up on pushes unanswered for `timeout`: they are retried after
    /// `retry`. Returns how many were given up.
    pub(crate) fn expire(&self, now: Millis, timeout: Millis, retry: Millis) -> usize {
        let mut state = lock(&self.state);
        let mut expired = 0;
        for sub in state.subs.values_mut().flat_map(|s| s.values_mut()) {
            if sub
                .in_flight
                .as_ref()
                .is_some_and(|f| f.sent_at.saturating_add(timeout) <= now)
            {
                sub.in_flight = None;
                sub.dirty = true;
                sub.retrying = true;
                sub.retry_at = now.saturating_add(retry);
                expired += 1;
            }
        }
        expired
    }

    /// The registry revision of the newest push of `key` it acknowledged,
    /// over every cluster filter it subscribes with; `None` when it does
    /// not subscribe to `key`.
    pub(crate) fn acked_revision(&self, key: &K) -> Option<u64> {
        let state = lock(&self.state);
        let subs = state.subs.get(key)?;
        Some(
            subs.values()
                .map(|sub| sub.acked_revision)
                .max()
                .unwrap_or(0),
        )
    }

    /// The next time something must happen without a wake-up: an
    /// in-flight push times out, or a retry becomes due.
    pub(crate) fn next_timer(&self, timeout: Millis) -> Option<Millis> {
        let state = lock(&self.state);
        state
            .subs
            .values()
            .flat_map(|s| s.values())
            .filter_map(|sub| match &sub.in_flight {
                Some(f) => Some(f.sent_at.saturating_add(timeout)),
                None if sub.dirty && !sub.held => Some(sub.retry_at),
                None => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_core::ServiceKey;

    fn key(name: &str) -> ServiceKey {
        ServiceKey::parse("", "", name).unwrap()
    }

    fn change(name: &str) -> [ServiceKey; 1] {
        [key(name)]
    }

    fn due(s: &Subscriber<ServiceKey>, now: Millis) -> Vec<(String, Millis)> {
        s.due_pushes(now, |id, t| ((id.to_owned(), t.ref_time), 0))
    }

    /// A hub with one subscriber to `name`, its first view answered.
    fn released(name: &str) -> (Hub<ServiceKey>, Arc<Subscriber<ServiceKey>>) {
        let hub: Hub<ServiceKey> = Hub::default();
        let sub = Arc::new(Subscriber::new(1));
        hub.subscribe(&sub, &key(name), "", vec![], usize::MAX)
            .unwrap();
        sub.release(&key(name), "");
        (hub, sub)
    }

    fn due_retries(s: &Subscriber<ServiceKey>, now: Millis) -> Vec<(String, bool)> {
        s.due_pushes(now, |id, t| ((id.to_owned(), t.retry), 0))
    }

    #[test]
    fn only_a_successful_answer_counts_its_push_revision_as_acknowledged() {
        let (hub, sub) = released("a");
        assert_eq!(sub.acked_revision(&key("a")), Some(0));
        assert_eq!(sub.acked_revision(&key("b")), None, "not subscribed");
        hub.changed(&change("a"));
        let first = sub.due_pushes(0, |id, _| (id.to_owned(), 7));
        assert_eq!(sub.acked_revision(&key("a")), Some(0), "sent, not answered");
        sub.ack(&first[0], false, 1, 1000);
        assert_eq!(
            sub.acked_revision(&key("a")),
            Some(0),
            "a failure acknowledges nothing"
        );
        let retry = sub.due_pushes(1001, |id, _| (id.to_owned(), 9));
        sub.ack(&retry[0], true, 1002, 1000);
        assert_eq!(sub.acked_revision(&key("a")), Some(9));
        hub.changed(&change("a"));
        let stale = sub.due_pushes(1003, |id, _| (id.to_owned(), 8));
        sub.ack(&stale[0], true, 1004, 1000);
        assert_eq!(sub.acked_revision(&key("a")), Some(9), "never goes back");
    }

    #[test]
    fn a_change_after_subscribing_is_pushed_once_released() {
        let hub: Hub<ServiceKey> = Hub::default();
        let sub = Arc::new(Subscriber::new(1));
        hub.subscribe(&sub, &key("a"), "", vec![], usize::MAX)
            .unwrap();
        hub.changed(&change("a"));
        assert!(
            due(&sub, 10).is_empty(),
            "held until the first view is answered"
        );
        sub.release(&key("a"), "");
        assert_eq!(due(&sub, 10).len(), 1);
        assert!(due(&sub, 11).is_empty(), "clean after the push");
        hub.changed(&change("b"));
        assert!(due(&sub, 12).is_empty(), "other services do not concern it");
    }

    #[test]
    fn changes_during_an_unacknowledged_push_merge_into_the_next() {
        let (hub, sub) = released("a");
        hub.changed(&change("a"));
        let first = due(&sub, 100);
        assert_eq!(first.len(), 1);
        for _ in 0..5 {
            hub.changed(&change("a"));
        }
        assert!(due(&sub, 101).is_empty(), "one push in flight at a time");
        assert_eq!(sub.ack(&first[0].0, true, 102, 1000), Some(2));
        let second = due(&sub, 100);
        assert_eq!(second.len(), 1, "five changes, one push");
        assert!(
            second[0].1 > first[0].1,
            "lastRefTime strictly increases even if the clock does not"
        );
    }

    #[test]
    fn lost_and_failed_pushes_are_retried() {
        let (hub, sub) = released("a");
        hub.changed(&change("a"));
        let first = due_retries(&sub, 0);
        assert_eq!(first.len(), 1);
        assert!(!first[0].1, "a first push is no retry");
        assert_eq!(sub.next_timer(5000), Some(5000));
        assert_eq!(sub.expire(4999, 5000, 1000), 0);
        assert_eq!(sub.expire(5000, 5000, 1000), 1);
        assert!(due(&sub, 5999).is_empty(), "waits for the retry delay");
        let retry = due_retries(&sub, 6000);
        assert_eq!(retry.len(), 1);
        assert!(retry[0].1, "a lost push is retried");
        assert!(
            sub.ack(&first[0].0, true, 6001, 1000).is_none(),
            "a stale ack is ignored"
        );
        assert_eq!(sub.ack(&retry[0].0, false, 6001, 1000), Some(1));
        let again = due_retries(&sub, 7001);
        assert_eq!(again.len(), 1);
        assert!(again[0].1, "a failed push is retried");
        assert_eq!(sub.ack(&again[0].0, true, 7011, 1000), Some(10));
        hub.changed(&change("a"));
        let next = due_retries(&sub, 7012);
        assert!(!next[0].1, "a success ends the retries");
    }

    /// Whether the subscriber's pusher has a wake-up waiting.
    fn woken(s: &Subscriber<ServiceKey>) -> bool {
        use futures_util::FutureExt;
        s.wake().notified().now_or_never().is_some()
    }

    #[test]
    fn an_answer_wakes_the_pusher_only_when_something_is_due() {
        let (hub, sub) = released("a");
        hub.changed(&change("a"));
        assert!(woken(&sub), "a change wakes it");
        let first = due(&sub, 0);
        assert!(sub.ack(&first[0].0, true, 1, 1000).is_some());
        assert!(!woken(&sub), "nothing left to push: no wake-up");
        hub.changed(&change("a"));
        assert!(woken(&sub));
        let second = due(&sub, 2);
        hub.changed(&change("a"));
        assert!(woken(&sub), "the change merged into the next push wakes it");
        assert!(sub.ack(&second[0].0, true, 3, 1000).is_some());
        assert!(woken(&sub), "the merged change is due once answered");
        let third = due(&sub, 4);
        assert!(sub.ack(&third[0].0, false, 5, 1000).is_some());
        assert!(woken(&sub), "a failure is retried: its timer must be set");
    }

    #[test]
    fn removing_a_subscriber_drops_all_its_subscriptions() {
        let hub: Hub<ServiceKey> = Hub::default();
        let sub = Arc::new(Subscriber::new(1));
        hub.subscribe(&sub, &key("a"), "", vec![], usize::MAX)
            .unwrap();
        hub.subscribe(&sub, &key("b"), "c1", vec![], usize::MAX)
            .unwrap();
        assert_eq!(hub.len(), 2);
        hub.remove(&sub);
        assert_eq!(hub.len(), 0);
    }

    #[test]
    fn a_full_subscriber_gets_no_new_subscription_but_may_renew_its_own() {
        let hub: Hub<ServiceKey> = Hub::default();
        let sub = Arc::new(Subscriber::new(1));
        hub.subscribe(&sub, &key("a"), "", vec![], 2).unwrap();
        hub.subscribe(&sub, &key("a"), "c1", vec![], 2).unwrap();
        assert_eq!(
            hub.subscribe(&sub, &key("b"), "", vec![], 2),
            Err(Full { held: 2, max: 2 })
        );
        assert_eq!(hub.len(), 1, "the refused topic is not in the hub");
        hub.subscribe(&sub, &key("a"), "c1", vec![], 2).unwrap();
        hub.unsubscribe(&sub, &key("a"));
        hub.subscribe(&sub, &key("b"), "", vec![], 2).unwrap();
    }
}
