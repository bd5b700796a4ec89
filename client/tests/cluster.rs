//! The cluster layer against scripted providers: routers, strategies,
//! limits, breakers and mocks on tokio's paused clock with a seeded RNG.
//! Each provider is a closure whose behaviour per address is scripted, so
//! every test knows exactly which instance should be called and when.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use understudy_client::cluster::breaker::BreakerRules;
use understudy_client::cluster::limit::RetryBudget;
use understudy_client::cluster::route::{
    ConditionRouter, Level, TagRouter, VersionGroupRouter, ZoneMode, ZoneRouter,
};
use understudy_client::cluster::{
    CallFailure, Cluster, ClusterBuilder, ClusterError, Invocation, LimitKind, Mock, Outcome,
    Phase, Strategy,
};
use understudy_client::Instance;

fn instance(ip: &str, zone: &str) -> Instance {
    Instance {
        instance_id: format!("{ip}#80"),
        ip: ip.into(),
        port: 80,
        weight: 1.0,
        healthy: true,
        enabled: true,
        cluster: "DEFAULT".into(),
        zone: zone.into(),
        metadata: BTreeMap::new(),
    }
}

fn with_meta(mut i: Instance, key: &str, value: &str) -> Instance {
    i.metadata.insert(key.into(), value.into());
    i
}

/// What a scripted provider does when called.
#[derive(Debug, Clone)]
enum Behaviour {
    Answer,
    AnswerAfter(Duration),
    Refuse,
    Reset,
    Fail,
    Hang,
}

/// Scripted providers: behaviour per ip, and a log of the ips called.
#[derive(Debug, Clone, Default)]
struct Script {
    behaviour: Arc<Mutex<HashMap<String, Behaviour>>>,
    calls: Arc<Mutex<Vec<String>>>,
}

impl Script {
    fn set(&self, ip: &str, b: Behaviour) {
        self.behaviour.lock().unwrap().insert(ip.into(), b);
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn call(
        &self,
    ) -> impl Fn(Arc<Instance>) -> futures_fut::Boxed<Result<String, CallFailure>>
           + Clone
           + Send
           + Sync
           + 'static {
        let script = self.clone();
        move |i: Arc<Instance>| {
            let script = script.clone();
            Box::pin(async move {
                script.calls.lock().unwrap().push(i.ip.clone());
                let b = script
                    .behaviour
                    .lock()
                    .unwrap()
                    .get(&i.ip)
                    .cloned()
                    .unwrap_or(Behaviour::Answer);
                match b {
                    Behaviour::Answer => Ok(i.ip.clone()),
                    Behaviour::AnswerAfter(d) => {
                        tokio::time::sleep(d).await;
                        Ok(i.ip.clone())
                    }
                    Behaviour::Refuse => Err(CallFailure::NotSent {
                        message: "connection refused".into(),
                    }),
                    Behaviour::Reset => Err(CallFailure::Transport {
                        message: "connection reset after the request was written".into(),
                    }),
                    Behaviour::Fail => Err(CallFailure::Application {
                        message: "no such user".into(),
                    }),
                    Behaviour::Hang => std::future::pending().await,
                }
            })
        }
    }
}

mod futures_fut {
    pub(crate) type Boxed<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;
}

fn cluster(
    builder: ClusterBuilder,
    list: Vec<Instance>,
) -> (Cluster, watch::Sender<Arc<[Instance]>>) {
    let (tx, rx) = watch::channel(Arc::from(list));
    (builder.seed(7).build_on("svc", rx).unwrap(), tx)
}

fn zones() -> Vec<Instance> {
    vec![
        instance("10.0.0.1", "hz"),
        instance("10.0.0.2", "hz"),
        instance("10.1.0.1", "sh"),
        instance("10.1.0.2", "sh"),
    ]
}

