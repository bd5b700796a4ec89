//! The official Rust Nacos client (`nacos-sdk`) against an in-process
//! understudy on a free port pair (P, P + 1000): the client derives the
//! gRPC port from the HTTP port, as every Nacos SDK does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nacos_sdk::api::naming::{
    NamingChangeEvent, NamingEventListener, NamingService, NamingServiceBuilder, ServiceInstance,
};
use nacos_sdk::api::props::ClientProps;
use understudy_server::config::Settings;
use understudy_tests::{eventually, Server};

async fn client(server: &Server, namespace: &str) -> NamingService {
    let cache = std::env::temp_dir().join(format!("understudy-nacos-cache-{}", std::process::id()));
    NamingServiceBuilder::new(
        ClientProps::new()
            .server_addr(server.http.to_string())
            .namespace(namespace)
            .app_name("understudy-tests")
            .naming_load_cache_at_start(false)
            // The SDK keeps the last non-empty list by default; these tests
            // want to see removals down to an empty service.
            .naming_push_empty_protection(false)
            .cache_dir(cache)
            .env_first(false),
    )
    .build()
    .await
    .expect("the client connects")
}

fn instance(ip: &str, port: i32) -> ServiceInstance {
    ServiceInstance {
        ip: ip.to_owned(),
        port,
        ..ServiceInstance::default()
    }
}

fn endpoints(instances: &[ServiceInstance]) -> Vec<String> {
    let mut list: Vec<String> = instances
        .iter()
        .map(|i| format!("{}:{}", i.ip, i.port))
        .collect();
    list.sort();
    list
}

/// Keeps the newest pushed instance list.
#[derive(Default)]
struct Latest {
    seen: Mutex<Option<Vec<ServiceInstance>>>,
}

impl NamingEventListener for Latest {
    fn event(&self, event: Arc<NamingChangeEvent>) {
        *self.seen.lock().unwrap() = Some(event.instances.clone().unwrap_or_default());
    }
}

impl Latest {
    fn endpoints(&self) -> Option<Vec<String>> {
        self.seen.lock().unwrap().as_deref().map(endpoints)
    }

    fn get(&self) -> Option<Vec<ServiceInstance>> {
        self.seen.lock().unwrap().clone()
    }
}

