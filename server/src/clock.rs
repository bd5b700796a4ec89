//! The server's clock: epoch milliseconds anchored once to the wall clock
//! and then advanced by tokio's monotonic clock. Wall-clock jumps do not
//! reach the liveness rules, and under tokio's paused clock (tests) time
//! moves only when the test moves it, so liveness sleeps and timestamps
//! always agree.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use understudy_core::Millis;

/// Epoch milliseconds on tokio's clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch_at_start: Millis,
    start: Instant,
}

impl Clock {
    /// A clock that reads the wall clock now and counts on from there.
    pub fn system() -> Self {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self::starting_at(epoch)
    }

    /// A clock that reads `epoch_ms` now (tests inject a fixed start).
    pub fn starting_at(epoch_ms: Millis) -> Self {
        Self {
            epoch_at_start: epoch_ms,
            start: Instant::now(),
        }
    }

    /// Now, in epoch milliseconds.
    pub fn now(&self) -> Millis {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.epoch_at_start.saturating_add(elapsed)
    }

    /// The tokio instant at which the clock reads `at`.
    pub fn instant_at(&self, at: Millis) -> Instant {
        self.start + std::time::Duration::from_millis(at.saturating_sub(self.epoch_at_start))
    }
}

/// A span of time in the clock's unit, whole milliseconds (saturating).
pub fn millis(span: std::time::Duration) -> Millis {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}
