//! The server's clock: epoch milliseconds anchored once to the wall clock
//! and then advanced by tokio's monotonic clock. Wall-clock jumps do not
//! reach the liveness rules, and under tokio's paused clock (tests) time
//! moves only when the test moves it, so liveness sleeps and timestamps
//! always agree. Stamps that other nodes compare with their own time
//! (entry stamps, view lag) read the wall clock through the same seam
//! ([`Clock::wall_ms`]). The ids that must differ across restarts of a
//! node take [`restart_nonce`], the one reading of the system clock
//! outside it.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use understudy_core::Millis;

/// Epoch milliseconds on tokio's clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch_at_start: Millis,
    start: Instant,
    /// Whether [`Clock::wall_ms`] reads the system's wall clock (else it
    /// reads [`Clock::now`]: an injected clock is the whole truth).
    system: bool,
}

impl Clock {
    /// A clock that reads the wall clock now and counts on from there.
    pub fn system() -> Self {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            system: true,
            ..Self::starting_at(epoch)
        }
    }

    /// A clock that reads `epoch_ms` now (tests inject a fixed start).
    pub fn starting_at(epoch_ms: Millis) -> Self {
        Self {
            epoch_at_start: epoch_ms,
            start: Instant::now(),
            system: false,
        }
    }

    /// The wall clock, epoch milliseconds, for stamps other nodes compare
    /// with their own reading: unlike [`Clock::now`] it follows the
    /// system's time corrections, as the other nodes' clocks do. A clock
    /// with an injected start reads [`Clock::now`] here.
    pub fn wall_ms(&self) -> Millis {
        if !self.system {
            return self.now();
        }
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis)
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

/// A number no earlier start of this process or node drew: the system
/// clock's nanoseconds since the epoch. Ids that must never repeat across
/// restarts (the writer's batch sequence, the provisional cluster id,
/// native session ids) start from it. It reads the system clock, not an
/// injected one, on purpose: a test's clock restarts at the same reading,
/// and a restarted node must not reuse its ids.
pub fn restart_nonce() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
