//! Balancer tests: exact sequences where the algorithm is deterministic,
//! chi-square tests over a seeded RNG where it is random. Time is an
//! explicit `Instant` handed to each pick, so nothing sleeps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::time::Instant;

use super::*;
use crate::cluster::stats::{InstanceStats, Sample};
use crate::Instance;

const SEED: u64 = 0x5eed;

/// Chi-square critical values at p = 0.001, by degrees of freedom.
const CHI2_DF1: f64 = 10.83;
const CHI2_DF2: f64 = 13.82;
const CHI2_DF3: f64 = 16.27;

fn instance(ip: &str, weight: f64) -> Instance {
    Instance {
        instance_id: format!("{ip}#8080#DEFAULT#svc"),
        ip: ip.to_owned(),
        port: 8080,
        weight,
        healthy: true,
        enabled: true,
        cluster: "DEFAULT".to_owned(),
        zone: String::new(),
        metadata: BTreeMap::new(),
    }
}

fn target(ip: &str, weight: f64) -> Target {
    Target::new(instance(ip, weight))
}

fn zoned(ip: &str, zone: &str) -> Target {
    Target::new(Instance {
        zone: zone.to_owned(),
        ..instance(ip, 1.0)
    })
}

/// A target that appeared at `from`, so it is warming up after it.
fn appeared(ip: &str, weight: f64, from: Instant) -> Target {
    Target {
        instance: Arc::new(instance(ip, weight)),
        stats: Arc::new(InstanceStats::new(Some(from))),
    }
}

/// How often each target is picked in `picks` calls of `method` with a
/// seeded RNG at a fixed `now`.
fn tally(balancer: &dyn LoadBalance, targets: &[Target], picks: usize, now: Instant) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let invocation = Invocation::new("sayHello");
    let mut counts = vec![0; targets.len()];
    for _ in 0..picks {
        let mut cx = PickContext {
            now,
            rng: &mut rng,
            local_zone: None,
        };
        counts[balancer.pick(targets, &invocation, &mut cx)] += 1;
    }
    counts
}

/// Pearson's statistic of `counts` against the expected `shares`.
fn chi_square(counts: &[usize], shares: &[f64]) -> f64 {
    let n: usize = counts.iter().sum();
    counts
        .iter()
        .zip(shares)
        .map(|(&c, &share)| {
            let expected = n as f64 * share;
            (c as f64 - expected).powi(2) / expected
        })
        .sum()
}

