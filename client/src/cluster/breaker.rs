//! A circuit breaker per instance, as Sentinel's degrade rules: closed
//! while the recent calls look healthy; open, refusing calls, for a while
//! once a slow-call ratio, an error ratio or an error count is reached; then
//! half-open, letting exactly one probe through whose outcome closes or
//! re-opens it. It only counts what [`InstanceStats`] feeds it and answers
//! whether a call may go; it never calls anything, reads no clock (every
//! method takes `now`) and does not decide what counts as a failure.
//!
//! [`InstanceStats`]: super::stats::InstanceStats

use std::time::Duration;

use tokio::time::Instant;

use super::limit::Buckets;

/// How many buckets the statistics window is split into; the oldest one
/// is partly out of the window, so a tenth of it is the blur.
const BUCKETS: u32 = 10;

/// When a breaker opens and for how long.
///
/// Each of the three rules is optional and none is judged before the
/// window holds `min_requests` calls, so a handful of early failures does
/// not eject an instance. The rules are judged each time a call is
/// recorded; any one of them reached opens the breaker.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerRules {
    /// Never opens when false.
    pub enabled: bool,
    /// How far back the statistics reach: a sliding window of ten buckets
    /// of `window / 10`, so a call counts for between 0.9 and 1 × `window`.
    pub window: Duration,
    /// Calls the window must hold before any rule is judged.
    pub min_requests: u32,
    /// Opens when failed / total calls in the window is at least this
    /// (with at least one failure, so 0 means "any failure").
    pub error_ratio: Option<f64>,
    /// Opens when the window holds at least this many failures (and at
    /// least one).
    pub error_count: Option<u32>,
    /// Opens when slow / total calls in the window is at least this (with
    /// at least one slow call). A call is slow when it took longer than
    /// `slow_threshold`, whether or not it failed.
    pub slow_ratio: Option<f64>,
    /// The latency above which a call counts as slow; only used when
    /// `slow_ratio` is set.
    pub slow_threshold: Duration,
    /// How long the breaker stays open before a probe may go.
    pub open_for: Duration,
}

impl BreakerRules {
    /// A breaker that never opens.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }
}

impl Default for BreakerRules {
    /// Opens when at least half of at least 20 calls within the last 10 s
    /// failed, and stays open for 10 s: Sentinel's 10 s open window with
    /// an error ratio and minimum volume close to Envoy's failure
    /// percentage ejection. No error count or slow-call rule: what counts
    /// as slow depends on the service (the 1 s threshold is only a
    /// placeholder until `slow_ratio` is set).
    fn default() -> Self {
        Self {
            enabled: true,
            window: Duration::from_secs(10),
            min_requests: 20,
            error_ratio: Some(0.5),
            error_count: None,
            slow_ratio: None,
            slow_threshold: Duration::from_secs(1),
            open_for: Duration::from_secs(10),
        }
    }
}

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls flow.
    Closed,
    /// Calls are refused until `until`; once it has passed, the next
    /// [`Breaker::try_acquire`] sends a probe.
    Open {
        /// When a probe may go.
        until: Instant,
    },
    /// One probe is in flight.
    HalfOpen,
}

/// The breaker's state with what the public one leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Circuit {
    Closed,
    Open { until: Instant },
    HalfOpen { probe_sent: Instant },
}

/// Calls, failures and slow calls in one bucket.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    total: u32,
    failed: u32,
    slow: u32,
}

/// A circuit breaker.
///
/// `record`'s `ok` is false for a transport failure or a timeout; an
/// application error is the provider working and is recorded as ok.
#[derive(Debug, Clone)]
pub struct Breaker {
    rules: BreakerRules,
    circuit: Circuit,
    opened_at: Option<Instant>,
    window: Buckets<Counts>,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(rules: BreakerRules) -> Self {
        let window = Buckets::new(rules.window, BUCKETS);
        Self {
            rules,
            circuit: Circuit::Closed,
            opened_at: None,
            window,
        }
    }

    /// The rules it follows.
    pub fn rules(&self) -> &BreakerRules {
        &self.rules
    }

