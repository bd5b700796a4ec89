//! Consumer-side limits: a concurrency limit and a rate limit per method,
//! and the retry budget shared by every strategy, plus the sliding window
//! of time buckets that the rate limit, the budget and the circuit breaker
//! count in. A refusal is a [`LimitKind`] the strategy turns into an error;
//! nothing here calls a provider, and no lock is held across an `.await`.
//! Every time-based rule takes `now` as an argument; only the concurrency
//! limit waits, on tokio's clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::LimitKind;

/// How many buckets a window is split into: Sentinel's and the brief's
/// usual choice, fine-grained enough that the oldest bucket (the only one
/// that is partly out of the window) is a tenth of it.
const BUCKETS: u32 = 10;

/// A sliding window of equal time buckets, Sentinel-style.
///
/// Time since the first sample is cut into buckets of `span / count`
/// (at least 1 ns). The window at `now` is the bucket `now` falls in plus
/// the `count - 1` before it, so a sample stays counted for between
/// `span - width` and `span` after it was added, depending on where in its
/// bucket it fell. Counting whole buckets rather than weighting the
/// oldest one by its overlap keeps the sums exact integers.
///
/// A sample stamped earlier than the newest bucket already seen (two
/// threads read the clock in one order and take the lock in the other) is
/// counted in the newest bucket, so a late sample never erases newer ones.
#[derive(Debug, Clone)]
pub(crate) struct Buckets<T> {
    width_nanos: u128,
    origin: Option<Instant>,
    /// The newest bucket index seen.
    latest: u64,
    slots: Vec<Slot<T>>,
}

#[derive(Debug, Clone, Default)]
struct Slot<T> {
    /// The bucket index the counts belong to; `None` when never used.
    index: Option<u64>,
    counts: T,
}

impl<T: Default> Buckets<T> {
    /// An empty window of `count` buckets (at least 1) over `span`.
    pub(crate) fn new(span: Duration, count: u32) -> Self {
        let count = count.max(1);
        let width_nanos = (span / count).as_nanos().max(1);
        Self {
            width_nanos,
            origin: None,
            latest: 0,
            slots: (0..count).map(|_| Slot::default()).collect(),
        }
    }

    /// The counts of the bucket `now` falls in, emptied first if the slot
    /// still held an older bucket.
    pub(crate) fn current(&mut self, now: Instant) -> &mut T {
        let origin = *self.origin.get_or_insert(now);
        let index = self.index(origin, now).max(self.latest);
        self.latest = index;
        let len = self.slots.len() as u64;
        // The remainder is below the slot count, which came from a `u32`.
        let at = usize::try_from(index % len).unwrap_or(0);
        let slot = &mut self.slots[at];
        if slot.index != Some(index) {
            slot.index = Some(index);
            slot.counts = T::default();
        }
        &mut slot.counts
    }

    /// The counts of the buckets in the window at `now`.
    pub(crate) fn live(&self, now: Instant) -> impl Iterator<Item = &T> {
        let newest = self
            .origin
            .map(|origin| self.index(origin, now).max(self.latest));
        let len = self.slots.len() as u64;
        self.slots
            .iter()
            .filter_map(move |slot| match (slot.index, newest) {
                (Some(index), Some(newest))
                    if index <= newest && index.saturating_add(len) > newest =>
                {
                    Some(&slot.counts)
                }
                _ => None,
            })
    }

    /// Forgets every sample.
    pub(crate) fn clear(&mut self) {
        self.origin = None;
        self.latest = 0;
        for slot in &mut self.slots {
            *slot = Slot::default();
        }
    }

    fn index(&self, origin: Instant, now: Instant) -> u64 {
        let nanos = now.saturating_duration_since(origin).as_nanos();
        u64::try_from(nanos / self.width_nanos).unwrap_or(u64::MAX)
    }
}

