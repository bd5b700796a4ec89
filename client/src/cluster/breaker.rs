//! A circuit breaker per instance: closed -> open -> half-open with one
//! probe. (Skeleton: to be written.)

use std::time::Duration;

use tokio::time::Instant;

/// When a breaker opens.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerRules {
    /// Never opens when false.
    pub enabled: bool,
    /// How long the breaker stays open.
    pub open_for: Duration,
}

impl BreakerRules {
    /// A breaker that never opens.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            open_for: Duration::from_secs(10),
        }
    }
}

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls flow.
    Closed,
    /// Calls are refused until `until`.
    Open {
        /// When a probe may go.
        until: Instant,
    },
    /// One probe is in flight.
    HalfOpen,
}

/// A circuit breaker.
#[derive(Debug)]
pub struct Breaker {
    rules: BreakerRules,
    state: BreakerState,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(rules: BreakerRules) -> Self {
        Self {
            rules,
            state: BreakerState::Closed,
        }
    }

    /// The state at `now`.
    pub fn state(&self, _now: Instant) -> BreakerState {
        self.state
    }

    /// Whether a call may go now.
    pub fn try_acquire(&mut self, _now: Instant) -> bool {
        !self.rules.enabled || self.state == BreakerState::Closed
    }

    /// Whether the instance is ejected at `now`.
    pub fn is_ejected(&self, _now: Instant) -> bool {
        false
    }

    /// Records a finished call.
    pub fn record(&mut self, _now: Instant, _elapsed: Duration, _ok: bool) -> Option<BreakerState> {
        None
    }
}
