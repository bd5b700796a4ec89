//! The cluster layer over a live directory: providers register in two
//! zones through the client, a consumer in hz calls through a zone router
//! and a zone-aware strategy, and follows the registry as hz goes away and
//! comes back. The "call" is a closure answering with the instance it was
//! given, so the test sees exactly where each call went.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use understudy_client::cluster::route::ZoneRouter;
use understudy_client::cluster::{CallFailure, Cluster, Invocation, Strategy};
use understudy_client::{Client, Instance, InstanceSpec};
use understudy_core::ServiceKey;
use understudy_server::config::Settings;
use understudy_tests::{eventually, Server};

fn client(server: &Server) -> anyhow::Result<Client> {
    Ok(Client::builder()
        .endpoint(server.grpc.to_string(), None)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200))
        .build()?)
}

fn in_zone(ip: &str, zone: &str) -> InstanceSpec {
    let mut spec = InstanceSpec::new(ip, 20880);
    spec.metadata = BTreeMap::from([("zone".to_owned(), zone.to_owned())]);
    spec
}

async fn answer(i: Arc<Instance>) -> Result<String, CallFailure> {
    Ok(format!("{}@{}", i.ip, i.zone))
}

#[tokio::test]
async fn a_consumer_stays_in_its_zone_and_follows_the_registry_when_the_zone_goes_and_returns(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let service = ServiceKey::parse("", "", "com.example.UserService")?;
    let hz = client(&server)?;
    let sh = client(&server)?;
    hz.register(service.clone(), vec![in_zone("10.0.0.1", "hz")])
        .await?;
    sh.register(service.clone(), vec![in_zone("10.1.0.1", "sh")])
        .await?;

    let consumer = client(&server)?;
    let directory = consumer.directory(service.clone());
    let cluster = Cluster::builder()
        .local_zone("hz")
        .router(ZoneRouter::prefer_local())
        .strategy(Strategy::zone_aware(
            Duration::from_millis(500),
            Duration::from_millis(1000),
        ))
        .seed(3)
        .build(&directory)?;
    assert!(
        eventually(Duration::from_secs(3), || async {
            directory.instances().len() == 2
        })
        .await,
        "{:?}",
        directory.instances()
    );
    for _ in 0..20 {
        let out = cluster.invoke(Invocation::new("get"), answer).await?;
        assert_eq!(out.value().as_deref(), Some("10.0.0.1@hz"));
    }

    hz.deregister(service.clone()).await?;
    assert!(
        eventually(Duration::from_secs(3), || async {
            directory.instances().len() == 1
        })
        .await
    );
    for _ in 0..5 {
        let out = cluster.invoke(Invocation::new("get"), answer).await?;
        assert_eq!(out.value().as_deref(), Some("10.1.0.1@sh"));
    }

    hz.register(service.clone(), vec![in_zone("10.0.0.1", "hz")])
        .await?;
    assert!(
        eventually(Duration::from_secs(3), || async {
            directory.instances().len() == 2
        })
        .await
    );
    let out = cluster.invoke(Invocation::new("get"), answer).await?;
    assert_eq!(out.value().as_deref(), Some("10.0.0.1@hz"));

    let decisions = cluster.metrics().decisions;
    let count = |zone: &str, reason: &str| {
        decisions
            .get(&("zone".into(), zone.into(), reason.into()))
            .copied()
    };
    assert_eq!(count("hz", "local"), Some(21));
    assert_eq!(count("*", "local-zone-empty"), Some(5));
    for c in [hz, sh, consumer] {
        c.shutdown().await;
    }
    server.stop().await
}
