//! A node nobody scrapes does not grow with every request: the metrics
//! recorder holds each histogram sample until its histograms are folded
//! into their buckets, and a thread folds them every `UPKEEP_EVERY`.
//! Its own test binary, so the counting allocator sees only this test.

use std::alloc::System;
use std::time::{Duration, Instant};

use cap::Cap;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

fn record(samples: u32) {
    for i in 0..samples {
        metrics::histogram!("understudy_grpc_request_seconds", "type" => "upkeep-test")
            .record(f64::from(i % 100) / 1e6);
    }
}

#[test]
fn histogram_samples_are_released_without_a_scrape() {
    let handle = understudy_server::metrics::handle();
    let before = ALLOCATOR.allocated();
    // Held, 500,000 samples take some 8 MB; folded, a few counters.
    let mut recorded = 500_000;
    record(recorded);
    // Requests go on (a trickle of 5,000 a second): the recorder frees
    // folded blocks as its users come by.
    let deadline = Instant::now() + understudy_server::metrics::UPKEEP_EVERY * 10;
    let mut held = ALLOCATOR.allocated().saturating_sub(before);
    while held > 1_000_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        record(100);
        recorded += 100;
        held = ALLOCATOR.allocated().saturating_sub(before);
    }
    assert!(
        held <= 1_000_000,
        "{held} bytes still held {:?} after recording {recorded} samples with no scrape",
        understudy_server::metrics::UPKEEP_EVERY * 10
    );
    // Folded, not dropped: the scrape still counts every sample.
    let count = format!(" {recorded}");
    let text = handle.render();
    assert!(
        text.lines()
            .any(|l| l.starts_with("understudy_grpc_request_seconds_count")
                && l.contains("upkeep-test")
                && l.ends_with(&count)),
        "no count of {recorded} for the test's samples in:\n{text}"
    );
}