fn answered_by(outcome: &Outcome<String>) -> &str {
    match outcome {
        Outcome::Answered { value, .. } => value,
        other => panic!("expected an answer, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn prefer_local_keeps_calls_in_the_zone_and_falls_back_when_it_is_empty() {
    let script = Script::default();
    let (c, tx) = cluster(
        Cluster::builder()
            .local_zone("hz")
            .router(ZoneRouter::prefer_local()),
        zones(),
    );
    for _ in 0..50 {
        let out = c
            .invoke(Invocation::new("get"), script.call())
            .await
            .unwrap();
        assert!(answered_by(&out).starts_with("10.0."), "{out:?}");
    }
    // The call's own zone attachment wins over the cluster's.
    let out = c
        .invoke(Invocation::new("get").attach("zone", "sh"), script.call())
        .await
        .unwrap();
    assert!(answered_by(&out).starts_with("10.1."));
    // The hz zone goes away: calls go to sh, and the decision says why.
    tx.send(Arc::from(vec![instance("10.1.0.1", "sh")]))
        .unwrap();
    let out = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap();
    assert_eq!(answered_by(&out), "10.1.0.1");
    let decisions = c.metrics().decisions;
    assert_eq!(decisions[&("zone".into(), "hz".into(), "local".into())], 50);
    assert_eq!(decisions[&("zone".into(), "sh".into(), "local".into())], 1);
    assert_eq!(
        decisions[&("zone".into(), "*".into(), "local-zone-empty".into())],
        1
    );
}

#[tokio::test(start_paused = true)]
async fn strict_zone_fails_with_a_reason_naming_the_zone() {
    let script = Script::default();
    let (c, _tx) = cluster(
        Cluster::builder()
            .local_zone("gz")
            .router(ZoneRouter::new(ZoneMode::Strict).unwrap()),
        zones(),
    );
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    match &err {
        ClusterError::NoProvider { reason, .. } => {
            assert!(reason.contains("zone router"), "{reason}");
            assert!(reason.contains("strict"), "{reason}");
            assert!(reason.contains("gz"), "{reason}");
            assert!(reason.contains("4 available in other zones"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(script.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn threshold_zone_falls_back_below_the_level_and_recovers_only_above_the_higher_one() {
    let router = ZoneRouter::new(ZoneMode::Threshold {
        fall_below: Level {
            count: 2,
            share: 0.0,
        },
        recover_at: Level {
            count: 3,
            share: 0.0,
        },
    })
    .unwrap();
    let script = Script::default();
    let hz = |n: usize| -> Vec<Instance> {
        let mut list: Vec<Instance> = (1..=n)
            .map(|k| instance(&format!("10.0.0.{k}"), "hz"))
            .collect();
        list.push(instance("10.1.0.1", "sh"));
        list
    };
    let (c, tx) = cluster(Cluster::builder().local_zone("hz").router(router), hz(3));
    let zone_of_calls = |c: &Cluster, script: &Script| {
        let (c, script) = (c.clone(), script.clone());
        async move {
            let mut sh = 0;
            for _ in 0..40 {
                let out = c
                    .invoke(Invocation::new("get"), script.call())
                    .await
                    .unwrap();
                if answered_by(&out).starts_with("10.1.") {
                    sh += 1;
                }
            }
            sh
        }
    };
    assert_eq!(zone_of_calls(&c, &script).await, 0, "3 local: stays local");
    tx.send(Arc::from(hz(2))).unwrap();
    assert_eq!(zone_of_calls(&c, &script).await, 0, "2 local: at the level");
    tx.send(Arc::from(hz(1))).unwrap();
    assert!(zone_of_calls(&c, &script).await > 0, "1 local: falls back");
    // Back to 2: above the fall level but below recovery, so no flap.
    tx.send(Arc::from(hz(2))).unwrap();
    assert!(
        zone_of_calls(&c, &script).await > 0,
        "2 local: still recovering"
    );
    tx.send(Arc::from(hz(3))).unwrap();
    assert_eq!(zone_of_calls(&c, &script).await, 0, "3 local: recovered");
    let d = c.metrics().decisions;
    assert_eq!(d[&("zone".into(), "*".into(), "recovering".into())], 40);
    assert_eq!(
        d[&("zone".into(), "*".into(), "below-threshold".into())],
        40
    );
}

#[test]
fn a_threshold_whose_recovery_is_below_its_fall_level_is_refused() {
    let err = ZoneRouter::new(ZoneMode::Threshold {
        fall_below: Level {
            count: 3,
            share: 0.5,
        },
        recover_at: Level {
            count: 2,
            share: 0.5,
        },
    })
    .unwrap_err();
    assert!(err.to_string().contains("hysteresis"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn tag_router_prefers_tagged_instances_and_falls_back_unless_forced() {
    let script = Script::default();
    let list = vec![
        with_meta(instance("10.0.0.1", "hz"), "tag", "gray"),
        instance("10.0.0.2", "hz"),
    ];
    let (c, _tx) = cluster(Cluster::builder().router(TagRouter::new()), list.clone());
    for _ in 0..10 {
        let tagged = c
            .invoke(Invocation::new("get").attach("tag", "gray"), script.call())
            .await
            .unwrap();
        assert_eq!(answered_by(&tagged), "10.0.0.1");
        let plain = c
            .invoke(Invocation::new("get"), script.call())
            .await
            .unwrap();
        assert_eq!(answered_by(&plain), "10.0.0.2");
        let missing = c
            .invoke(Invocation::new("get").attach("tag", "blue"), script.call())
            .await
            .unwrap();
        assert_eq!(answered_by(&missing), "10.0.0.2");
    }
    let (forced, _tx) = cluster(Cluster::builder().router(TagRouter::forced()), list);
    let err = forced
        .invoke(Invocation::new("get").attach("tag", "blue"), script.call())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("tagged \"blue\" (force)"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn condition_rules_filter_matching_calls_and_forced_rules_fail_when_nothing_is_left() {
    let script = Script::default();
    let router = ConditionRouter::parse("method = write* => host = 10.0.0.*").unwrap();
    let (c, _tx) = cluster(Cluster::builder().router(router), zones());
    for _ in 0..20 {
        let w = c
            .invoke(Invocation::new("writeUser"), script.call())
            .await
            .unwrap();
        assert!(answered_by(&w).starts_with("10.0.0."));
    }
    let mut reads = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let r = c
            .invoke(Invocation::new("readUser"), script.call())
            .await
            .unwrap();
        reads.insert(answered_by(&r).to_owned());
    }
    assert_eq!(reads.len(), 4, "a rule that does not match leaves all");

    let banned = ConditionRouter::parse("method = drop =>").unwrap();
    let (c, _tx) = cluster(Cluster::builder().router(banned), zones());
    let err = c
        .invoke(Invocation::new("drop"), script.call())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("bans every instance"), "{err}");

    let unmatched = ConditionRouter::parse("=> zone = gz").unwrap();
    let (lenient, _tx) = cluster(Cluster::builder().router(unmatched.clone()), zones());
    assert!(lenient
        .invoke(Invocation::new("get"), script.call())
        .await
        .is_ok());
    let (forced, _tx) = cluster(Cluster::builder().router(unmatched.forced()), zones());
    let err = forced
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("leaves no instance (force)"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn version_and_group_match_with_wildcards() {
    let script = Script::default();
    let list = vec![
        with_meta(instance("10.0.0.1", "hz"), "version", "1.0"),
        with_meta(instance("10.0.0.2", "hz"), "version", "2.1"),
        instance("10.0.0.3", "hz"),
    ];
    let (c, _tx) = cluster(
        Cluster::builder().router(VersionGroupRouter::new(Some("2.*"), None)),
        list,
    );
    for _ in 0..10 {
        let out = c
            .invoke(Invocation::new("get"), script.call())
            .await
            .unwrap();
        assert_eq!(answered_by(&out), "10.0.0.2");
        let v1 = c
            .invoke(
                Invocation::new("get").attach("version", "1.0"),
                script.call(),
            )
            .await
            .unwrap();
        assert_eq!(answered_by(&v1), "10.0.0.1");
    }
    let mut any = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let out = c
            .invoke(Invocation::new("get").attach("version", "*"), script.call())
            .await
            .unwrap();
        any.insert(answered_by(&out).to_owned());
    }
    assert_eq!(any.len(), 3);
    let err = c
        .invoke(
            Invocation::new("get").attach("version", "3.0"),
            script.call(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("version/group listed: /, 1.0/, 2.1/"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn failover_retries_twice_each_time_on_another_instance() {
    let script = Script::default();
    for ip in ["10.0.0.1", "10.0.0.2"] {
        script.set(ip, Behaviour::Refuse);
    }
    let (c, _tx) = cluster(Cluster::builder(), zones()[..3].to_vec());
    let out = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap();
    let calls = script.calls();
    // Two of three refuse: with each retry on another instance, the
    // third attempt at the latest reaches the one that answers.
    assert_eq!(answered_by(&out), "10.1.0.1");
    let mut distinct = calls.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        calls.len(),
        "each attempt on another instance: {calls:?}"
    );
    assert!(calls.len() <= 3);
    // With all refusing, three attempts are made and the last failure is
    // returned.
    script.set("10.1.0.1", Behaviour::Refuse);
    script.calls.lock().unwrap().clear();
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert_eq!(script.calls().len(), 3);
    assert!(err.never_reached_provider(), "{err}");
    assert_eq!(c.metrics().retries, calls.len() as u64 - 1 + 2);
}

#[tokio::test(start_paused = true)]
async fn failover_never_retries_an_application_error_or_a_non_idempotent_call_that_may_have_arrived(
) {
    let script = Script::default();
    let (c, _tx) = cluster(Cluster::builder(), zones());
    for ip in ["10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.2"] {
        script.set(ip, Behaviour::Fail);
    }
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert!(err.is_application());
    assert_eq!(script.calls().len(), 1);

    for ip in ["10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.2"] {
        script.set(ip, Behaviour::Reset);
    }
    script.calls.lock().unwrap().clear();
    let err = c
        .invoke(Invocation::new("pay").not_idempotent(), script.call())
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ClusterError::Failed {
            failure: CallFailure::Transport { .. },
            ..
        }
    ));
    assert_eq!(
        script.calls().len(),
        1,
        "a reset after writing may have arrived"
    );

    for ip in ["10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.2"] {
        script.set(ip, Behaviour::Refuse);
    }
    script.calls.lock().unwrap().clear();
    let _ = c
        .invoke(Invocation::new("pay").not_idempotent(), script.call())
        .await;
    assert_eq!(
        script.calls().len(),
        3,
        "a refused connection never arrived"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_times_out_with_its_phase_and_the_call_moves_on() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Hang);
    let (c, _tx) = cluster(
        Cluster::builder()
            .strategy(Strategy::Failfast)
            .timeout(Duration::from_millis(300)),
        vec![instance("10.0.0.1", "hz")],
    );
    let start = tokio::time::Instant::now();
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    assert_eq!(
        err,
        ClusterError::Timeout {
            method: "get".into(),
            instance: "10.0.0.1:80".into(),
            phase: Phase::Attempt,
            after: Duration::from_millis(300)
        }
    );
}

fn zone_aware() -> ClusterBuilder {
    Cluster::builder()
        .local_zone("hz")
        .strategy(Strategy::zone_aware(
            Duration::from_millis(200),
            Duration::from_millis(500),
        ))
}

#[tokio::test(start_paused = true)]
async fn zone_aware_goes_across_once_after_a_local_timeout_with_its_own_timeout() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Hang);
    script.set("10.0.0.2", Behaviour::Hang);
    script.set(
        "10.1.0.1",
        Behaviour::AnswerAfter(Duration::from_millis(400)),
    );
    script.set(
        "10.1.0.2",
        Behaviour::AnswerAfter(Duration::from_millis(400)),
    );
    let (c, _tx) = cluster(zone_aware(), zones());
    let start = tokio::time::Instant::now();
    let out = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap();
    // 200 ms locally, then 400 ms across, within the 500 ms cross timeout.
    assert_eq!(start.elapsed(), Duration::from_millis(600));
    assert!(answered_by(&out).starts_with("10.1."));
    let calls = script.calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].starts_with("10.0."));
    assert_eq!(c.metrics().cross_zone, 1);

    // Across also too slow: the cross-zone timeout is reported.
    script.set("10.1.0.1", Behaviour::Hang);
    script.set("10.1.0.2", Behaviour::Hang);
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClusterError::Timeout { phase: Phase::CrossZone, after, .. } if after == Duration::from_millis(500)),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn zone_aware_goes_across_after_a_refused_connection_but_never_after_an_application_error() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Refuse);
    script.set("10.0.0.2", Behaviour::Refuse);
    let (c, _tx) = cluster(zone_aware(), zones());
    let out = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap();
    assert!(answered_by(&out).starts_with("10.1."));

    script.set("10.0.0.1", Behaviour::Fail);
    script.set("10.0.0.2", Behaviour::Fail);
    script.calls.lock().unwrap().clear();
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert!(err.is_application(), "{err}");
    assert_eq!(script.calls().len(), 1);
    assert!(script.calls()[0].starts_with("10.0."));
    assert_eq!(c.metrics().cross_zone, 1);
}

#[tokio::test(start_paused = true)]
async fn zone_aware_retries_a_non_idempotent_call_only_when_it_never_reached_a_provider() {
    let script = Script::default();
    let (c, _tx) = cluster(zone_aware(), zones());
    // Timed out: it may have arrived, so no cross-zone attempt.
    script.set("10.0.0.1", Behaviour::Hang);
    script.set("10.0.0.2", Behaviour::Hang);
    let err = c
        .invoke(Invocation::new("pay").not_idempotent(), script.call())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClusterError::Timeout {
                phase: Phase::Local,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(script.calls().len(), 1);
    // Reset after writing: same.
    script.set("10.0.0.1", Behaviour::Reset);
    script.set("10.0.0.2", Behaviour::Reset);
    script.calls.lock().unwrap().clear();
    let err = c
        .invoke(Invocation::new("pay").not_idempotent(), script.call())
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ClusterError::Failed {
            failure: CallFailure::Transport { .. },
            ..
        }
    ));
    assert_eq!(script.calls().len(), 1);
    // Refused: it never arrived, so it goes across.
    script.set("10.0.0.1", Behaviour::Refuse);
    script.set("10.0.0.2", Behaviour::Refuse);
    script.calls.lock().unwrap().clear();
    let out = c
        .invoke(Invocation::new("pay").not_idempotent(), script.call())
        .await
        .unwrap();
    assert!(answered_by(&out).starts_with("10.1."));
    assert_eq!(script.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn zone_aware_with_a_strict_zone_router_never_goes_across() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Refuse);
    script.set("10.0.0.2", Behaviour::Refuse);
    let (c, _tx) = cluster(
        zone_aware().router(ZoneRouter::new(ZoneMode::Strict).unwrap()),
        zones(),
    );
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert!(err.never_reached_provider());
    assert!(script.calls().iter().all(|ip| ip.starts_with("10.0.")));
    assert_eq!(c.metrics().cross_zone, 0);
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_caps_retries_under_a_failure_storm() {
    let script = Script::default();
    for ip in ["10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.2"] {
        script.set(ip, Behaviour::Refuse);
    }
    let (c, _tx) = cluster(
        Cluster::builder().retry_budget(RetryBudget::new(Duration::from_secs(10), 1, 0.2)),
        zones(),
    );
    let mut exhausted = 0;
    for _ in 0..1000 {
        match c.invoke(Invocation::new("get"), script.call()).await {
            Err(ClusterError::BudgetExhausted { last, .. }) => {
                assert!(last.never_reached_provider());
                exhausted += 1;
            }
            Err(_) => {}
            Ok(out) => panic!("{out:?}"),
        }
    }
    let m = c.metrics();
    // Without a budget this storm would make 2000 retries; the budget
    // allows 20% of calls plus a floor of 1 per second over 10 s.
    assert!(m.retries <= 200 + 10 + 2, "{m:?}");
    assert!(m.retries >= 190, "{m:?}");
    assert!(exhausted >= 790, "{exhausted}");
    assert_eq!(m.attempts, 1000 + m.retries);
}

#[tokio::test(start_paused = true)]
async fn failsafe_swallows_and_failback_retries_in_the_background() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Refuse);
    let one = vec![instance("10.0.0.1", "hz")];
    let (safe, _tx) = cluster(Cluster::builder().strategy(Strategy::Failsafe), one.clone());
    let out = safe
        .invoke(Invocation::new("log"), script.call())
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Ignored { .. }), "{out:?}");

    let (back, _tx) = cluster(
        Cluster::builder().strategy(Strategy::Failback {
            queue: 1,
            interval: Duration::from_secs(5),
            attempts: 3,
        }),
        one,
    );
    let out = back
        .invoke(Invocation::new("log"), script.call())
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Queued { .. }), "{out:?}");
    // The queue holds one: a second failure goes back to the caller.
    let err = back
        .invoke(Invocation::new("log"), script.call())
        .await
        .unwrap_err();
    assert!(err.never_reached_provider());
    script.calls.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_secs(5)).await;
    tokio::task::yield_now().await;
    script.set("10.0.0.1", Behaviour::Answer);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while back.metrics().failback_recovered == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            back.metrics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = back.metrics();
    assert_eq!(
        (
            m.failback_queued,
            m.failback_recovered,
            m.failback_abandoned
        ),
        (1, 1, 0)
    );
    assert!(!script.calls().is_empty());
    back.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn forking_takes_the_first_answer_and_broadcast_calls_everyone() {
    let script = Script::default();
    script.set(
        "10.0.0.1",
        Behaviour::AnswerAfter(Duration::from_millis(300)),
    );
    script.set(
        "10.0.0.2",
        Behaviour::AnswerAfter(Duration::from_millis(100)),
    );
    let two = vec![instance("10.0.0.1", "hz"), instance("10.0.0.2", "hz")];
    let (fork, _tx) = cluster(
        Cluster::builder().strategy(Strategy::forking()),
        two.clone(),
    );
    let start = tokio::time::Instant::now();
    let out = fork
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap();
    assert_eq!(answered_by(&out), "10.0.0.2");
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    // A non-idempotent call is never forked.
    script.calls.lock().unwrap().clear();
    fork.invoke(Invocation::new("pay").not_idempotent(), script.call())
        .await
        .unwrap();
    assert_eq!(script.calls().len(), 1);

    let (all, _tx) = cluster(Cluster::builder().strategy(Strategy::Broadcast), two);
    script.calls.lock().unwrap().clear();
    all.invoke(Invocation::new("flush"), script.call())
        .await
        .unwrap();
    let mut calls = script.calls();
    calls.sort();
    assert_eq!(calls, ["10.0.0.1", "10.0.0.2"]);
    script.set("10.0.0.1", Behaviour::Fail);
    assert!(all
        .invoke(Invocation::new("flush"), script.call())
        .await
        .is_err());
}

#[tokio::test(start_paused = true)]
async fn available_calls_the_first_instance_whose_breaker_admits() {
    let script = Script::default();
    let (c, _tx) = cluster(Cluster::builder().strategy(Strategy::Available), zones());
    for _ in 0..5 {
        let out = c
            .invoke(Invocation::new("get"), script.call())
            .await
            .unwrap();
        assert_eq!(answered_by(&out), "10.0.0.1");
    }
}

fn breaking() -> BreakerRules {
    BreakerRules {
        error_count: Some(3),
        min_requests: 3,
        ..BreakerRules::default()
    }
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_ejects_an_instance_but_never_more_than_the_cap() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Refuse);
    let two = vec![instance("10.0.0.1", "hz"), instance("10.0.0.2", "hz")];
    let (c, _tx) = cluster(
        Cluster::builder()
            .strategy(Strategy::Failfast)
            .breaker(breaking())
            .max_ejection(0.5),
        two,
    );
    let mut failures = 0;
    while failures < 3 {
        if c.invoke(Invocation::new("get"), script.call())
            .await
            .is_err()
        {
            failures += 1;
        }
    }
    script.calls.lock().unwrap().clear();
    for _ in 0..30 {
        let out = c
            .invoke(Invocation::new("get"), script.call())
            .await
            .unwrap();
        assert_eq!(answered_by(&out), "10.0.0.2");
    }
    // The second instance breaks too: the cap (half of two = one) lets
    // the longest-open one back in rather than eject everything.
    script.set("10.0.0.2", Behaviour::Refuse);
    for _ in 0..3 {
        let _ = c.invoke(Invocation::new("get"), script.call()).await;
    }
    script.calls.lock().unwrap().clear();
    for _ in 0..5 {
        let _ = c.invoke(Invocation::new("get"), script.call()).await;
    }
    assert!(
        script.calls().iter().all(|ip| ip == "10.0.0.1"),
        "{:?}",
        script.calls()
    );
}