    /// The state at `now`. An `Open` whose `until` is not after `now` is
    /// due: the next [`try_acquire`](Self::try_acquire) sends the probe.
    pub fn state(&self, _now: Instant) -> BreakerState {
        // `now` is taken so that callers need not change should the state
        // ever be derived from time; today every transition happens in
        // `try_acquire` or `record`.
        match self.circuit {
            Circuit::Closed => BreakerState::Closed,
            Circuit::Open { until } => BreakerState::Open { until },
            Circuit::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// When the breaker last opened (or re-opened after a failed probe);
    /// `None` while it is closed. For a cap on how many instances may be
    /// ejected at once.
    pub fn opened_at(&self) -> Option<Instant> {
        self.opened_at
    }

    /// Whether a call may go at `now`. When the breaker is open and due,
    /// this call is the probe: the breaker turns half-open and refuses
    /// every other call until the probe is recorded.
    ///
    /// A probe whose outcome is never recorded (its caller was cancelled)
    /// would keep the breaker half-open for ever, so after `open_for`
    /// without an outcome, another probe may go.
    pub fn try_acquire(&mut self, now: Instant) -> bool {
        if !self.rules.enabled {
            return true;
        }
        match self.next_probe() {
            None => true,
            Some(at) if now < at => false,
            Some(_) => {
                self.circuit = Circuit::HalfOpen { probe_sent: now };
                true
            }
        }
    }

    /// An attempt was dropped before its outcome was known (a forking
    /// loser, a caller giving up). If it may have been the half-open
    /// probe, the next call may probe at once instead of waiting for the
    /// lost probe to be given up.
    pub fn abandon(&mut self, now: Instant) {
        if let Circuit::HalfOpen { .. } = self.circuit {
            self.circuit = Circuit::Open { until: now };
        }
    }

    /// Whether the instance is ejected at `now`: open and not yet due, or
    /// half-open with its probe in flight. An open breaker that is due is
    /// not ejected, so the instance can be picked and carry the probe.
    pub fn is_ejected(&self, now: Instant) -> bool {
        if !self.rules.enabled {
            return false;
        }
        self.next_probe().is_some_and(|at| now < at)
    }

    /// Records a finished call that took `elapsed`; returns the new state
    /// when it changed.
    ///
    /// While closed, the call is counted and the rules judged. While
    /// half-open, the call is taken as the probe: ok and not slow closes
    /// the breaker with an empty window, failed or slow (when the
    /// slow-call rule is set) opens it again for `open_for`. A call started
    /// before the breaker opened may finish during the probe and be taken
    /// for it; it is then at least `open_for` old, so usually a timeout or
    /// a slow call, both of which keep the breaker open (only a long
    /// success with no slow-call rule closes it early). While open, calls
    /// are ignored:
    /// they were sent before it opened and the window starts afresh on
    /// closing anyway.
    pub fn record(&mut self, now: Instant, elapsed: Duration, ok: bool) -> Option<BreakerState> {
        if !self.rules.enabled {
            return None;
        }
        let slow = elapsed > self.rules.slow_threshold;
        match self.circuit {
            Circuit::Open { .. } => None,
            Circuit::HalfOpen { .. } => {
                if ok && !(slow && self.rules.slow_ratio.is_some()) {
                    self.close();
                    Some(BreakerState::Closed)
                } else {
                    Some(self.open(now))
                }
            }
            Circuit::Closed => {
                let counts = self.window.current(now);
                counts.total = counts.total.saturating_add(1);
                if !ok {
                    counts.failed = counts.failed.saturating_add(1);
                }
                if slow {
                    counts.slow = counts.slow.saturating_add(1);
                }
                self.tripped(now).then(|| self.open(now))
            }
        }
    }

    /// Whether the window at `now` reaches any rule.
    fn tripped(&self, now: Instant) -> bool {
        let sum = self
            .window
            .live(now)
            .fold(Counts::default(), |sum, c| Counts {
                total: sum.total.saturating_add(c.total),
                failed: sum.failed.saturating_add(c.failed),
                slow: sum.slow.saturating_add(c.slow),
            });
        if sum.total == 0 || sum.total < self.rules.min_requests {
            return false;
        }
        let ratio = |part: u32| f64::from(part) / f64::from(sum.total);
        let errors = sum.failed > 0
            && (self
                .rules
                .error_ratio
                .is_some_and(|r| ratio(sum.failed) >= r)
                || self.rules.error_count.is_some_and(|n| sum.failed >= n));
        let slow = sum.slow > 0 && self.rules.slow_ratio.is_some_and(|r| ratio(sum.slow) >= r);
        errors || slow
    }

    fn open(&mut self, now: Instant) -> BreakerState {
        let until = later(now, self.rules.open_for);
        self.circuit = Circuit::Open { until };
        self.opened_at = Some(now);
        BreakerState::Open { until }
    }

    fn close(&mut self) {
        self.circuit = Circuit::Closed;
        self.opened_at = None;
        self.window.clear();
    }

    /// When the next probe may go; `None` while closed. While half-open,
    /// that is when the probe in flight is given up as lost.
    fn next_probe(&self) -> Option<Instant> {
        match self.circuit {
            Circuit::Closed => None,
            Circuit::Open { until } => Some(until),
            Circuit::HalfOpen { probe_sent } => Some(later(probe_sent, self.rules.open_for)),
        }
    }
}

/// `at + by`, where an `open_for` too large for the clock means "open for
/// thirty years" rather than a panic on a configured value.
fn later(at: Instant, by: Duration) -> Instant {
    const DECADES: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);
    at.checked_add(by)
        .or_else(|| at.checked_add(DECADES))
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN_FOR: Duration = Duration::from_secs(5);
    const FAST: Duration = Duration::from_millis(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Every rule off: each test turns on the one it is about.
    fn rules() -> BreakerRules {
        BreakerRules {
            enabled: true,
            window: Duration::from_secs(10),
            min_requests: 10,
            error_ratio: None,
            error_count: None,
            slow_ratio: None,
            slow_threshold: ms(100),
            open_for: OPEN_FOR,
        }
    }

    /// A breaker opened at `t0` by its error ratio.
    fn opened(t0: Instant) -> Breaker {
        let mut breaker = Breaker::new(BreakerRules {
            error_ratio: Some(0.5),
            min_requests: 2,
            ..rules()
        });
        assert_eq!(breaker.record(t0, FAST, false), None);
        assert_eq!(
            breaker.record(t0, FAST, false),
            Some(BreakerState::Open {
                until: t0 + OPEN_FOR
            })
        );
        breaker
    }

    #[test]
    fn the_error_ratio_opens_the_breaker_only_after_min_requests() {
        let mut breaker = Breaker::new(BreakerRules {
            error_ratio: Some(0.5),
            ..rules()
        });
        let t0 = Instant::now();

        for i in 0..9 {
            let now = t0 + ms(i);
            assert_eq!(breaker.record(now, FAST, false), None, "failure {i}");
            assert_eq!(breaker.state(now), BreakerState::Closed);
            assert!(breaker.try_acquire(now));
        }
        // The tenth call reaches min_requests; 9 of 10 failed.
        let now = t0 + ms(9);
        let until = now + OPEN_FOR;
        assert_eq!(
            breaker.record(now, FAST, true),
            Some(BreakerState::Open { until })
        );
        assert_eq!(breaker.state(now), BreakerState::Open { until });
        assert_eq!(breaker.opened_at(), Some(now));
    }

    #[test]
    fn an_error_ratio_below_the_threshold_keeps_the_breaker_closed() {
        let mut breaker = Breaker::new(BreakerRules {
            error_ratio: Some(0.5),
            ..rules()
        });
        let t0 = Instant::now();

        for i in 0..40 {
            // Two failures in every five calls: 40%.
            assert_eq!(breaker.record(t0, FAST, i % 5 < 3), None, "call {i}");
        }

        assert_eq!(breaker.state(t0), BreakerState::Closed);
        assert_eq!(breaker.opened_at(), None);
    }

    #[test]
    fn the_error_count_opens_the_breaker_at_the_count_once_min_requests_is_reached() {
        let mut breaker = Breaker::new(BreakerRules {
            error_count: Some(3),
            min_requests: 5,
            ..rules()
        });
        let t0 = Instant::now();

        for _ in 0..3 {
            assert_eq!(breaker.record(t0, FAST, false), None);
        }
        assert_eq!(
            breaker.record(t0, FAST, true),
            None,
            "4 calls < min_requests"
        );
        assert_eq!(
            breaker.record(t0, FAST, true),
            Some(BreakerState::Open {
                until: t0 + OPEN_FOR
            }),
            "3 failures of 5 calls"
        );
    }

    #[test]
    fn the_error_count_ignores_successes_around_the_failures() {
        let mut breaker = Breaker::new(BreakerRules {
            error_count: Some(3),
            min_requests: 5,
            ..rules()
        });
        let t0 = Instant::now();

        for _ in 0..100 {
            assert_eq!(breaker.record(t0, FAST, true), None);
        }
        assert_eq!(breaker.record(t0, FAST, false), None);
        assert_eq!(breaker.record(t0, FAST, false), None);
        assert_eq!(
            breaker.record(t0, FAST, false),
            Some(BreakerState::Open {
                until: t0 + OPEN_FOR
            })
        );
    }

    #[test]
    fn the_slow_call_ratio_opens_the_breaker() {
        let mut breaker = Breaker::new(BreakerRules {
            slow_ratio: Some(0.5),
            min_requests: 4,
            ..rules()
        });
        let t0 = Instant::now();

        assert_eq!(breaker.record(t0, ms(150), true), None);
        assert_eq!(
            breaker.record(t0, ms(100), true),
            None,
            "at the threshold is not slow"
        );
        assert_eq!(breaker.record(t0, FAST, true), None);
        // 1 slow of 4.
        assert_eq!(breaker.record(t0, FAST, true), None);
        assert_eq!(breaker.record(t0, ms(101), true), None, "2 slow of 5");
        assert_eq!(
            breaker.record(t0, ms(500), true),
            Some(BreakerState::Open {
                until: t0 + OPEN_FOR
            }),
            "3 slow of 6"
        );
    }

    #[test]
    fn slow_calls_alone_do_not_open_a_breaker_without_a_slow_call_rule() {
        let mut breaker = Breaker::new(BreakerRules {
            error_ratio: Some(0.5),
            ..rules()
        });
        let t0 = Instant::now();

        for _ in 0..50 {
            assert_eq!(breaker.record(t0, Duration::from_secs(3), true), None);
        }

        assert_eq!(breaker.state(t0), BreakerState::Closed);
    }

    #[test]
    fn an_open_breaker_refuses_calls_until_open_for_has_elapsed() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);

        let almost = t0 + OPEN_FOR - ms(1);
        assert!(breaker.is_ejected(almost));
        assert!(!breaker.try_acquire(almost));
        assert_eq!(
            breaker.state(almost),
            BreakerState::Open {
                until: t0 + OPEN_FOR
            }
        );

        let due = t0 + OPEN_FOR;
        assert!(
            !breaker.is_ejected(due),
            "a due breaker lets its probe be picked"
        );
        assert!(breaker.try_acquire(due));
        assert_eq!(breaker.state(due), BreakerState::HalfOpen);
    }

