//! The bundled client's wider reads and provider governance against a real
//! server: a view of a group follows its services as they come and go and
//! ignores other groups; a consumer of a service that does not exist is
//! told so (namespace and group named) rather than "no healthy instance";
//! a delayed registration shows only after its delay, with the provider's
//! start time; a directory says which node it follows.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use understudy_client::cluster::{CallFailure, Cluster, ClusterError, Invocation, START_TIMESTAMP};
use understudy_client::{Client, Instance, InstanceSpec};
use understudy_core::{GroupName, NamespaceId, ServiceKey};
use understudy_server::config::Settings;
use understudy_tests::{eventually, Server};

fn client(server: &Server) -> anyhow::Result<Client> {
    Ok(Client::builder()
        .endpoint(server.grpc.to_string(), None)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(300))
        .keepalive(Duration::from_millis(200))
        .build()?)
}

fn key(group: &str, name: &str) -> ServiceKey {
    ServiceKey::parse("", group, name).expect("a valid key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_view_sees_its_services_come_and_go_and_ignores_other_groups() -> anyhow::Result<()>
{
    let server = Server::start(Settings::default()).await?;
    let consumer = client(&server)?;
    let view = consumer.view(NamespaceId::public(), Some(GroupName::parse("orders")?));
    view.wait_until_ready().await?;
    assert!(view.services().is_empty());

    let names = |view: &understudy_client::View| -> BTreeSet<String> {
        view.services()
            .iter()
            .filter(|(_, instances)| !instances.is_empty())
            .map(|(k, i)| format!("{}={}", k.name, i.len()))
            .collect()
    };
    // Two services of the watched group, one of another group.
    let a = client(&server)?;
    a.register(
        key("orders", "create"),
        vec![InstanceSpec::new("10.0.0.1", 80)],
    )
    .await?;
    let b = client(&server)?;
    b.register(
        key("orders", "cancel"),
        vec![
            InstanceSpec::new("10.0.0.2", 80),
            InstanceSpec::new("10.0.0.3", 80),
        ],
    )
    .await?;
    let other = client(&server)?;
    other
        .register(
            key("billing", "charge"),
            vec![InstanceSpec::new("10.0.0.4", 80)],
        )
        .await?;
    let expected: BTreeSet<String> = ["cancel=2".into(), "create=1".into()].into();
    assert!(
        eventually(Duration::from_secs(3), || async {
            names(&view) == expected
        })
        .await,
        "the view shows {:?}",
        names(&view)
    );
    assert!(
        view.services().keys().all(|k| k.group.as_str() == "orders"),
        "another group's service leaked in: {:?}",
        view.services().keys().collect::<Vec<_>>()
    );
    // One goes away: its provider deregisters.
    a.deregister(key("orders", "create")).await?;
    let expected: BTreeSet<String> = ["cancel=2".into()].into();
    assert!(
        eventually(Duration::from_secs(3), || async {
            names(&view) == expected
        })
        .await,
        "the view shows {:?}",
        names(&view)
    );
    assert!(view.revision() > 0);
    for c in [consumer, a, b, other] {
        c.shutdown().await;
    }
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_provider_names_the_namespace_and_group_when_the_service_does_not_exist(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let provider = client(&server)?;
    provider
        .register(
            key("DEFAULT_GROUP", "users"),
            vec![InstanceSpec::new("10.0.0.1", 80)],
        )
        .await?;
    let consumer = client(&server)?;
    // The consumer asks for the right name in the wrong group.
    let wrong = consumer.directory(key("dubbo", "users"));
    wrong.wait_until_ready().await?;
    assert_eq!(wrong.exists(), Some(false));
    let cluster = Cluster::builder().build(&wrong)?;
    let call = |_: Arc<Instance>| async { Ok::<_, CallFailure>(()) };
    let error = cluster
        .invoke(Invocation::new("get"), call)
        .await
        .unwrap_err();
    let ClusterError::NoProvider { reason, .. } = &error else {
        panic!("{error}")
    };
    assert_eq!(
        reason,
        "service users does not exist in namespace public, group dubbo"
    );

    // An existing service whose last instance left is not "missing".
    let right = consumer.directory(key("DEFAULT_GROUP", "users"));
    right.wait_until_ready().await?;
    assert_eq!(right.exists(), Some(true));
    let cluster = Cluster::builder().build(&right)?;
    assert!(cluster.invoke(Invocation::new("get"), call).await.is_ok());
    provider.shutdown().await;
    consumer.shutdown().await;
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_registration_shows_after_its_delay_with_the_providers_start_time(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let consumer = client(&server)?;
    let directory = consumer.directory(key("DEFAULT_GROUP", "slow-start"));
    directory.wait_until_ready().await?;
    let provider = client(&server)?;
    let built_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let started = tokio::time::Instant::now();
    let registering = tokio::spawn({
        let provider = provider.clone();
        async move {
            provider
                .register_after(
                    Duration::from_millis(800),
                    key("DEFAULT_GROUP", "slow-start"),
                    vec![InstanceSpec::new("10.0.0.5", 80)],
                )
                .await
        }
    });
    let mut changes = directory.changes();
    tokio::time::timeout(Duration::from_secs(5), changes.wait_for(|l| !l.is_empty())).await??;
    let shown_after = started.elapsed();
    registering.await??;
    assert!(
        shown_after >= Duration::from_millis(800),
        "listed {shown_after:?} after the start"
    );
    let listed = directory.instances();
    let timestamp: u64 = listed[0].metadata[START_TIMESTAMP].parse()?;
    assert!(
        timestamp.abs_diff(built_at) < 5_000,
        "the start time {timestamp} is not the client's ({built_at})"
    );
    provider.shutdown().await;
    consumer.shutdown().await;
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_says_which_node_it_follows_and_that_nodes_lag() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        dc: Some("hz".into()),
        ..Settings::default()
    })
    .await?;
    let consumer = client(&server)?;
    let directory = consumer.directory(key("DEFAULT_GROUP", "anything"));
    let mut served = directory.served_by_changes();
    tokio::time::timeout(Duration::from_secs(5), served.wait_for(Option::is_some)).await??;
    let by = directory.served_by().expect("a node");
    assert_eq!(by.dc, "hz");
    assert_eq!(by.node_id, 1);
    assert!(by.home, "a client with no local DC is always home");
    assert_eq!(by.endpoint, format!("http://{}", server.grpc));
    consumer.shutdown().await;
    server.stop().await?;
    Ok(())
}