#[tokio::test(start_paused = true)]
async fn a_single_instance_with_an_open_breaker_fails_fast_as_circuit_open() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Refuse);
    let (c, _tx) = cluster(
        Cluster::builder()
            .strategy(Strategy::Failfast)
            .breaker(breaking()),
        vec![instance("10.0.0.1", "hz")],
    );
    for _ in 0..3 {
        assert!(c
            .invoke(Invocation::new("get"), script.call())
            .await
            .is_err());
    }
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClusterError::CircuitOpen { open: 1, .. }),
        "{err:?}"
    );
    assert_eq!(script.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn limits_refuse_with_the_limit_named() {
    let script = Script::default();
    script.set("10.0.0.1", Behaviour::Hang);
    let (c, _tx) = cluster(
        Cluster::builder()
            .strategy(Strategy::Failfast)
            .timeout(Duration::from_millis(100))
            .concurrency_limit(1),
        vec![instance("10.0.0.1", "hz")],
    );
    let first = tokio::spawn({
        let (c, call) = (c.clone(), script.call());
        async move {
            c.invoke(
                Invocation::new("get").timeout(Duration::from_secs(10)),
                call,
            )
            .await
        }
    });
    tokio::task::yield_now().await;
    let err = c
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ClusterError::LimitExceeded {
            method: "get".into(),
            limit: LimitKind::Concurrency { max: 1 }
        }
    );
    first.abort();

    let (r, _tx) = cluster(
        Cluster::builder().rate_limit(2, Duration::from_secs(1)),
        vec![instance("10.0.0.1", "hz")],
    );
    script.set("10.0.0.1", Behaviour::Answer);
    assert!(r
        .invoke(Invocation::new("get"), script.call())
        .await
        .is_ok());
    assert!(r
        .invoke(Invocation::new("get"), script.call())
        .await
        .is_ok());
    let err = r
        .invoke(Invocation::new("get"), script.call())
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ClusterError::LimitExceeded {
            limit: LimitKind::Rate { permits: 2, .. },
            ..
        }
    ));
    assert!(r
        .invoke(Invocation::new("other"), script.call())
        .await
        .is_ok());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(r
        .invoke(Invocation::new("get"), script.call())
        .await
        .is_ok());
}

