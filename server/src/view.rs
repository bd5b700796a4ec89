//! How fresh a node's read view is. Every log entry carries the wall-clock
//! time its proposer stamped it with; the leader appends an empty, stamped
//! tick entry every tick interval (`raft::ticks::run_ticks`), so freshness means
//! something on an idle cluster too. A node's view lag is now minus the
//! newest stamp it has applied; on a caught-up node it stays below one
//! tick interval plus the link latency. Each applied registration also
//! gives a register-to-visible delay: apply time minus its stamp.
//!
//! A DC's apply delay (part of the fault model) holds each entry back until
//! its stamp plus the delay, so committed entries reach that DC's view late
//! while raft itself runs at full speed: asynchronous cross-DC sync.
//!
//! A DC's config read lag (also a fault) makes formal config reads trail
//! the applied state instead, as Nacos' do: for the lag after a config
//! write is applied here, reads of that config answer as before it
//! (`read_lag.rs` keeps what they answer). Listeners, long polling and
//! pushes compare with the applied state, unlagged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use understudy_core::{Command, ConfigItem, ConfigKey};

use crate::clock::Clock;
use crate::faults::LinkFaults;
use crate::read_lag::{self, ReadLag};

/// Register-to-visible delays are kept up to this, in microseconds.
const R2V_MAX_US: u64 = 3_600_000_000;

/// One node's read-view freshness. Shared by the state machine, which
/// feeds it, and the node, which reports it.
#[derive(Debug, Clone)]
pub struct View {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dc: String,
    faults: LinkFaults,
    /// Entry stamps are this clock's wall readings.
    clock: Clock,
    /// The newest stamp applied here, ms since the epoch; 0 before any.
    newest: AtomicU64,
    /// Register-to-visible delays seen here, µs.
    r2v: Mutex<Histogram<u64>>,
    /// The same, as the Prometheus histogram of this node's DC.
    r2v_metric: metrics::Histogram,
    /// What formal config reads answered before recent writes, while
    /// this DC has a config read lag.
    read_lag: Mutex<ReadLag>,
}

/// A summary of delays, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DelaySummary {
    /// How many were seen.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl DelaySummary {
    /// The summary of a histogram of microseconds.
    pub fn of_micros(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.5)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

impl View {
    /// The view of a node in `dc`, whose apply delay `faults` holds.
    pub fn new(dc: &str, faults: LinkFaults, clock: Clock) -> Self {
        // The handle below binds to the recorder installed now.
        let _ = crate::metrics::handle();
        Self {
            inner: Arc::new(Inner {
                dc: dc.to_owned(),
                faults,
                clock,
                newest: AtomicU64::new(0),
                r2v: Mutex::new(
                    Histogram::new_with_bounds(1, R2V_MAX_US, 2).expect("valid histogram bounds"),
                ),
                r2v_metric: metrics::histogram!(
                    "understudy_register_visible_seconds",
                    "dc" => dc.to_owned()
                ),
                read_lag: Mutex::new(ReadLag::default()),
            }),
        }
    }

    /// Waits until an entry stamped `stamp_ms` may enter this view: its
    /// stamp plus this DC's apply delay. No wait without a delay.
    pub async fn admit(&self, stamp_ms: u64) {
        let delay = self.inner.faults.apply_delay(&self.inner.dc);
        if delay.is_zero() || stamp_ms == 0 {
            return;
        }
        let due = stamp_ms + delay.as_millis() as u64;
        let now = self.inner.clock.wall_ms();
        if due > now {
            tokio::time::sleep(Duration::from_millis(due - now)).await;
        }
    }

    /// Records that an entry stamped `stamp_ms` with `commands` entered
    /// this view now.
    pub fn applied(&self, stamp_ms: u64, commands: &[Command]) {
        if stamp_ms == 0 {
            return;
        }
        self.inner.newest.fetch_max(stamp_ms, Ordering::Relaxed);
        let registrations = commands
            .iter()
            .filter(|c| matches!(c.op, understudy_core::Op::Register { .. }))
            .count() as u64;
        if registrations > 0 {
            let delay_us = self.inner.clock.wall_ms().saturating_sub(stamp_ms) * 1000;
            let seconds = delay_us as f64 / 1e6;
            self.inner.r2v_metric.record(seconds);
            let mut h = self
                .inner
                .r2v
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let _ = h.record_n(delay_us.clamp(1, R2V_MAX_US), registrations);
        }
    }

