//! A node nobody scrapes does not grow with every request: the metrics
//! recorder holds each histogram sample until its histograms are folded
//! into their buckets, and every node folds them every `UPKEEP_EVERY`.
//! Its own test binary, so the counting allocator sees only this test.

use std::alloc::System;
use std::time::Duration;

use cap::Cap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_server::config::Settings;
use understudy_server::metrics::{self, UPKEEP_EVERY};
use understudy_server::{Clock, Node, ValidConfig};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

fn record(samples: u32) {
    for i in 0..samples {
        ::metrics::histogram!("understudy_grpc_request_seconds", "type" => "upkeep-test")
            .record(f64::from(i % 100) / 1e6);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histogram_samples_are_released_without_a_scrape() {
    let handle = metrics::handle();
    // A node, which nobody scrapes.
    let config = ValidConfig::from_settings(Settings::default()).expect("default settings");
    let (tasks, cancel) = (TaskTracker::new(), CancellationToken::new());
    let node = Node::start(config, Clock::system(), &tasks, cancel.clone())
        .await
        .expect("a single node starts");
    let before = ALLOCATOR.allocated();
    // Held, 500,000 samples take some 8 MB; folded, a few counters.
    let mut recorded = 500_000;
    record(recorded);
    // Requests go on (a trickle of 5,000 a second): the recorder frees
    // folded blocks as its users come by.
    let deadline = tokio::time::Instant::now() + UPKEEP_EVERY * 10;
    let mut held = ALLOCATOR.allocated().saturating_sub(before);
    while held > 1_000_000 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        record(100);
        recorded += 100;
        held = ALLOCATOR.allocated().saturating_sub(before);
    }
    cancel.cancel();
    tasks.close();
    tasks.wait().await;
    drop(node);
    assert!(
        held <= 1_000_000,
        "{held} bytes still held {:?} after recording {recorded} samples with no scrape",
        UPKEEP_EVERY * 10
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
