//! Per-instance statistics as one consumer sees them: calls in flight,
//! latency (a peak-sensitive EWMA and a plain EWMA of successful calls),
//! when the instance appeared (for warm-up), and its circuit breaker.
//! They are updated by the strategy around each attempt and read by the
//! balancers; nothing here blocks or awaits.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{Breaker, BreakerRules};
use super::limit::Buckets;

/// How fast the latency estimates forget: the weight of an old sample
/// halves roughly every `DECAY * ln 2`.
const DECAY: Duration = Duration::from_secs(10);
/// The latency assumed for an instance never called yet: optimistic, so a
/// new instance gets tried, as tower's peak-EWMA does.
const DEFAULT_RTT: Duration = Duration::from_millis(5);
/// How far back the shortest-response balancer's averages reach
/// (Dubbo's `shortestresponse.slidePeriod`): an instance that was slow
/// once and then not called is forgotten after this, and tried again.
pub const RESPONSE_WINDOW: Duration = Duration::from_secs(30);

/// The statistics of one instance.
#[derive(Debug)]
pub struct InstanceStats {
    active: AtomicU32,
    calls: AtomicU64,
    failures: AtomicU64,
    /// When the consumer first saw the instance, if it arrived after the
    /// consumer started; `None` means it counts as warm.
    warm_from: Option<Instant>,
    latency: Mutex<Latency>,
    /// Successful calls and their summed latency, over [`RESPONSE_WINDOW`].
    responses: Mutex<Buckets<Responses>>,
    breaker: Mutex<Breaker>,
}

/// Successful calls in one bucket of the response window.
#[derive(Debug, Clone, Copy, Default)]
struct Responses {
    count: u64,
    nanos: u128,
}

#[derive(Debug)]
struct Latency {
    /// Peak EWMA in nanoseconds: jumps up to a slow sample at once, decays
    /// towards fast ones.
    peak_nanos: f64,
    /// EWMA of successful calls' latency, in nanoseconds.
    success_nanos: Option<f64>,
    updated: Option<Instant>,
}

/// Whether an attempt succeeded, as the statistics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// The provider answered (an application error is an answer: the
    /// instance is working).
    Answered,
    /// The attempt failed in transport or timed out.
    Failed,
}

impl InstanceStats {
    /// Fresh statistics with a breaker that never opens.
    pub fn new(warm_from: Option<Instant>) -> Self {
        Self::with_rules(warm_from, BreakerRules::disabled())
    }

    /// Fresh statistics with a breaker following `rules`.
    pub fn with_rules(warm_from: Option<Instant>, rules: BreakerRules) -> Self {
        Self {
            active: AtomicU32::new(0),
            calls: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            warm_from,
            latency: Mutex::new(Latency {
                peak_nanos: DEFAULT_RTT.as_nanos() as f64,
                success_nanos: None,
                updated: None,
            }),
            responses: Mutex::new(Buckets::new(RESPONSE_WINDOW, 10)),
            breaker: Mutex::new(Breaker::new(rules)),
        }
    }

    /// Calls in flight.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    /// Calls finished, and how many of them failed.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }

    /// Counts a call in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> ActiveGuard {
        self.active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard {
            stats: Arc::clone(self),
        }
    }

    /// Records a finished attempt.
    pub fn record(&self, now: Instant, elapsed: Duration, sample: Sample) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if sample == Sample::Failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut l = lock(&self.latency);
            let rtt = elapsed.as_nanos() as f64;
            let decay = l.decay(now);
            l.peak_nanos = if rtt > l.peak_nanos {
                rtt
            } else {
                l.peak_nanos * decay + rtt * (1.0 - decay)
            };
            if sample == Sample::Answered {
                l.success_nanos = Some(match l.success_nanos {
                    None => rtt,
                    Some(old) => old * decay + rtt * (1.0 - decay),
                });
            }
            l.updated = Some(now);
        }
        if sample == Sample::Answered {
            let mut window = lock(&self.responses);
            let bucket = window.current(now);
            bucket.count += 1;
            bucket.nanos += elapsed.as_nanos();
        }
        lock(&self.breaker).record(now, elapsed, sample == Sample::Answered);
    }

    /// The peak-EWMA latency estimate at `now`, in nanoseconds: it decays
    /// while no samples arrive, so a once-slow instance is tried again.
    pub fn peak_ewma(&self, now: Instant) -> f64 {
        let l = lock(&self.latency);
        let decay = l.decay(now);
        let default = DEFAULT_RTT.as_nanos() as f64;
        // Decay towards the default rather than zero.
        l.peak_nanos * decay + default * (1.0 - decay)
    }

    /// The average latency of successful calls, if there were any.
    pub fn success_latency(&self) -> Option<Duration> {
        lock(&self.latency)
            .success_nanos
            .map(|n| Duration::from_nanos(n as u64))
    }

    /// The average latency of the successful calls within the last
    /// [`RESPONSE_WINDOW`] (between 0.9 and 1 of it), if there were any.
    pub fn recent_success_latency(&self, now: Instant) -> Option<Duration> {
        let window = lock(&self.responses);
        let (count, nanos) = window
            .live(now)
            .fold((0u64, 0u128), |(c, n), b| (c + b.count, n + b.nanos));
        (count > 0).then(|| Duration::from_nanos((nanos / u128::from(count)) as u64))
    }

    /// `configured` weight, ramped up linearly over `warmup` from when the
    /// instance appeared (at least 1% of it, as Dubbo keeps at least 1).
    pub fn effective_weight(&self, configured: f64, warmup: Duration, now: Instant) -> f64 {
        let configured = configured.max(0.0);
        match self.warm_from {
            Some(from) if !warmup.is_zero() => {
                let up = now.saturating_duration_since(from);
                if up >= warmup {
                    configured
                } else {
                    let share = up.as_secs_f64() / warmup.as_secs_f64();
                    (configured * share).max(configured / 100.0)
                }
            }
            _ => configured,
        }
    }

    /// The instance's circuit breaker.
    pub fn breaker(&self) -> MutexGuard<'_, Breaker> {
        lock(&self.breaker)
    }
}

impl Latency {
    /// The weight of the old estimate after the time since the last sample.
    fn decay(&self, now: Instant) -> f64 {
        match self.updated {
            None => 0.0,
            Some(at) => {
                let gap = now.saturating_duration_since(at).as_secs_f64();
                (-gap / DECAY.as_secs_f64()).exp()
            }
        }
    }
}

/// Holds a call in the instance's active count.
#[derive(Debug)]
pub struct ActiveGuard {
    stats: Arc<InstanceStats>,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.stats.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Statistics are plain numbers: a panic elsewhere while holding the lock
/// leaves them usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
