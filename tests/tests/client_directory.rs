//! The bundled client's directory against a real server: it follows the
//! service, protects against empty pushes unless the cause is an explicit
//! deregistration, and reconnects after a server restart.

use std::time::Duration;

use understudy_client::{Client, EmptyProtection};
use understudy_core::ServiceKey;
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

fn client(server: &Server, protection: EmptyProtection) -> Client {
    Client::builder()
        .endpoint(server.grpc.to_string(), Some("dc1"))
        .local_dc("dc1")
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .empty_protection(protection)
        .build()
        .expect("a valid client")
}

fn endpoints(directory: &understudy_client::Directory) -> Vec<String> {
    directory
        .instances()
        .iter()
        .map(|i| format!("{}:{}", i.ip, i.port))
        .collect()
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::parse("", "", name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_follows_its_service_and_applies_explicit_deregistrations() -> anyhow::Result<()>
{
    let server = Server::start(Settings::default()).await?;
    let client = client(&server, EmptyProtection::UnlessDeregistered);
    let directory = client.directory(key("dir"));
    directory.wait_until_ready().await?;
    assert!(directory.instances().is_empty());
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("dir", "10.0.0.1", 80).await?;
    assert!(
        eventually(Duration::from_secs(3), || async {
            endpoints(&directory) == ["10.0.0.1:80"]
        })
        .await
    );
    let mut changes = directory.changes();
    provider.deregister("dir").await?;
    tokio::time::timeout(Duration::from_secs(3), changes.changed()).await??;
    assert!(
        directory.instances().is_empty(),
        "an explicit deregistration empties the list"
    );
    assert_eq!(directory.held_back(), 0);
    assert!(directory.revision() > 0);
    client.shutdown().await;
    server.stop().await?;
    Ok(())
}

/// Dropping the last handle on a client stops its tasks, an open watch
/// among them, though a directory it made is still held. The client runs
/// on a runtime of its own, whose live tasks are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_client_handle_ends_its_open_watch() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (client, directory) = {
        let _entered = runtime.enter();
        let client = client(&server, EmptyProtection::UnlessDeregistered);
        let directory = client.directory(key("dropped"));
        (client, directory)
    };
    tokio::time::timeout(Duration::from_secs(5), directory.wait_until_ready()).await??;
    let alive = || runtime.metrics().num_alive_tasks();
    assert!(alive() > 0, "the watch runs on the client's runtime");
    drop(client);
    let ended = eventually(Duration::from_secs(5), || async { alive() == 0 }).await;
    assert!(
        ended,
        "{} of the client's tasks still run after its last handle was dropped",
        alive()
    );
    drop(directory);
    runtime.shutdown_background();
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_push_protection_keeps_the_list_when_the_last_provider_vanishes() -> anyhow::Result<()>
{
    let server = Server::start(Settings::default()).await?;
    let protected = client(&server, EmptyProtection::UnlessDeregistered);
    let unprotected = client(&server, EmptyProtection::Off);
    let kept = protected.directory(key("vanish"));
    let applied = unprotected.directory(key("vanish"));
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("vanish", "10.0.0.1", 80).await?;
    for directory in [&kept, &applied] {
        assert!(
            eventually(Duration::from_secs(3), || async {
                endpoints(directory) == ["10.0.0.1:80"]
            })
            .await
        );
    }
    drop(provider); // connection closed: not an explicit deregistration
    assert!(
        eventually(Duration::from_secs(3), || async {
            applied.instances().is_empty()
        })
        .await
    );
    assert!(eventually(Duration::from_secs(3), || async { kept.held_back() == 1 }).await);
    assert_eq!(
        endpoints(&kept),
        vec!["10.0.0.1:80"],
        "the protected directory kept its list"
    );
    protected.shutdown().await;
    unprotected.shutdown().await;
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_reconnects_after_a_server_restart() -> anyhow::Result<()> {
    let first = Server::start(Settings::default()).await?;
    let grpc_port = first.grpc.port();
    let client = client(&first, EmptyProtection::UnlessDeregistered);
    let directory = client.directory(key("restart"));
    let provider = RawClient::connect(first.grpc, None).await?;
    provider.register("restart", "10.0.0.1", 80).await?;
    assert!(
        eventually(Duration::from_secs(3), || async {
            endpoints(&directory) == ["10.0.0.1:80"]
        })
        .await
    );
    drop(provider);
    first.stop().await?;

    // A new, empty server on the same port; a provider registers there.
    let second = Server::start_on(Settings {
        grpc_port: Some(grpc_port),
        ..Settings::default()
    })
    .await?;
    let provider = RawClient::connect(second.grpc, None).await?;
    provider.register("restart", "10.0.0.2", 81).await?;
    assert!(
        eventually(Duration::from_secs(5), || async {
            endpoints(&directory) == ["10.0.0.2:81"]
        })
        .await,
        "the directory did not follow the new server: {:?}",
        endpoints(&directory)
    );
    client.shutdown().await;
    second.stop().await?;
    Ok(())
}

#[test]
fn a_client_needs_an_endpoint_and_a_sane_backoff() {
    assert!(Client::builder().build().is_err());
    assert!(Client::builder()
        .endpoint("127.0.0.1:9848", None)
        .backoff(Duration::from_secs(2), Duration::from_secs(1))
        .build()
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_registrations_survive_a_server_restart_and_end_with_the_client(
) -> anyhow::Result<()> {
    use understudy_client::InstanceSpec;
    let first = Server::start(Settings::default()).await?;
    let grpc_port = first.grpc.port();
    let provider = Client::builder()
        .endpoint(first.grpc.to_string(), None)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .keepalive(Duration::from_millis(200))
        .build()?;
    provider
        .register(key("kept"), vec![InstanceSpec::new("10.0.0.5", 7000)])
        .await?;
    let observer = RawClient::connect(first.grpc, None).await?;
    assert_eq!(observer.query("kept").await?, vec!["10.0.0.5:7000"]);
    let refused = provider
        .register(key("kept"), vec![InstanceSpec::new("", 1)])
        .await;
    assert!(
        matches!(&refused, Err(understudy_client::ClientError::Invalid { message }) if message.contains("ip")),
        "{refused:?}"
    );
    drop(observer);
    first.stop().await?;

    let second = Server::start_on(Settings {
        grpc_port: Some(grpc_port),
        ..Settings::default()
    })
    .await?;
    let observer = RawClient::connect(second.grpc, None).await?;
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.query("kept").await.ok() == Some(vec!["10.0.0.5:7000".to_owned()])
        })
        .await,
        "the client did not register again on the new server"
    );
    provider.deregister(key("kept")).await?;
    assert!(observer.query("kept").await?.is_empty());
    provider
        .register(key("kept"), vec![InstanceSpec::new("10.0.0.6", 7001)])
        .await?;
    assert_eq!(observer.query("kept").await?, vec!["10.0.0.6:7001"]);
    provider.shutdown().await;
    assert!(
        eventually(Duration::from_secs(3), || async {
            observer
                .query("kept")
                .await
                .map(|v| v.is_empty())
                .unwrap_or(false)
        })
        .await,
        "the instances outlived the client"
    );
    second.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_starts_from_its_disk_cache_while_the_registry_is_down() -> anyhow::Result<()> {
    let cache = std::env::temp_dir().join(format!("understudy-dir-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let server = Server::start(Settings::default()).await?;
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("cached/svc", "10.0.0.9", 9000).await?;
    let first = Client::builder()
        .endpoint(server.grpc.to_string(), None)
        .cache_dir(&cache)
        .build()?;
    let directory = first.directory(key("cached/svc"));
    assert!(
        eventually(Duration::from_secs(3), || async {
            endpoints(&directory) == ["10.0.0.9:9000"]
        })
        .await
    );
    // The copy is written after the list is published; wait for the file.
    assert!(
        eventually(Duration::from_secs(3), || async {
            std::fs::read_dir(&cache)
                .map(|d| d.count() > 0)
                .unwrap_or(false)
        })
        .await
    );
    first.shutdown().await;
    let dead = server.grpc;
    drop(provider);
    server.stop().await?;

    // The registry is gone; a new consumer still starts with the last list.
    let second = Client::builder()
        .endpoint(dead.to_string(), None)
        .cache_dir(&cache)
        .connect_timeout(Duration::from_millis(100))
        .build()?;
    let directory = second.directory(key("cached/svc"));
    tokio::time::timeout(Duration::from_secs(1), directory.wait_until_ready()).await??;
    assert_eq!(endpoints(&directory), vec!["10.0.0.9:9000"]);
    second.shutdown().await;
    std::fs::remove_dir_all(&cache)?;
    Ok(())
}
