//! The call span explains the routing decision. Alone in its own test
//! binary: tracing caches a callsite's interest process-wide, so a span
//! first seen by another test's thread without a subscriber would stay
//! disabled here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use understudy_client::cluster::route::ZoneRouter;
use understudy_client::cluster::{CallFailure, Cluster, Invocation};
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

/// A writer the fmt subscriber logs into, for reading spans back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn answer(i: Arc<Instance>) -> Result<String, CallFailure> {
    Ok(i.ip.clone())
}

#[tokio::test(start_paused = true)]
async fn the_call_span_carries_the_chosen_zone_the_reason_and_the_instance() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let (tx, rx) = watch::channel(Arc::from(vec![
        instance("10.0.0.1", "hz"),
        instance("10.1.0.1", "sh"),
    ]));
    let c = Cluster::builder()
        .local_zone("hz")
        .router(ZoneRouter::prefer_local())
        .seed(1)
        .build_on("svc", rx)
        .unwrap();
    c.invoke(Invocation::new("get"), answer).await.unwrap();
    tx.send(Arc::from(vec![instance("10.1.0.1", "sh")]))
        .unwrap();
    c.invoke(Invocation::new("get"), answer).await.unwrap();
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let spans: Vec<&str> = log.lines().filter(|l| l.contains("invoke{")).collect();
    assert_eq!(spans.len(), 2, "{log}");
    for (span, want) in spans.iter().zip([
        [
            "zone=\"hz\"",
            "reason=\"local\"",
            "instance=\"10.0.0.1:80\"",
        ],
        [
            "zone=\"*\"",
            "reason=\"local-zone-empty\"",
            "instance=\"10.1.0.1:80\"",
        ],
    ]) {
        for field in want {
            assert!(span.contains(field), "{field} missing from {span}");
        }
        assert!(span.contains("strategy=\"failover\""), "{span}");
    }
}