fn names(targets: &[Target], picked: &[usize]) -> String {
    picked
        .iter()
        .map(|&i| targets[i].instance.ip.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn pick_one(
    balancer: &dyn LoadBalance,
    targets: &[Target],
    invocation: &Invocation,
    rng: &mut StdRng,
    now: Instant,
) -> usize {
    let mut cx = PickContext {
        now,
        rng,
        local_zone: None,
    };
    balancer.pick(targets, invocation, &mut cx)
}

#[test]
fn smooth_round_robin_interleaves_weights_five_one_one_as_a_a_b_a_c_a_a() {
    let targets = [target("a", 5.0), target("b", 1.0), target("c", 1.0)];
    let rr = RoundRobin::new();
    let mut rng = StdRng::seed_from_u64(SEED);
    let now = Instant::now();
    let invocation = Invocation::new("sayHello");
    let picked: Vec<usize> = (0..21)
        .map(|_| pick_one(&rr, &targets, &invocation, &mut rng, now))
        .collect();
    assert_eq!(
        names(&targets, &picked),
        "a a b a c a a a a b a c a a a a b a c a a"
    );
}

#[test]
fn round_robin_keeps_a_separate_sequence_per_method() {
    let targets = [target("a", 5.0), target("b", 1.0), target("c", 1.0)];
    let rr = RoundRobin::new();
    let mut rng = StdRng::seed_from_u64(SEED);
    let now = Instant::now();
    let (hello, bye) = (Invocation::new("sayHello"), Invocation::new("sayBye"));
    let mut hellos = Vec::new();
    let mut byes = Vec::new();
    for _ in 0..7 {
        hellos.push(pick_one(&rr, &targets, &hello, &mut rng, now));
        byes.push(pick_one(&rr, &targets, &bye, &mut rng, now));
    }
    assert_eq!(names(&targets, &hellos), "a a b a c a a");
    assert_eq!(names(&targets, &byes), "a a b a c a a");
}

#[test]
fn round_robin_takes_turns_when_every_weight_is_zero_and_skips_zero_weights_otherwise() {
    let mut rng = StdRng::seed_from_u64(SEED);
    let now = Instant::now();
    let invocation = Invocation::new("sayHello");

    let zeros = [target("a", 0.0), target("b", 0.0), target("c", 0.0)];
    let rr = RoundRobin::new();
    let picked: Vec<usize> = (0..6)
        .map(|_| pick_one(&rr, &zeros, &invocation, &mut rng, now))
        .collect();
    assert_eq!(names(&zeros, &picked), "a b c a b c");

    let mixed = [target("a", 0.0), target("b", 2.0), target("c", 1.0)];
    let rr = RoundRobin::new();
    let picked: Vec<usize> = (0..6)
        .map(|_| pick_one(&rr, &mixed, &invocation, &mut rng, now))
        .collect();
    assert_eq!(names(&mixed, &picked), "b c b b c b");
}

#[test]
fn round_robin_forgets_an_instance_a_minute_after_it_was_last_seen() {
    let (a, b, c) = (target("a", 1.0), target("b", 1.0), target("c", 1.0));
    let rr = RoundRobin::new();
    let mut rng = StdRng::seed_from_u64(SEED);
    let start = Instant::now();
    let invocation = Invocation::new("sayHello");
    let remembered = |rr: &RoundRobin| {
        let mut addresses: Vec<String> = lock(&rr.counters)["sayHello"].keys().cloned().collect();
        addresses.sort();
        addresses
    };

    let all = [a.clone(), b.clone(), c];
    pick_one(&rr, &all, &invocation, &mut rng, start);
    let left = [a, b];
    pick_one(
        &rr,
        &left,
        &invocation,
        &mut rng,
        start + Duration::from_secs(60),
    );
    assert_eq!(remembered(&rr), ["a:8080", "b:8080", "c:8080"]);
    pick_one(
        &rr,
        &left,
        &invocation,
        &mut rng,
        start + Duration::from_secs(61),
    );
    assert_eq!(remembered(&rr), ["a:8080", "b:8080"]);
}

#[test]
fn weighted_random_over_weights_one_to_four_passes_a_chi_square_test() {
    let targets = [
        target("a", 1.0),
        target("b", 2.0),
        target("c", 3.0),
        target("d", 4.0),
    ];
    let counts = tally(&WeightedRandom::new(), &targets, 20_000, Instant::now());
    let statistic = chi_square(&counts, &[0.1, 0.2, 0.3, 0.4]);
    assert!(
        statistic < CHI2_DF3,
        "chi-square {statistic:.2} >= {CHI2_DF3} for {counts:?}"
    );
    // A uniform pick would be far off: this is what the test can catch.
    let uniform = chi_square(&counts, &[0.25; 4]);
    assert!(uniform > 1000.0, "{counts:?} looks uniform");
}

#[test]
fn weighted_random_picks_uniformly_when_weights_are_equal() {
    let targets = [
        target("a", 7.0),
        target("b", 7.0),
        target("c", 7.0),
        target("d", 7.0),
    ];
    let counts = tally(&WeightedRandom::new(), &targets, 20_000, Instant::now());
    let statistic = chi_square(&counts, &[0.25; 4]);
    assert!(
        statistic < CHI2_DF3,
        "chi-square {statistic:.2} for {counts:?}"
    );
}

#[test]
fn weight_zero_is_never_picked_unless_every_weight_is_zero() {
    let balancers: Vec<Box<dyn LoadBalance>> = vec![
        Box::new(WeightedRandom::new()),
        Box::new(RoundRobin::new()),
        Box::new(LeastActive::new()),
        Box::new(ShortestResponse::new()),
        Box::new(ConsistentHash::new()),
        Box::new(PeakEwmaP2c),
        Box::new(ZoneFirstLeastActive::new()),
    ];
    let now = Instant::now();
    let mixed = [
        target("a", 0.0),
        target("b", 1.0),
        target("c", -3.0),
        target("d", f64::NAN),
        target("e", 2.0),
    ];
    // The weighted one is busy: least active must still not fall back on
    // the idle weight-0 ones.
    let _busy = mixed[1].stats.begin();
    let zeros = [target("a", 0.0), target("b", 0.0), target("c", 0.0)];
    for balancer in &balancers {
        let mut rng = StdRng::seed_from_u64(SEED);
        let mut seen_mixed = [0usize; 5];
        let mut seen_zeros = [0usize; 3];
        for key in 0..300 {
            let invocation = Invocation::new("sayHello").argument(format!("key-{key}"));
            seen_mixed[pick_one(balancer.as_ref(), &mixed, &invocation, &mut rng, now)] += 1;
            seen_zeros[pick_one(balancer.as_ref(), &zeros, &invocation, &mut rng, now)] += 1;
        }
        let name = balancer.name();
        assert_eq!(
            (seen_mixed[0], seen_mixed[2], seen_mixed[3]),
            (0, 0, 0),
            "{name} picked a weight-0 target: {seen_mixed:?}"
        );
        assert!(
            seen_zeros.iter().all(|&n| n > 0),
            "{name} did not spread over all-zero weights: {seen_zeros:?}"
        );
    }
}

#[test]
fn every_balancer_picks_the_only_target_of_a_list_of_one() {
    let balancers: Vec<Box<dyn LoadBalance>> = vec![
        Box::new(WeightedRandom::new()),
        Box::new(RoundRobin::new()),
        Box::new(LeastActive::new()),
        Box::new(ShortestResponse::new()),
        Box::new(ConsistentHash::new().virtual_nodes(0)),
        Box::new(PeakEwmaP2c),
        Box::new(ZoneFirstLeastActive::new()),
    ];
    let targets = [target("a", f64::INFINITY)];
    let mut rng = StdRng::seed_from_u64(SEED);
    for balancer in &balancers {
        for key in 0..20 {
            let invocation = Invocation::new("sayHello").argument(key.to_string());
            let picked = pick_one(
                balancer.as_ref(),
                &targets,
                &invocation,
                &mut rng,
                Instant::now(),
            );
            assert_eq!(picked, 0, "{}", balancer.name());
        }
    }
}

fn hash_targets(n: usize) -> Vec<Target> {
    (0..n)
        .map(|i| target(&format!("10.0.0.{i}"), 1.0))
        .collect()
}

/// The address each of `keys` goes to.
fn placements(ch: &ConsistentHash, targets: &[Target], keys: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(SEED);
    (0..keys)
        .map(|key| {
            let invocation = Invocation::new("sayHello").argument(format!("user-{key}"));
            let picked = pick_one(ch, targets, &invocation, &mut rng, Instant::now());
            targets[picked].address()
        })
        .collect()
}

#[test]
fn consistent_hash_adding_an_eleventh_instance_moves_under_two_elevenths_of_keys_and_only_to_it() {
    let ch = ConsistentHash::new();
    let ten = hash_targets(10);
    let eleven = hash_targets(11);
    let before = placements(&ch, &ten, 10_000);
    let after = placements(&ch, &eleven, 10_000);
    let moved: Vec<&String> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(_, a)| a)
        .collect();
    assert!(!moved.is_empty(), "no key moved to the new instance");
    assert!(
        moved.len() < 10_000 * 2 / 11,
        "{} of 10000 keys moved",
        moved.len()
    );
    assert!(
        moved.iter().all(|a| *a == "10.0.0.10:8080"),
        "a key moved between old instances"
    );
}

#[test]
fn consistent_hash_moves_no_key_when_an_instance_changes_anything_but_its_address() {
    let ch = ConsistentHash::new();
    let targets = hash_targets(10);
    let before = placements(&ch, &targets, 10_000);
    let mut changed = targets.clone();
    changed[3] = Target::new(Instance {
        weight: 5.0,
        metadata: BTreeMap::from([("version".to_owned(), "2".to_owned())]),
        instance_id: "renamed".to_owned(),
        ..(*targets[3].instance).clone()
    });
    assert_eq!(placements(&ch, &changed, 10_000), before);
    // A balancer that never saw the old list agrees.
    assert_eq!(placements(&ConsistentHash::new(), &changed, 10_000), before);
}

#[test]
fn consistent_hash_sends_the_same_key_to_the_same_instance_whatever_the_list_order() {
    let targets = hash_targets(10);
    let mut reversed = targets.clone();
    reversed.reverse();
    let first = placements(&ConsistentHash::new(), &targets, 1_000);
    let ch = ConsistentHash::new();
    assert_eq!(placements(&ch, &targets, 1_000), first);
    assert_eq!(placements(&ch, &targets, 1_000), first);
    assert_eq!(placements(&ch, &reversed, 1_000), first);
    // And it does spread keys: every instance owns some.
    for t in &targets {
        assert!(first.contains(&t.address()), "{} owns no key", t.address());
    }
}

#[test]
fn consistent_hash_hashes_only_the_configured_arguments() {
    let targets = hash_targets(10);
    let mut rng = StdRng::seed_from_u64(SEED);
    let now = Instant::now();
    let call =
        |first: &str, second: &str| Invocation::new("sayHello").argument(first).argument(second);

    // By default the first argument alone decides.
    let ch = ConsistentHash::new();
    let fixed = pick_one(&ch, &targets, &call("alice", "x0"), &mut rng, now);
    for i in 1..50 {
        let other = call("alice", &format!("x{i}"));
        assert_eq!(pick_one(&ch, &targets, &other, &mut rng, now), fixed);
    }

    // Configured on the second, the first no longer matters and the second
    // does.
    let ch = ConsistentHash::new().arguments([1]);
    let fixed = pick_one(&ch, &targets, &call("u0", "tenant"), &mut rng, now);
    for i in 1..50 {
        let other = call(&format!("u{i}"), "tenant");
        assert_eq!(pick_one(&ch, &targets, &other, &mut rng, now), fixed);
    }
    let spread: std::collections::BTreeSet<usize> = (0..50)
        .map(|i| pick_one(&ch, &targets, &call("u0", &format!("t{i}")), &mut rng, now))
        .collect();
    assert!(spread.len() > 1, "the second argument was not hashed");

    // Both, concatenated as Dubbo does: ("ab", "c") and ("a", "bc") are one key.
    let ch = ConsistentHash::new().arguments([0, 1]);
    let joined = pick_one(&ch, &targets, &call("ab", "c"), &mut rng, now);
    assert_eq!(
        pick_one(&ch, &targets, &call("a", "bc"), &mut rng, now),
        joined
    );
    assert_eq!(ch.key(&call("ab", "c")), "abc");
    // An index past the end is skipped.
    assert_eq!(
        ConsistentHash::new().arguments([1, 5]).key(&call("a", "b")),
        "b"
    );
}

#[test]
fn consistent_hash_points_are_dubbos_little_endian_md5_slices() {
    // md5("") = d41d8cd9 8f00b204 e9800998 ecf8427e
    let digest = md5("");
    assert_eq!(point(&digest, 0), 0xd98c_1dd4);
    assert_eq!(point(&digest, 1), 0x04b2_008f);
    assert_eq!(point(&digest, 3), 0x7e42_f8ec);
    // 160 virtual nodes: 40 digests of 4 points per address.
    let ring = Ring::build(&[("10.0.0.1", 20880)], 160);
    assert_eq!(ring.points.len(), 160);
    let first = md5("10.0.0.1:208800");
    assert!(ring.points.contains_key(&point(&first, 2)));
}

#[test]
fn consistent_hash_rebuilds_its_ring_only_when_the_addresses_change() {
    let ch = ConsistentHash::new();
    let targets = hash_targets(5);
    let ring = |ch: &ConsistentHash| Arc::clone(&lock(&ch.rings)["sayHello"]);
    placements(&ch, &targets, 1);
    let built = ring(&ch);
    placements(&ch, &targets, 1);
    assert!(Arc::ptr_eq(&built, &ring(&ch)));

    let mut reweighted = targets.clone();
    reweighted[0] = target("10.0.0.0", 9.0);
    placements(&ch, &reweighted, 1);
    assert!(Arc::ptr_eq(&built, &ring(&ch)));

    placements(&ch, &hash_targets(6), 1);
    assert!(!Arc::ptr_eq(&built, &ring(&ch)));
    assert_eq!(ring(&ch).nodes.len(), 6);
}

#[test]
fn least_active_prefers_an_idle_instance_over_busy_ones() {
    let targets = [target("a", 10.0), target("b", 10.0), target("c", 1.0)];
    let _a = [targets[0].stats.begin(), targets[0].stats.begin()];
    let _b = targets[1].stats.begin();
    let counts = tally(&LeastActive::new(), &targets, 1_000, Instant::now());
    assert_eq!(counts, [0, 0, 1_000]);
}

#[test]
fn least_active_breaks_ties_among_idle_instances_by_weight() {
    let targets = [target("a", 1.0), target("b", 1.0), target("c", 3.0)];
    let _a = targets[0].stats.begin();
    let counts = tally(&LeastActive::new(), &targets, 12_000, Instant::now());
    assert_eq!(counts[0], 0);
    let statistic = chi_square(&counts[1..], &[0.25, 0.75]);
    assert!(
        statistic < CHI2_DF1,
        "chi-square {statistic:.2} for {counts:?}"
    );
    let uniform = chi_square(&counts[1..], &[0.5, 0.5]);
    assert!(uniform > 1000.0, "{counts:?} ignores weights");
}

#[test]
fn warm_up_ramps_effective_weight_linearly_from_one_percent_to_full() {
    let start = Instant::now();
    let stats = InstanceStats::new(Some(start));
    let warmup = DEFAULT_WARMUP;
    let at = |secs: u64| stats.effective_weight(2.0, warmup, start + Duration::from_secs(secs));
    let close = |got: f64, want: f64| assert!((got - want).abs() < 1e-9, "{got} != {want}");
    close(at(0), 0.02);
    close(at(3), 0.02);
    close(at(60), 0.2);
    close(at(300), 1.0);
    close(at(540), 1.8);
    close(at(600), 2.0);
    close(at(6_000), 2.0);
    // A warm-up of zero, or an instance there from the start, is full at once.
    close(stats.effective_weight(2.0, Duration::ZERO, start), 2.0);
    close(
        InstanceStats::new(None).effective_weight(2.0, warmup, start),
        2.0,
    );
}

#[test]
fn weighted_random_picks_a_warming_instance_in_proportion_to_its_ramp() {
    let start = Instant::now();
    let targets = [target("warm", 1.0), appeared("new", 1.0, start)];
    let random = WeightedRandom::new();

    // A quarter of the way through: weights 1 and 0.25.
    let counts = tally(&random, &targets, 10_000, start + DEFAULT_WARMUP / 4);
    let statistic = chi_square(&counts, &[0.8, 0.2]);
    assert!(
        statistic < CHI2_DF1,
        "chi-square {statistic:.2} for {counts:?}"
    );

    // Once warm, an equal share.
    let counts = tally(&random, &targets, 10_000, start + DEFAULT_WARMUP);
    let statistic = chi_square(&counts, &[0.5, 0.5]);
    assert!(
        statistic < CHI2_DF1,
        "chi-square {statistic:.2} for {counts:?}"
    );

    // Without warm-up, an equal share at once.
    let counts = tally(&random.warmup(Duration::ZERO), &targets, 10_000, start);
    let statistic = chi_square(&counts, &[0.5, 0.5]);
    assert!(
        statistic < CHI2_DF1,
        "chi-square {statistic:.2} for {counts:?}"
    );
}

#[test]
fn shortest_response_prefers_the_faster_instance() {
    let now = Instant::now();
    let targets = [target("slow", 1.0), target("fast", 1.0)];
    targets[0]
        .stats
        .record(now, Duration::from_millis(100), Sample::Answered);
    targets[1]
        .stats
        .record(now, Duration::from_millis(10), Sample::Answered);
    assert_eq!(
        tally(&ShortestResponse::new(), &targets, 500, now),
        [0, 500]
    );

    // Ten calls in flight on the fast one: 10 ms x 11 is slower than 100 ms.
    let _busy: Vec<_> = (0..10).map(|_| targets[1].stats.begin()).collect();
    assert_eq!(
        tally(&ShortestResponse::new(), &targets, 500, now),
        [500, 0]
    );
}

#[test]
fn shortest_response_tries_an_instance_never_called() {
    let now = Instant::now();
    let targets = [target("known", 1.0), target("new", 1.0)];
    targets[0]
        .stats
        .record(now, Duration::from_millis(1), Sample::Answered);
    assert_eq!(
        tally(&ShortestResponse::new(), &targets, 100, now),
        [0, 100]
    );
}

#[test]
fn shortest_response_forgets_a_slow_spell_after_its_window() {
    // Dubbo keeps 30 s of response statistics: an instance that was slow
    // once and then left alone is tried again once they have slid out.
    let now = Instant::now();
    let targets = [target("once-slow", 1.0), target("steady", 1.0)];
    targets[0]
        .stats
        .record(now, Duration::from_secs(2), Sample::Answered);
    targets[1]
        .stats
        .record(now, Duration::from_millis(10), Sample::Answered);
    assert_eq!(
        tally(&ShortestResponse::new(), &targets, 100, now),
        [0, 100]
    );
    // The steady one keeps being called; the slow spell is 31 s old.
    let later = now + Duration::from_secs(31);
    targets[1]
        .stats
        .record(later, Duration::from_millis(10), Sample::Answered);
    let after = tally(&ShortestResponse::new(), &targets, 100, later);
    assert_eq!(after, [100, 0], "counts as instant again: {after:?}");
}

#[test]
fn peak_ewma_p2c_prefers_the_lower_latency_instance_most_of_the_time() {
    let now = Instant::now();
    let slow = Duration::from_millis(500);
    let targets = [
        target("slow1", 1.0),
        target("slow2", 1.0),
        target("fast", 1.0),
    ];
    targets[0].stats.record(now, slow, Sample::Answered);
    targets[1].stats.record(now, slow, Sample::Answered);
    targets[2]
        .stats
        .record(now, Duration::from_millis(1), Sample::Answered);

    // With two of three drawn, the fast one is in the pair 2/3 of the time
    // and then always wins.
    let counts = tally(&PeakEwmaP2c, &targets, 12_000, now);
    let statistic = chi_square(&counts, &[1.0 / 6.0, 1.0 / 6.0, 2.0 / 3.0]);
    assert!(
        statistic < CHI2_DF2,
        "chi-square {statistic:.2} for {counts:?}"
    );

    // Between just two, the fast one always wins.
    assert_eq!(tally(&PeakEwmaP2c, &targets[1..], 1_000, now), [0, 1_000]);
}

#[test]
fn peak_ewma_p2c_counts_calls_in_flight_against_a_fast_instance() {
    let now = Instant::now();
    let targets = [target("slower", 1.0), target("faster", 1.0)];
    targets[0]
        .stats
        .record(now, Duration::from_millis(30), Sample::Answered);
    targets[1]
        .stats
        .record(now, Duration::from_millis(10), Sample::Answered);
    assert_eq!(tally(&PeakEwmaP2c, &targets, 100, now), [0, 100]);
    // 10 ms x 4 in flight costs more than 30 ms x 1.
    let _busy: Vec<_> = (0..3).map(|_| targets[1].stats.begin()).collect();
    assert_eq!(tally(&PeakEwmaP2c, &targets, 100, now), [100, 0]);
}

#[test]
fn peak_ewma_p2c_never_panics_with_one_or_two_targets() {
    let now = Instant::now();
    assert_eq!(tally(&PeakEwmaP2c, &[target("only", 1.0)], 100, now), [100]);
    // Equal costs: the first drawn wins, so each side gets about half.
    let counts = tally(
        &PeakEwmaP2c,
        &[target("a", 1.0), target("b", 1.0)],
        10_000,
        now,
    );
    let statistic = chi_square(&counts, &[0.5, 0.5]);
    assert!(
        statistic < CHI2_DF1,
        "chi-square {statistic:.2} for {counts:?}"
    );
}

fn zone_tally(targets: &[Target], local_zone: Option<&str>, picks: usize) -> Vec<usize> {
    let balancer = ZoneFirstLeastActive::new();
    let mut rng = StdRng::seed_from_u64(SEED);
    let invocation = Invocation::new("sayHello");
    let mut counts = vec![0; targets.len()];
    for _ in 0..picks {
        let mut cx = PickContext {
            now: Instant::now(),
            rng: &mut rng,
            local_zone,
        };
        counts[balancer.pick(targets, &invocation, &mut cx)] += 1;
    }
    counts
}

#[test]
fn zone_first_picks_only_local_zone_instances_when_there_are_some() {
    let targets = [zoned("a", "hz"), zoned("b", "sh"), zoned("c", "hz")];
    let counts = zone_tally(&targets, Some("hz"), 1_000);
    assert_eq!(counts[1], 0, "{counts:?}");
    assert!(counts[0] > 400 && counts[2] > 400, "{counts:?}");

    // Within the zone it is least active, even with an idle remote one.
    let _busy = targets[0].stats.begin();
    assert_eq!(zone_tally(&targets, Some("hz"), 1_000), [0, 0, 1_000]);
}

#[test]
fn zone_first_picks_among_all_instances_when_none_is_local_or_the_zone_is_unknown() {
    let targets = [zoned("a", "hz"), zoned("b", "sh"), zoned("c", "hz")];
    for local_zone in [Some("bj"), None, Some("")] {
        let counts = zone_tally(&targets, local_zone, 3_000);
        assert!(
            counts.iter().all(|&n| n > 800),
            "{local_zone:?}: {counts:?}"
        );
    }
}