    #[test]
    fn a_half_open_breaker_lets_exactly_one_probe_through() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);
        let due = t0 + OPEN_FOR;

        assert!(breaker.try_acquire(due));

        assert!(breaker.is_ejected(due), "the probe is in flight");
        assert!(!breaker.try_acquire(due));
        assert!(!breaker.try_acquire(due + ms(100)));
        assert_eq!(breaker.state(due + ms(100)), BreakerState::HalfOpen);
    }

    #[test]
    fn a_successful_probe_closes_the_breaker_with_a_fresh_window() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);
        let due = t0 + OPEN_FOR;
        assert!(breaker.try_acquire(due));

        assert_eq!(
            breaker.record(due + FAST, FAST, true),
            Some(BreakerState::Closed)
        );

        let after = due + FAST;
        assert!(breaker.try_acquire(after));
        assert!(!breaker.is_ejected(after));
        assert_eq!(breaker.opened_at(), None);
        // The two failures that opened it are forgotten: one more failure
        // is below min_requests again.
        assert_eq!(breaker.record(after, FAST, false), None);
        assert_eq!(breaker.state(after), BreakerState::Closed);
    }

    #[test]
    fn a_failed_probe_opens_the_breaker_again_for_open_for() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);
        let due = t0 + OPEN_FOR;
        assert!(breaker.try_acquire(due));

        let failed = due + ms(20);
        assert_eq!(
            breaker.record(failed, ms(20), false),
            Some(BreakerState::Open {
                until: failed + OPEN_FOR
            })
        );

        assert_eq!(breaker.opened_at(), Some(failed));
        assert!(breaker.is_ejected(failed + OPEN_FOR - ms(1)));
        assert!(!breaker.try_acquire(failed + OPEN_FOR - ms(1)));
        assert!(breaker.try_acquire(failed + OPEN_FOR));
    }

    #[test]
    fn a_slow_probe_opens_the_breaker_again() {
        let mut breaker = Breaker::new(BreakerRules {
            slow_ratio: Some(0.5),
            min_requests: 1,
            ..rules()
        });
        let t0 = Instant::now();
        assert_eq!(
            breaker.record(t0, ms(200), true),
            Some(BreakerState::Open {
                until: t0 + OPEN_FOR
            })
        );
        let due = t0 + OPEN_FOR;
        assert!(breaker.try_acquire(due));

        let answered = due + ms(200);
        assert_eq!(
            breaker.record(answered, ms(200), true),
            Some(BreakerState::Open {
                until: answered + OPEN_FOR
            })
        );
    }

    #[test]
    fn a_probe_that_never_reports_lets_another_probe_go_after_open_for() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);
        let due = t0 + OPEN_FOR;
        assert!(breaker.try_acquire(due));

        assert!(!breaker.try_acquire(due + OPEN_FOR - ms(1)));
        assert!(!breaker.is_ejected(due + OPEN_FOR));
        assert!(breaker.try_acquire(due + OPEN_FOR));
        assert!(!breaker.try_acquire(due + OPEN_FOR));
    }

    #[test]
    fn calls_finishing_while_open_neither_count_nor_extend_the_open_time() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);

        assert_eq!(breaker.record(t0 + ms(1), FAST, false), None);

        assert_eq!(
            breaker.state(t0 + ms(1)),
            BreakerState::Open {
                until: t0 + OPEN_FOR
            }
        );
        assert_eq!(breaker.opened_at(), Some(t0));
    }

    #[test]
    fn a_disabled_breaker_never_opens() {
        let mut breaker = Breaker::new(BreakerRules::disabled());
        let t0 = Instant::now();

        for i in 0..1000 {
            assert_eq!(
                breaker.record(t0 + ms(i), Duration::from_secs(60), false),
                None
            );
        }

        assert_eq!(breaker.state(t0), BreakerState::Closed);
        assert!(breaker.try_acquire(t0));
        assert!(!breaker.is_ejected(t0));
        assert_eq!(breaker.opened_at(), None);
    }

    #[test]
    fn old_failures_slide_out_of_the_window_and_no_longer_count() {
        let rules = BreakerRules {
            error_count: Some(5),
            min_requests: 5,
            ..rules()
        };
        let t0 = Instant::now();
        let mut breaker = Breaker::new(rules);
        for _ in 0..4 {
            assert_eq!(breaker.record(t0, FAST, false), None);
        }
        let mut inside = breaker.clone();

        // Within the window, a fifth failure opens it.
        let late = t0 + Duration::from_millis(9_999);
        assert_eq!(
            inside.record(late, FAST, false),
            Some(BreakerState::Open {
                until: late + OPEN_FOR
            })
        );
        // Once the first bucket has left the 10 s window, it does not.
        let slid = t0 + Duration::from_secs(10);
        assert_eq!(breaker.record(slid, FAST, false), None);
        for _ in 0..3 {
            assert_eq!(breaker.record(slid, FAST, false), None);
        }
        assert_eq!(
            breaker.record(slid, FAST, false),
            Some(BreakerState::Open {
                until: slid + OPEN_FOR
            }),
            "five new failures do"
        );
    }

    #[test]
    fn the_default_rules_open_on_half_of_twenty_calls_in_ten_seconds() {
        let rules = BreakerRules::default();
        assert!(rules.enabled);
        assert_eq!(rules.window, Duration::from_secs(10));
        assert_eq!(rules.min_requests, 20);
        assert_eq!(rules.error_ratio, Some(0.5));
        assert_eq!(rules.open_for, Duration::from_secs(10));

        let mut breaker = Breaker::new(rules);
        let t0 = Instant::now();
        for i in 0..19 {
            assert_eq!(breaker.record(t0, FAST, i % 2 == 0), None, "call {i}");
        }
        // 10 failures of 20.
        assert_eq!(
            breaker.record(t0, FAST, false),
            Some(BreakerState::Open {
                until: t0 + Duration::from_secs(10)
            })
        );
    }
}