/// At most `max` calls of each method in flight. A caller over the limit
/// waits up to its own `wait` for a call to finish, as Dubbo's consumer-side
/// `ActiveLimitFilter` does, because a short burst usually drains within a
/// call's time and refusing it at once would turn a blip into errors.
#[derive(Debug)]
pub struct ConcurrencyLimit {
    max: usize,
    methods: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl ConcurrencyLimit {
    /// At most `max` calls per method in flight. A `max` above tokio's
    /// [`Semaphore::MAX_PERMITS`] is that maximum; a `max` of 0 refuses
    /// every call once its wait is over.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.min(Semaphore::MAX_PERMITS),
            methods: Mutex::new(HashMap::new()),
        }
    }

    /// The limit per method.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A permit for one call of `method`, held until it is dropped; waits up
    /// to `wait` for one when `max` calls are in flight, then refuses with
    /// [`LimitKind::Concurrency`]. Waiters are served first come, first
    /// served.
    pub async fn acquire(
        &self,
        method: &str,
        wait: Duration,
    ) -> Result<OwnedSemaphorePermit, LimitKind> {
        let refused = LimitKind::Concurrency { max: self.max };
        let semaphore = self.semaphore(method);
        // Taken without waiting first, so a zero `wait` still admits a call
        // while permits are free.
        if let Ok(permit) = Arc::clone(&semaphore).try_acquire_owned() {
            return Ok(permit);
        }
        match tokio::time::timeout(wait, semaphore.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphores are never closed; were one closed, no permit
            // could ever come, which is a refusal all the same.
            Ok(Err(_closed)) => Err(refused),
            Err(_elapsed) => Err(refused),
        }
    }

    /// Calls of `method` in flight now.
    pub fn in_flight(&self, method: &str) -> usize {
        lock(&self.methods)
            .get(method)
            .map_or(0, |s| self.max.saturating_sub(s.available_permits()))
    }

    /// The method's semaphore, created on first use; the map's lock is
    /// released before anyone waits on it.
    fn semaphore(&self, method: &str) -> Arc<Semaphore> {
        let mut methods = lock(&self.methods);
        if let Some(semaphore) = methods.get(method) {
            return Arc::clone(semaphore);
        }
        let semaphore = Arc::new(Semaphore::new(self.max));
        methods.insert(method.to_owned(), Arc::clone(&semaphore));
        semaphore
    }
}

/// At most `permits` calls of each method admitted per `per`, counted in a
/// sliding window of ten buckets of `per / 10` (see below).
///
/// A fixed window (Dubbo's `TpsLimitFilter`) resets its count at each
/// boundary, so `permits` calls just before it and `permits` just after it
/// pass within moments of each other: twice the rate. Here a call is
/// counted from its bucket until that bucket leaves the window, which is
/// between `per - per / 10` and `per` after the call. So within any
/// stretch of time shorter than `per - per / 10`, at most `permits` calls
/// are admitted; a full batch of `permits` frees up only 0.9 to 1 × `per`
/// after it was admitted, never a moment after a boundary.
#[derive(Debug)]
pub struct RateLimiter {
    permits: u32,
    per: Duration,
    methods: Mutex<HashMap<String, Buckets<u32>>>,
}

impl RateLimiter {
    /// At most `permits` calls per method per `per`. `permits` of 0
    /// refuses every call.
    pub fn new(permits: u32, per: Duration) -> Self {
        Self {
            permits,
            per,
            methods: Mutex::new(HashMap::new()),
        }
    }

    /// Admits one call of `method` at `now`, or refuses with
    /// [`LimitKind::Rate`] when the window already counts `permits`
    /// admitted calls. Refused calls are not counted, so a caller that
    /// keeps trying does not push its own admission further away.
    pub fn try_acquire(&self, method: &str, now: Instant) -> Result<(), LimitKind> {
        let mut methods = lock(&self.methods);
        let window = match methods.get_mut(method) {
            Some(window) => window,
            None => methods
                .entry(method.to_owned())
                .or_insert_with(|| Buckets::new(self.per, BUCKETS)),
        };
        let admitted = window
            .live(now)
            .fold(0u32, |sum, count| sum.saturating_add(*count));
        if admitted >= self.permits {
            return Err(LimitKind::Rate {
                permits: self.permits,
                per: self.per,
            });
        }
        let bucket = window.current(now);
        *bucket = bucket.saturating_add(1);
        Ok(())
    }
}

/// Calls and retries in one bucket of the retry budget.
#[derive(Debug, Clone, Copy, Default)]
struct Flow {
    calls: u64,
    retries: u64,
}

/// How many retries the consumer may make, as tower's `retry::budget` and
/// Finagle's `RetryBudget`: retries are a share of recent calls plus a
/// small floor, so when a provider fails everything, retries add a bounded
/// fraction of load instead of multiplying it.
///
/// Every original call is [`deposit`](Self::deposit)ed; every retry must be
/// [`withdraw`](Self::withdraw)n first. A retry is allowed when, counting it,
/// the retries within the last `ttl` are at most
/// `min_per_sec × ttl + retry_ratio × calls within the last ttl`. Retries
/// are not deposited: a retry that funded further retries would defeat the
/// budget. "Within the last `ttl`" is a sliding window of ten buckets of
/// `ttl / 10`, so it reaches back between 0.9 and 1 × `ttl`.
#[derive(Debug)]
pub struct RetryBudget {
    ttl: Duration,
    min_per_sec: u32,
    retry_ratio: f64,
    window: Mutex<Buckets<Flow>>,
}

