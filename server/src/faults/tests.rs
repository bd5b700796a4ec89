//! The link model's tests.

use super::*;

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);
/// Far longer than any test step takes.
const LONG: Duration = Duration::from_secs(5);

fn delayed(delay: Duration) -> Link {
    Link {
        delay,
        ..Link::default()
    }
}

fn lossy(loss: f64) -> Link {
    Link {
        loss,
        ..Link::default()
    }
}

// The server crate has no tokio `test-util`, so these run on real time:
// delays are asserted as lower bounds, and "at once" as far below a
// delay too long to be mistaken for it.

#[tokio::test]
async fn a_cut_fails_both_directions_at_once_without_running_the_call_and_heals() {
    let faults = LinkFaults::new(1);
    faults.set_both(1, 2, delayed(LONG)).unwrap();
    faults.cut(1, 2);
    let runs = AtomicUsize::new(0);
    let start = Instant::now();
    for (from, to) in [(1, 2), (2, 1)] {
        let result = faults
            .carry(from, to, async { runs.fetch_add(1, Ordering::SeqCst) })
            .await;
        assert_eq!(result, Err(LinkDown::Cut { from, to }));
    }
    assert!(start.elapsed() < LONG / 2, "{:?}", start.elapsed());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(
        faults.carry(1, 3, async {}).await.is_ok(),
        "other links unaffected"
    );

    faults.heal(2, 1);
    assert_eq!(
        faults.link(1, 2),
        delayed(LONG),
        "the delay outlives the cut"
    );
    assert!(faults.admits(1, 2).is_ok() && faults.admits(2, 1).is_ok());
    faults.clear(1, 2);

    faults.cut(1, 2);
    faults.cut(3, 4);
    faults.heal_all();
    assert_eq!(
        faults.links(),
        vec![(2, 1, delayed(LONG))],
        "cut-only links vanish"
    );
    faults.clear_all();
    assert!(faults.links().is_empty());
}

#[tokio::test]
async fn the_request_waits_its_link_delay_and_the_answer_the_reverse_one() {
    let faults = LinkFaults::new(1);
    faults.set(1, 2, delayed(40 * MS)).unwrap();
    faults.set(2, 1, delayed(10 * MS)).unwrap();
    let start = Instant::now();
    let ran_at = faults.carry(1, 2, async { Instant::now() }).await.unwrap();
    let answered = start.elapsed();
    assert!(ran_at - start >= 40 * MS, "ran after {:?}", ran_at - start);
    assert!(
        answered >= (ran_at - start) + 10 * MS,
        "answered after {answered:?}"
    );
    assert!(answered < LONG, "answered after {answered:?}");
}