async fn all(client: &NamingService, service: &str, group: Option<&str>) -> Vec<String> {
    endpoints(
        &client
            .get_all_instances(service.to_owned(), group.map(str::to_owned), vec![], false)
            .await
            .expect("a query answers"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_query_select_and_deregister() -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let nacos = client(&server, "").await;
    nacos
        .register_instance("orders".into(), None, instance("10.0.0.1", 8080))
        .await?;
    assert_eq!(all(&nacos, "orders", None).await, vec!["10.0.0.1:8080"]);

    let mut unhealthy = instance("10.0.0.2", 8080);
    unhealthy.healthy = false;
    let other = client(&server, "").await;
    other
        .register_instance("orders".into(), None, unhealthy)
        .await?;
    assert_eq!(
        all(&nacos, "orders", None).await,
        vec!["10.0.0.1:8080", "10.0.0.2:8080"]
    );
    let healthy = nacos
        .select_instances("orders".into(), None, vec![], false, true)
        .await?;
    assert_eq!(endpoints(&healthy), vec!["10.0.0.1:8080"]);

    nacos
        .deregister_instance("orders".into(), None, instance("10.0.0.1", 8080))
        .await?;
    assert_eq!(all(&nacos, "orders", None).await, vec!["10.0.0.2:8080"]);
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_registration_replaces_the_connections_entry() -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let nacos = client(&server, "").await;
    let batch = vec![
        instance("10.0.0.1", 1),
        instance("10.0.0.1", 2),
        instance("10.0.0.1", 3),
    ];
    nacos
        .batch_register_instance("batch".into(), None, batch)
        .await?;
    assert_eq!(
        all(&nacos, "batch", None).await,
        vec!["10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3"]
    );
    nacos
        .batch_register_instance("batch".into(), None, vec![instance("10.0.0.1", 2)])
        .await?;
    assert_eq!(all(&nacos, "batch", None).await, vec!["10.0.0.1:2"]);
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_lists_page() -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let nacos = client(&server, "").await;
    for i in 0..5 {
        nacos
            .register_instance(format!("svc-{i}"), None, instance("10.0.0.1", 1))
            .await?;
    }
    let (names, count) = nacos.get_service_list(2, 2, None).await?;
    assert_eq!(
        (names, count),
        (vec!["svc-2".to_owned(), "svc-3".to_owned()], 5)
    );
    let (names, count) = nacos.get_service_list(1, i32::MAX, None).await?;
    assert_eq!((names.len(), count), (5, 5));
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_are_pushed_additions_removals_and_metadata_changes() -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let watcher = client(&server, "").await;
    let provider = client(&server, "").await;
    let latest = Arc::new(Latest::default());
    // Subscribing to a service that does not exist yet succeeds.
    watcher
        .subscribe("pushed".into(), None, vec![], latest.clone())
        .await?;

    provider
        .register_instance("pushed".into(), None, instance("10.0.0.1", 1))
        .await?;
    assert!(
        eventually(Duration::from_secs(5), || async {
            latest.endpoints() == Some(vec!["10.0.0.1:1".to_owned()])
        })
        .await,
        "the addition was not pushed: {:?}",
        latest.endpoints()
    );

    let mut changed = instance("10.0.0.1", 1);
    changed.metadata = HashMap::from([("version".to_owned(), "2".to_owned())]);
    provider
        .register_instance("pushed".into(), None, changed)
        .await?;
    assert!(
        eventually(Duration::from_secs(5), || async {
            latest
                .get()
                .and_then(|list| list.first().map(|i| i.metadata.get("version").cloned()))
                .flatten()
                .as_deref()
                == Some("2")
        })
        .await,
        "the metadata change was not pushed"
    );

    provider
        .deregister_instance("pushed".into(), None, instance("10.0.0.1", 1))
        .await?;
    assert!(
        eventually(Duration::from_secs(5), || async {
            latest.endpoints() == Some(vec![])
        })
        .await,
        "the removal was not pushed: {:?}",
        latest.endpoints()
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_and_groups_are_isolated() -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let public = client(&server, "").await;
    let dev = client(&server, "dev").await;
    public
        .register_instance("iso".into(), None, instance("10.0.0.1", 1))
        .await?;
    dev.register_instance("iso".into(), None, instance("10.0.0.2", 1))
        .await?;
    public
        .register_instance("iso".into(), Some("g".into()), instance("10.0.0.3", 1))
        .await?;
    assert_eq!(all(&public, "iso", None).await, vec!["10.0.0.1:1"]);
    assert_eq!(all(&dev, "iso", None).await, vec!["10.0.0.2:1"]);
    assert_eq!(all(&public, "iso", Some("g")).await, vec!["10.0.0.3:1"]);
    assert!(all(&dev, "iso", Some("g")).await.is_empty());
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_loses_its_instances_and_watchers_hear_of_it_within_a_second(
) -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let watcher = client(&server, "").await;
    let latest = Arc::new(Latest::default());
    watcher
        .subscribe("gone".into(), None, vec![], latest.clone())
        .await?;
    // The provider is a process of its own, killed as a crash would: the
    // SDK runs its connection on a process-wide runtime of its own, so
    // dropping its handles in-process would not close anything.
    let mut provider = std::process::Command::new(env!("CARGO_BIN_EXE_nacos_provider"))
        .args([
            server.http.to_string(),
            "gone".into(),
            "10.0.0.1".into(),
            "1".into(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(provider.stdout.take().expect("piped")),
        &mut line,
    )?;
    assert_eq!(line.trim(), "registered");
    assert!(
        eventually(Duration::from_secs(5), || async {
            latest.endpoints() == Some(vec!["10.0.0.1:1".to_owned()])
        })
        .await
    );
    provider.kill()?;
    provider.wait()?;
    let dropped_at = tokio::time::Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || async {
            latest.endpoints() == Some(vec![])
        })
        .await,
        "the removal never reached the watcher"
    );
    let took = dropped_at.elapsed();
    assert!(took <= Duration::from_secs(1), "the removal took {took:?}");
    server.stop().await?;
    Ok(())
}
