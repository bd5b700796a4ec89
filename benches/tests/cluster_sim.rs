//! The cluster simulations, short: the seed-000 scenario must keep
//! understudy's combination in its zone with no failed idempotent call
//! while a zone dies, and must tell the combinations apart; the seed-001
//! comparison must rank latency-aware balancers ahead of blind ones on
//! unequal instances. Virtual time and a fixed seed make every figure
//! exact, so these are checks of behaviour, not of speed.

use understudy_benches::sim::{
    balancer_run, balancers, zone_run, BalancerParams, Combination, ZoneParams,
};

#[test]
fn zone_aware_combinations_stay_in_zone_and_lose_no_idempotent_call_when_a_zone_dies() {
    let p = ZoneParams::seed().scaled(0.25);
    let ours = zone_run(&p, Combination::Understudy, 1);
    assert!(ours.same_zone_healthy >= 0.99, "{ours:?}");
    assert_eq!(ours.idempotent_failed_during_outage, 0, "{ours:?}");
    assert!(
        ours.recover_after_restore_s.is_some_and(|s| s < 1.0),
        "{ours:?}"
    );
    // While hz is down its consumers are served from sh, so the overall
    // same-zone share must drop by about the outage's part of hz's calls.
    assert!(ours.same_zone_all < 0.95, "{ours:?}");

    let seed_extension = zone_run(&p, Combination::SeedExtension, 1);
    assert!(
        seed_extension.same_zone_healthy >= 0.99,
        "{seed_extension:?}"
    );
    assert_eq!(seed_extension.idempotent_failed_during_outage, 0);

    let blind = zone_run(&p, Combination::DubboDefaults, 1);
    assert!((0.4..0.6).contains(&blind.same_zone_healthy), "{blind:?}");
    assert_eq!(blind.recover_after_restore_s, None, "{blind:?}");
}

#[test]
fn latency_aware_balancers_beat_blind_ones_on_unequal_instances() {
    let mut p = BalancerParams::seed();
    p.seconds = 10.0;
    let rows: Vec<_> = balancers()
        .into_iter()
        .map(|(name, make)| balancer_run(&p, name, make.as_ref(), 1))
        .collect();
    let row = |name: &str| rows.iter().find(|r| r.balancer == name).unwrap();
    let random = row("weighted random");
    for smart in ["least active", "shortest response", "p2c peak-EWMA"] {
        let r = row(smart);
        assert!(r.mean_ms < random.mean_ms, "{r:?} vs {random:?}");
        assert!(r.p99_ms < random.p99_ms, "{r:?} vs {random:?}");
        // The slow fourth instance gets less than its even share.
        assert!(r.shares[3] < 0.15, "{r:?}");
    }
    for r in &rows {
        assert!((r.throughput - p.rate).abs() < p.rate * 0.05, "{r:?}");
    }
}