#[tokio::test]
async fn a_lost_rpc_fails_after_its_delay_and_a_cut_in_flight_drops_it() {
    let faults = LinkFaults::new(1);
    faults
        .set(
            1,
            2,
            Link {
                delay: 40 * MS,
                loss: 1.0,
                ..Link::default()
            },
        )
        .unwrap();
    let start = Instant::now();
    let lost = faults.carry(1, 2, async { unreachable!("lost") }).await;
    assert_eq!(lost, Err::<(), _>(LinkDown::Lost { from: 1, to: 2 }));
    assert!(start.elapsed() >= 40 * MS, "{:?}", start.elapsed());

    faults.set(1, 2, delayed(40 * MS)).unwrap();
    let runs = AtomicUsize::new(0);
    // `join` polls in order: the request is in flight when the cut lands.
    let (in_flight, ()) = tokio::join!(
        faults.carry(1, 2, async { runs.fetch_add(1, Ordering::SeqCst) }),
        async { faults.cut(1, 2) }
    );
    assert_eq!(in_flight, Err(LinkDown::Cut { from: 1, to: 2 }));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_one_way_cut_loses_the_answer_after_the_call_ran() {
    let faults = LinkFaults::new(1);
    faults
        .set(
            2,
            1,
            Link {
                cut: true,
                ..Link::default()
            },
        )
        .unwrap();
    let runs = AtomicUsize::new(0);
    let result = faults
        .carry(1, 2, async { runs.fetch_add(1, Ordering::SeqCst) })
        .await;
    assert_eq!(result, Err(LinkDown::Cut { from: 2, to: 1 }));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(faults.admits(1, 2).is_ok());
    assert!(faults.admits(2, 1).is_err());
}

async fn losses(faults: &LinkFaults, from: NodeId, to: NodeId, n: usize) -> Vec<bool> {
    let mut lost = Vec::with_capacity(n);
    for _ in 0..n {
        lost.push(faults.carry(from, to, async {}).await.is_err());
    }
    lost
}

#[tokio::test]
async fn seeded_loss_replays_and_does_not_depend_on_other_links() {
    let a = LinkFaults::new(7);
    let b = LinkFaults::new(7);
    for faults in [&a, &b] {
        faults.set(1, 2, lossy(0.3)).unwrap();
        faults.set(1, 3, lossy(0.5)).unwrap();
    }
    let first = losses(&a, 1, 2, 200).await;
    // Traffic on another lossy link in between must not shift the draws.
    let _ = losses(&b, 1, 3, 37).await;
    let again = losses(&b, 1, 2, 200).await;
    assert_eq!(first, again, "seed {}", a.seed());
    let lost = first.iter().filter(|&&l| l).count();
    assert!((30..=90).contains(&lost), "lost {lost} of 200 at 30%");

    let other = LinkFaults::new(8);
    other.set(1, 2, lossy(0.3)).unwrap();
    assert_ne!(losses(&other, 1, 2, 200).await, first);
}

#[test]
fn a_loss_that_is_not_a_probability_is_refused_by_value() {
    let faults = LinkFaults::new(1);
    for loss in [-0.1, 1.5, f64::NAN] {
        assert!(matches!(
            faults.set(1, 2, lossy(loss)),
            Err(InvalidLink::Loss(_))
        ));
    }
    assert!(faults.links().is_empty());
}

fn spec(text: &str) -> LinkSpec {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn link_specs_parse_and_print_back() {
    let s = spec("hz-sh=40ms~10ms,loss=1%");
    assert_eq!((s.from.as_str(), s.to.as_str(), s.both), ("hz", "sh", true));
    assert_eq!(s.link.delay, 40 * MS);
    assert_eq!(s.link.jitter, 10 * MS);
    assert!((s.link.loss - 0.01).abs() < 1e-12);
    assert_eq!(s.to_string(), "hz-sh=40ms~10ms,loss=1%");
    let one_way = spec("sh->hz=1.5s,cut");
    assert!(!one_way.both && one_way.link.cut);
    assert_eq!(one_way.link.delay, Duration::from_millis(1500));
    assert_eq!(spec("a-b=loss=0.5").link.loss, 0.5);
    assert_eq!(spec("a-b=perfect").link, Link::default());
    for (text, names) in [
        ("hz-sh", "FROM-TO=FAULTS"),
        ("us-east-sh=1ms", "two DC names"),
        ("hz-=1ms", "a DC name on each side"),
        ("hz-sh=40", "without a unit"),
        ("hz-sh=40min", "unit 'min'"),
        ("hz-sh=loss=150%", "not a probability"),
        ("hz-sh=loss=lots", "not a number"),
    ] {
        let e = text.parse::<LinkSpec>().unwrap_err().to_string();
        assert!(e.contains(names), "{text}: {e}");
    }
}

#[tokio::test]
async fn dc_links_act_on_their_nodes_and_node_links_win() {
    let faults = LinkFaults::new(1);
    for (node, dc) in [(1, "hz"), (2, "hz"), (3, "sh")] {
        faults.set_dc(node, dc);
    }
    faults.apply(&spec("hz-sh=40ms")).unwrap();
    assert_eq!(faults.link(1, 3).delay, 40 * MS);
    assert_eq!(faults.link(3, 2).delay, 40 * MS);
    assert_eq!(faults.link(1, 2), Link::default(), "inside hz");
    assert_eq!(faults.link(1, 4), Link::default(), "DC unknown");

    faults.partition("hz", "sh");
    assert_eq!(faults.admits(3, 1), Err(LinkDown::Cut { from: 3, to: 1 }));
    assert!(faults.admits(2, 1).is_ok());
    faults.heal_dcs("sh", "hz");
    assert_eq!(faults.link(1, 3), delayed(40 * MS), "the latency stays");

    faults.set(1, 3, Link::default()).unwrap();
    assert_eq!(faults.link(1, 3), delayed(40 * MS), "perfect = follow DCs");
    faults.set(1, 3, lossy(0.5)).unwrap();
    assert_eq!(faults.link(1, 3), lossy(0.5));

    faults.pause(2);
    assert!(faults.link(1, 2).cut && faults.link(2, 3).cut);
    faults.heal_all();
    assert!(!faults.link(1, 2).cut);
    assert_eq!(faults.dc_links().len(), 2);
}

#[tokio::test]
async fn jitter_spreads_delays_around_the_latency_and_replays() {
    let draw = |seed| {
        let faults = LinkFaults::new(seed);
        faults
            .set(
                1,
                2,
                Link {
                    delay: 40 * MS,
                    jitter: 10 * MS,
                    ..Link::default()
                },
            )
            .unwrap();
        (0..200)
            .map(|_| faults.send(1, 2).unwrap().0)
            .collect::<Vec<_>>()
    };
    let delays = draw(3);
    assert!(delays.iter().all(|d| (30 * MS..=50 * MS).contains(d)));
    assert!(delays.iter().any(|d| *d < 35 * MS) && delays.iter().any(|d| *d > 45 * MS));
    assert_eq!(delays, draw(3));
    assert_ne!(delays, draw(4));
}

#[test]
fn a_config_read_lag_is_kept_per_dc_in_the_state_and_zero_removes_it() {
    let faults = LinkFaults::new(1);
    assert_eq!(faults.config_read_lag("sh"), Duration::ZERO);
    faults.set_config_read_lag("sh", 500 * MS);
    assert_eq!(faults.config_read_lag("sh"), 500 * MS);
    assert_eq!(faults.config_read_lag("hz"), Duration::ZERO, "per DC");
    let state = faults.state();
    assert_eq!(
        state.config_read_lags_ms,
        BTreeMap::from([("sh".to_owned(), 500)])
    );

    let other = LinkFaults::new(2);
    other.set_state(&state).unwrap();
    assert_eq!(other.config_read_lag("sh"), 500 * MS, "handed to a peer");
    let mut zero = state.clone();
    zero.config_read_lags_ms.insert("sh".to_owned(), 0);
    other.set_state(&zero).unwrap();
    assert!(other.state().config_read_lags_ms.is_empty(), "0 ms removes");

    faults.set_config_read_lag("sh", Duration::ZERO);
    assert_eq!(faults.config_read_lag("sh"), Duration::ZERO);
    faults.set_config_read_lag("sh", 500 * MS);
    faults.clear_all();
    assert_eq!(faults.config_read_lag("sh"), Duration::ZERO);
}
