//! Load shedding. A node works on at most `max_concurrent_requests`
//! ordinary requests (registrations, queries, subscriptions, config calls)
//! at once; one more waits up to `request_queue_timeout_ms` for a slot and
//! is then refused as busy, so a flood is answered at once instead of
//! queueing without bound. What keeps registrations alive is never held
//! here: heartbeats, deregistrations, and the probes and health checks
//! that tell a client its server is there. An overloaded registry then
//! sheds new work but does not start expiring healthy instances.

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The request slots of a node.
#[derive(Debug)]
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    max: usize,
    wait: Duration,
}

/// No slot came free in time.
#[derive(Debug, Clone, Error)]
#[error(
    "the server is busy: {max} requests are in progress (max_concurrent_requests); retry later"
)]
pub(crate) struct Busy {
    max: usize,
}

/// A slot, held while the request is worked on.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    pub(crate) fn new(max: usize, wait: Duration) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            max,
            wait,
        }
    }

    /// Takes a slot, waiting up to the queue timeout; `api` labels the
    /// refusals.
    pub(crate) async fn enter(&self, api: &'static str) -> Result<Slot, Busy> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(Slot { _permit: permit });
        }
        match tokio::time::timeout(self.wait, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Slot { _permit: permit }),
            _ => {
                metrics::counter!("understudy_requests_shed_total", "api" => api).increment(1);
                Err(Busy { max: self.max })
            }
        }
    }

    /// Slots in use now.
    pub(crate) fn in_use(&self) -> usize {
        self.max - self.slots.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_beyond_the_slots_waits_then_is_refused_and_a_freed_slot_admits_again() {
        let admission = Admission::new(2, Duration::from_millis(100));
        let first = admission.enter("test").await.unwrap();
        let _second = admission.enter("test").await.unwrap();
        assert_eq!(admission.in_use(), 2);
        let refused = admission.enter("test").await.unwrap_err();
        assert!(refused.to_string().contains("max_concurrent_requests"));
        // A slot freed while waiting is taken.
        let waiting = admission.enter("test");
        let free = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(first);
        };
        let (admitted, ()) = tokio::join!(waiting, free);
        assert!(admitted.is_ok());
    }
}
