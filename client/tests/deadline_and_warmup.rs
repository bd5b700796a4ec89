//! A call's deadline across its attempts, and warm-up counted from a
//! provider's own start time, on tokio's paused clock with scripted
//! providers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use understudy_client::cluster::balance::WeightedRandom;
use understudy_client::cluster::breaker::BreakerRules;
use understudy_client::cluster::{
    CallFailure, Cluster, ClusterError, Invocation, Strategy, START_TIMESTAMP,
};
use understudy_client::Instance;

fn instance(ip: &str) -> Instance {
    Instance {
        instance_id: format!("{ip}#80"),
        ip: ip.into(),
        port: 80,
        weight: 1.0,
        healthy: true,
        enabled: true,
        cluster: "DEFAULT".into(),
        zone: "hz".into(),
        metadata: BTreeMap::new(),
    }
}

fn list(instances: Vec<Instance>) -> watch::Receiver<Arc<[Instance]>> {
    watch::channel(Arc::from(instances)).1
}

/// Every call hangs until the caller gives up.
async fn hang(_: Arc<Instance>) -> Result<(), CallFailure> {
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn failover_with_a_deadline_stops_at_the_deadline_not_after_every_attempt() {
    let instances = vec![
        instance("10.0.0.1"),
        instance("10.0.0.2"),
        instance("10.0.0.3"),
    ];
    let cluster = |deadline: Option<Duration>| {
        let mut builder = Cluster::builder()
            .strategy(Strategy::Failover { retries: 2 })
            .timeout(Duration::from_secs(3))
            .breaker(BreakerRules::disabled())
            .seed(1);
        if let Some(d) = deadline {
            builder = builder.deadline(d);
        }
        builder.build_on("svc", list(instances.clone())).unwrap()
    };

    // Without a deadline: three attempts of 3 s each.
    let start = Instant::now();
    let error = cluster(None)
        .invoke(Invocation::new("get"), hang)
        .await
        .unwrap_err();
    assert!(matches!(error, ClusterError::Timeout { .. }), "{error}");
    assert_eq!(start.elapsed(), Duration::from_secs(9));

    // With a 5 s deadline: the second attempt is cut at 5 s.
    let start = Instant::now();
    let error = cluster(Some(Duration::from_secs(5)))
        .invoke(Invocation::new("get"), hang)
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(
        error,
        ClusterError::DeadlineExceeded {
            method: "get".into(),
            deadline: Duration::from_secs(5)
        }
    );
    assert!(error.is_timeout() && !error.never_reached_provider());

    // The invocation's own deadline wins over the cluster's.
    let start = Instant::now();
    let error = cluster(Some(Duration::from_secs(5)))
        .invoke(
            Invocation::new("get").deadline(Duration::from_millis(1500)),
            hang,
        )
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(1500));
    assert!(matches!(error, ClusterError::DeadlineExceeded { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_started_earlier_warms_up_from_its_start_not_from_first_sight() {
    // The wall clock, epoch ms, moved by hand.
    let wall = Arc::new(AtomicU64::new(1_000_000_000));
    let (tx, rx) = watch::channel::<Arc<[Instance]>>(Arc::from(vec![instance("10.0.0.1")]));
    let clock = wall.clone();
    let cluster = Cluster::builder()
        .balancer(WeightedRandom::new().warmup(Duration::from_secs(600)))
        .breaker(BreakerRules::disabled())
        .wall_clock(move || clock.load(Ordering::SeqCst))
        .seed(3)
        .build_on("svc", rx)
        .unwrap();
    // The first list is warm.
    let served = Arc::new(Mutex::new(BTreeMap::<String, u32>::new()));
    let count = |served: Arc<Mutex<BTreeMap<String, u32>>>| {
        move |i: Arc<Instance>| {
            let served = served.clone();
            async move {
                *served.lock().unwrap().entry(i.ip.clone()).or_default() += 1;
                Ok::<_, CallFailure>(())
            }
        }
    };
    cluster
        .invoke(Invocation::new("get"), count(served.clone()))
        .await
        .unwrap();
    // Two providers arrive later: one that started 9 minutes ago (90% of
    // the 10-minute warm-up), one that starts now.
    let now_ms = wall.load(Ordering::SeqCst);
    let mut old = instance("10.0.0.2");
    old.metadata
        .insert(START_TIMESTAMP.into(), (now_ms - 540_000).to_string());
    let mut new = instance("10.0.0.3");
    new.metadata
        .insert(START_TIMESTAMP.into(), now_ms.to_string());
    tx.send_replace(Arc::from(vec![instance("10.0.0.1"), old, new]));
    served.lock().unwrap().clear();
    for _ in 0..3000 {
        cluster
            .invoke(Invocation::new("get"), count(served.clone()))
            .await
            .unwrap();
    }
    let served = served.lock().unwrap().clone();
    // Weights 1 : 0.9 : 0.01 of 1.91.
    let share = |ip: &str| f64::from(served.get(ip).copied().unwrap_or(0)) / 3000.0;
    assert!((share("10.0.0.2") - 0.9 / 1.91).abs() < 0.05, "{served:?}");
    assert!(share("10.0.0.3") < 0.02, "{served:?}");
}