impl RetryBudget {
    /// A budget remembering calls for `ttl`, allowing `min_per_sec` retries
    /// a second even without traffic, plus `retry_ratio` retries per call.
    /// A negative or NaN `retry_ratio` is 0: only the floor is left.
    pub fn new(ttl: Duration, min_per_sec: u32, retry_ratio: f64) -> Self {
        Self {
            ttl,
            min_per_sec,
            // `f64::max` returns the other operand for NaN.
            retry_ratio: retry_ratio.max(0.0),
            window: Mutex::new(Buckets::new(ttl, BUCKETS)),
        }
    }

    /// A budget that never refuses a retry (each strategy still bounds
    /// its own retries).
    pub fn unlimited() -> Self {
        Self::new(Duration::from_secs(1), u32::MAX, 1.0)
    }

    /// Counts an original call at `now`.
    pub fn deposit(&self, now: Instant) {
        let mut window = lock(&self.window);
        let flow = window.current(now);
        flow.calls = flow.calls.saturating_add(1);
    }

    /// Whether a retry may go at `now`; when it may, it is counted.
    pub fn withdraw(&self, now: Instant) -> bool {
        let mut window = lock(&self.window);
        let (calls, retries) = window.live(now).fold((0u64, 0u64), |(c, r), flow| {
            (c.saturating_add(flow.calls), r.saturating_add(flow.retries))
        });
        let floor = f64::from(self.min_per_sec) * self.ttl.as_secs_f64();
        let allowed = floor + self.retry_ratio * calls as f64;
        if (retries.saturating_add(1)) as f64 > allowed {
            return false;
        }
        let flow = window.current(now);
        flow.retries = flow.retries.saturating_add(1);
        true
    }
}

impl Default for RetryBudget {
    /// tower's defaults: calls remembered for 10 s, a floor of 10 retries
    /// a second, and 20% of calls on top.
    fn default() -> Self {
        Self::new(Duration::from_secs(10), 10, 0.2)
    }
}