#[tokio::test(start_paused = true)]
async fn the_mock_answers_always_or_on_failure_but_not_for_an_application_error() {
    let script = Script::default();
    let (c, tx) = cluster(Cluster::builder(), vec![instance("10.0.0.1", "hz")]);
    let out = c
        .invoke_or_mock(Invocation::new("get"), script.call(), Mock::Always, |_| {
            "mock".to_owned()
        })
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Mocked { ref value, cause: None } if value == "mock"));
    assert!(script.calls().is_empty());

    script.set("10.0.0.1", Behaviour::Fail);
    let err = c
        .invoke_or_mock(
            Invocation::new("get"),
            script.call(),
            Mock::OnFailure,
            |_| "mock".to_owned(),
        )
        .await
        .unwrap_err();
    assert!(err.is_application());

    tx.send(Arc::from(Vec::new())).unwrap();
    let out = c
        .invoke_or_mock(
            Invocation::new("get"),
            script.call(),
            Mock::OnFailure,
            |_| "mock".to_owned(),
        )
        .await
        .unwrap();
    match out {
        Outcome::Mocked {
            value,
            cause: Some(ClusterError::NoProvider { reason, .. }),
        } => {
            assert_eq!(value, "mock");
            assert!(reason.contains("no healthy, enabled instance"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn unhealthy_and_disabled_instances_are_never_called() {
    let script = Script::default();
    let mut sick = instance("10.0.0.1", "hz");
    sick.healthy = false;
    let mut off = instance("10.0.0.2", "hz");
    off.enabled = false;
    let (c, _tx) = cluster(
        Cluster::builder(),
        vec![sick, off, instance("10.0.0.3", "hz")],
    );
    for _ in 0..20 {
        let out = c
            .invoke(Invocation::new("get"), script.call())
            .await
            .unwrap();
        assert_eq!(answered_by(&out), "10.0.0.3");
    }
}

#[test]
fn invalid_cluster_settings_are_refused_by_name() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_tx, rx) = watch::channel(Arc::from(Vec::<Instance>::new()));
        let err = Cluster::builder()
            .max_ejection(1.5)
            .build_on("svc", rx.clone())
            .unwrap_err();
        assert!(err.to_string().contains("max_ejection"), "{err}");
        let err = Cluster::builder()
            .strategy(Strategy::Forking { parallel: 0 })
            .build_on("svc", rx)
            .unwrap_err();
        assert!(err.to_string().contains("parallel"), "{err}");
    });
}