    /// Called before `commands` are applied: with a config read lag in
    /// this DC, remembers what formal reads of the configs they write
    /// answer now (`current` reads the applied content), so that reads
    /// answer it for the lag. Without a lag, or without config writes,
    /// it reads nothing.
    pub(crate) fn before_apply(
        &self,
        commands: &[Command],
        current: impl Fn(&ConfigKey) -> Option<Arc<ConfigItem>>,
    ) {
        let written = read_lag::formal_writes(commands);
        if written.is_empty() {
            return;
        }
        let lag = self.config_read_lag();
        if lag == 0 {
            return;
        }
        let before: Vec<_> = written
            .into_iter()
            .map(|key| (key.clone(), current(key)))
            .collect();
        // Remembered before the batch is applied, so no read in between
        // sees the new content early.
        self.read_lag()
            .remember(before, self.inner.clock.now(), lag);
    }

    /// What a formal read of `key` answers on this node, `current` being
    /// its applied content: under this DC's config read lag, the content
    /// before the writes not yet that old; else `current`.
    pub(crate) fn formal_config(
        &self,
        key: &ConfigKey,
        current: Option<Arc<ConfigItem>>,
    ) -> Option<Arc<ConfigItem>> {
        let mut memory = self.read_lag();
        if memory.is_empty() {
            return current;
        }
        memory.read(key, current, self.inner.clock.now(), self.config_read_lag())
    }

    fn config_read_lag(&self) -> understudy_core::Millis {
        crate::clock::millis(self.inner.faults.config_read_lag(&self.inner.dc))
    }

    fn read_lag(&self) -> std::sync::MutexGuard<'_, ReadLag> {
        self.inner
            .read_lag
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How far this view is behind the leader now; `None` before the
    /// first stamped entry.
    pub fn lag(&self) -> Option<Duration> {
        match self.inner.newest.load(Ordering::Relaxed) {
            0 => None,
            newest => Some(Duration::from_millis(
                self.inner.clock.wall_ms().saturating_sub(newest),
            )),
        }
    }

    /// The newest stamp applied here, ms since the epoch (0: none yet).
    pub fn newest_stamp(&self) -> u64 {
        self.inner.newest.load(Ordering::Relaxed)
    }

    /// The register-to-visible delays seen here.
    pub fn register_to_visible(&self) -> DelaySummary {
        let h = self
            .inner
            .r2v
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        DelaySummary::of_micros(&h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lag_follows_the_newest_stamp_and_an_apply_delay_holds_entries_back() {
        let faults = LinkFaults::new(1);
        let clock = Clock::system();
        let wall_ms = || clock.wall_ms();
        let view = View::new("sh", faults.clone(), clock);
        assert_eq!(view.lag(), None);
        let stamp = wall_ms() - 300;
        view.applied(stamp, &[]);
        let lag = view.lag().unwrap();
        assert!(lag >= Duration::from_millis(300), "{lag:?}");
        view.applied(stamp - 100, &[]);
        assert_eq!(
            view.newest_stamp(),
            stamp,
            "an older stamp never winds back"
        );

        faults.set_apply_delay("sh", Duration::from_millis(200));
        let start = std::time::Instant::now();
        view.admit(wall_ms()).await;
        assert!(
            start.elapsed() >= Duration::from_millis(190),
            "{:?}",
            start.elapsed()
        );
        let start = std::time::Instant::now();
        view.admit(wall_ms() - 1000).await;
        assert!(start.elapsed() < Duration::from_millis(150), "already due");
        faults.set_apply_delay("hz", Duration::from_secs(60));
        let start = std::time::Instant::now();
        View::new("bj", faults, clock).admit(wall_ms()).await;
        assert!(
            start.elapsed() < Duration::from_millis(150),
            "other DCs unaffected"
        );
    }
}