/// The limits hold plain counters: a panic elsewhere while holding a lock
/// leaves them usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_over_the_concurrency_limit_gets_a_permit_released_within_its_wait() {
        let limit = ConcurrencyLimit::new(2);
        let first = limit.acquire("get", Duration::ZERO).await.expect("first");
        let _second = limit.acquire("get", Duration::ZERO).await.expect("second");
        assert_eq!(limit.in_flight("get"), 2);

        let started = Instant::now();
        let (third, ()) = tokio::join!(limit.acquire("get", ms(100)), async move {
            tokio::time::sleep(ms(40)).await;
            drop(first);
        });

        assert!(third.is_ok(), "the third caller got the released permit");
        assert_eq!(started.elapsed(), ms(40));
        assert_eq!(limit.in_flight("get"), 2);
        drop(third);
        assert_eq!(limit.in_flight("get"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_over_the_concurrency_limit_is_refused_when_its_wait_runs_out() {
        let limit = ConcurrencyLimit::new(1);
        let _held = limit.acquire("get", Duration::ZERO).await.expect("first");

        let started = Instant::now();
        let refused = limit.acquire("get", ms(100)).await;

        assert_eq!(refused.err(), Some(LimitKind::Concurrency { max: 1 }));
        assert_eq!(started.elapsed(), ms(100));
        assert_eq!(limit.in_flight("get"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_limits_of_different_methods_are_independent() {
        let limit = ConcurrencyLimit::new(1);
        let _get = limit.acquire("get", Duration::ZERO).await.expect("get");

        let put = limit.acquire("put", Duration::ZERO).await;

        assert!(put.is_ok(), "put has its own permits");
        assert_eq!(limit.in_flight("get"), 1);
        assert_eq!(limit.in_flight("put"), 1);
        assert_eq!(limit.in_flight("delete"), 0);
        assert_eq!(
            limit.acquire("get", Duration::ZERO).await.err(),
            Some(LimitKind::Concurrency { max: 1 })
        );
    }

    #[test]
    fn the_rate_limiter_admits_permits_per_window_and_refuses_the_next() {
        let limiter = RateLimiter::new(10, SECOND);
        let t0 = Instant::now();

        for i in 0..10 {
            assert_eq!(limiter.try_acquire("get", t0), Ok(()), "call {i}");
        }

        let refused = LimitKind::Rate {
            permits: 10,
            per: SECOND,
        };
        assert_eq!(limiter.try_acquire("get", t0), Err(refused));
        assert_eq!(limiter.try_acquire("get", t0 + ms(999)), Err(refused));
        assert_eq!(
            limiter.try_acquire("put", t0),
            Ok(()),
            "methods are independent"
        );
    }

    #[test]
    fn the_rate_limiter_admits_again_as_old_buckets_slide_out() {
        let limiter = RateLimiter::new(10, SECOND);
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(limiter.try_acquire("get", t0), Ok(()));
        }
        for _ in 0..5 {
            assert_eq!(limiter.try_acquire("get", t0 + ms(500)), Ok(()));
        }
        assert!(limiter.try_acquire("get", t0 + ms(900)).is_err());

        // At 1 s the bucket of t0 leaves the window; the five calls of
        // 0.5 s still count.
        let admitted = (0..10)
            .filter(|_| limiter.try_acquire("get", t0 + SECOND).is_ok())
            .count();
        assert_eq!(admitted, 5);
    }

    #[test]
    fn the_rate_limiter_allows_no_double_burst_across_a_window_boundary() {
        let limiter = RateLimiter::new(10, SECOND);
        let t0 = Instant::now();
        // A fixed one-second window would reset at t0 + 1 s and admit ten
        // more at 1.05 s: twenty calls within 100 ms.
        assert_eq!(limiter.try_acquire("get", t0), Ok(()));
        let before = (0..10)
            .filter(|_| limiter.try_acquire("get", t0 + ms(950)).is_ok())
            .count();
        let after = (0..10)
            .filter(|_| limiter.try_acquire("get", t0 + ms(1050)).is_ok())
            .count();

        assert_eq!(before, 9);
        assert_eq!(after, 1, "only the slot of the call at t0 freed up");
        // The batch of 0.95 s frees up once its bucket leaves the window.
        assert!(limiter.try_acquire("get", t0 + ms(1899)).is_err());
        let later = (0..10)
            .filter(|_| limiter.try_acquire("get", t0 + ms(1900)).is_ok())
            .count();
        assert_eq!(later, 9);
    }

    #[test]
    fn the_retry_budget_caps_retries_under_a_failure_storm() {
        let budget = RetryBudget::default();
        let t0 = Instant::now();

        let mut retries = 0;
        for i in 0..1000 {
            let now = t0 + ms(i);
            budget.deposit(now);
            if budget.withdraw(now) {
                retries += 1;
            }
        }

        // 10/s × 10 s of floor plus 20% of 1000 calls.
        assert_eq!(retries, 300);
        assert!(!budget.withdraw(t0 + ms(1000)));
    }

    #[test]
    fn the_retry_budget_recovers_once_the_storm_leaves_its_ttl() {
        let budget = RetryBudget::default();
        let t0 = Instant::now();
        for i in 0..1000 {
            budget.deposit(t0 + ms(i));
            budget.withdraw(t0 + ms(i));
        }
        assert!(!budget.withdraw(t0 + Duration::from_secs(5)));

        // Every bucket of the first second is out of the window by 11 s:
        // the floor of 100 retries is back, and no more.
        let later = t0 + Duration::from_secs(11);
        let allowed = (0..200).filter(|_| budget.withdraw(later)).count();
        assert_eq!(allowed, 100);
    }

    #[test]
    fn the_retry_budget_floor_allows_retries_without_traffic() {
        let budget = RetryBudget::new(Duration::from_secs(10), 10, 0.2);
        let t0 = Instant::now();

        let allowed = (0..200).filter(|_| budget.withdraw(t0)).count();

        assert_eq!(allowed, 100);
    }

    #[test]
    fn the_retry_budget_grows_with_calls() {
        let budget = RetryBudget::new(Duration::from_secs(10), 0, 0.5);
        let t0 = Instant::now();
        assert!(!budget.withdraw(t0), "no floor and no calls: no retry");

        for _ in 0..4 {
            budget.deposit(t0);
        }

        let allowed = (0..10).filter(|_| budget.withdraw(t0)).count();
        assert_eq!(allowed, 2);
    }

    #[test]
    fn a_window_counts_a_late_sample_in_its_newest_bucket() {
        let mut window = Buckets::<u32>::new(SECOND, 10);
        let t0 = Instant::now();
        *window.current(t0) += 1;
        *window.current(t0 + 2 * SECOND) += 1;
        // Stamped long before the newest bucket: it must not land in (and
        // empty) the slot that now holds the bucket of t0 + 2 s.
        *window.current(t0 + ms(10)) += 1;

        assert_eq!(window.live(t0 + 2 * SECOND).sum::<u32>(), 2);
        assert_eq!(window.live(t0 + ms(2999)).sum::<u32>(), 2);
        assert_eq!(window.live(t0 + 3 * SECOND).sum::<u32>(), 0);
    }
}