#[tokio::test(start_paused = true)]
async fn an_instance_arriving_after_the_first_list_warms_up_while_the_first_ones_are_warm() {
    let script = Script::default();
    // The directory starts empty (not ready yet); its first list is warm.
    let (c, tx) = cluster(Cluster::builder(), Vec::new());
    assert!(c
        .invoke(Invocation::new("get"), script.call())
        .await
        .is_err());
    tx.send(Arc::from(vec![
        instance("10.0.0.1", "hz"),
        instance("10.0.0.2", "hz"),
    ]))
    .unwrap();
    let count = |c: Cluster, script: Script| async move {
        let mut newcomer = 0;
        for _ in 0..400 {
            let out = c
                .invoke(Invocation::new("get"), script.call())
                .await
                .unwrap();
            if answered_by(&out) == "10.0.0.3" {
                newcomer += 1;
            }
        }
        newcomer
    };
    assert_eq!(count(c.clone(), script.clone()).await, 0);
    tx.send(Arc::from(vec![
        instance("10.0.0.1", "hz"),
        instance("10.0.0.2", "hz"),
        instance("10.0.0.3", "hz"),
    ]))
    .unwrap();
    // Just arrived: about 1% of a full weight, so about 0.5% of calls.
    let cold = count(c.clone(), script.clone()).await;
    assert!(cold <= 8, "{cold}");
    // Ten minutes later (Dubbo's default warm-up) it takes a third.
    tokio::time::advance(Duration::from_secs(600)).await;
    let warm = count(c.clone(), script.clone()).await;
    assert!((100..170).contains(&warm), "{warm}");
}
