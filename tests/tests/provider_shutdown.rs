//! A provider's graceful stop against a real server: consumers see the
//! instance out of rotation (listed, disabled) before the provider drains
//! its calls in flight, it is deregistered only after the drain, and then
//! closes; a drain that outlasts its bound is reported with what was left,
//! and a registry that is gone does not keep the provider from closing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use understudy_client::cluster::shutdown::{Deregistration, Removal};
use understudy_client::cluster::{stop_provider, InFlight, StopOptions};
use understudy_client::{Client, Directory, InstanceSpec};
use understudy_core::ServiceKey;
use understudy_server::config::Settings;
use understudy_tests::{eventually, Server};

const IP: &str = "10.0.0.7";
const PORT: u16 = 7000;

fn client(server: &Server) -> anyhow::Result<Client> {
    Ok(Client::builder()
        .endpoint(server.grpc.to_string(), None)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200))
        .keepalive(Duration::from_millis(200))
        .build()?)
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::parse("", "", name).expect("a valid service key")
}

fn lists_provider(directory: &Directory) -> bool {
    directory
        .instances()
        .iter()
        .any(|i| i.ip == IP && i.port == PORT)
}

/// Listed and enabled: what a consumer would choose.
fn offers_provider(directory: &Directory) -> bool {
    directory
        .instances()
        .iter()
        .any(|i| i.ip == IP && i.port == PORT && i.enabled)
}

/// A provider registered through the client and a consumer that sees it.
async fn provider_and_consumer(
    server: &Server,
    service: &str,
) -> anyhow::Result<(Client, Client, Directory)> {
    let provider = client(server)?;
    provider
        .register(key(service), vec![InstanceSpec::new(IP, PORT)])
        .await?;
    let consumer = client(server)?;
    let directory = consumer.directory(key(service));
    assert!(
        eventually(Duration::from_secs(3), || async {
            lists_provider(&directory)
        })
        .await,
        "the consumer never saw the provider: {:?}",
        directory.instances()
    );
    Ok((provider, consumer, directory))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_stop_choosing_a_stopping_provider_before_it_drains_then_it_is_deregistered(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let (provider, consumer, directory) = provider_and_consumer(&server, "graceful").await?;
    let in_flight = InFlight::new();
    let call = in_flight.enter();
    let closed = Arc::new(AtomicBool::new(false));

    // The call ends only once the consumer has seen the provider out of
    // rotation, so the stop cannot have drained (nor deregistered, nor
    // closed) before consumers stopped choosing it.
    let released = Arc::new(AtomicBool::new(false));
    let release = tokio::spawn({
        let directory = directory.clone();
        let in_flight = in_flight.clone();
        let (closed, released) = (closed.clone(), released.clone());
        async move {
            let gone = eventually(Duration::from_secs(3), || async {
                !offers_provider(&directory)
            })
            .await;
            let still_listed = lists_provider(&directory);
            let in_flight_when_gone = in_flight.count();
            let closed_when_gone = closed.load(Ordering::SeqCst);
            released.store(true, Ordering::SeqCst);
            drop(call);
            (gone, still_listed, in_flight_when_gone, closed_when_gone)
        }
    });

    let options = StopOptions {
        propagation: Duration::from_secs(3),
        drain: Duration::from_secs(3),
    };
    let report = stop_provider(
        &provider,
        key("graceful"),
        &[InstanceSpec::new(IP, PORT)],
        &in_flight,
        options,
        async {
            closed.store(true, Ordering::SeqCst);
            // What the provider's server would see as it shuts down.
            let deregistered = eventually(Duration::from_secs(3), || async {
                !lists_provider(&directory)
            })
            .await;
            (
                deregistered,
                released.load(Ordering::SeqCst),
                in_flight.count(),
            )
        },
    )
    .await;

    let (gone, still_listed, in_flight_when_gone, closed_when_gone) = release.await?;
    assert!(gone, "the consumer still offers the provider");
    assert!(
        still_listed,
        "the provider was deregistered before its calls drained"
    );
    assert_eq!(
        in_flight_when_gone, 1,
        "the consumer saw the removal while the call was in flight"
    );
    assert!(
        !closed_when_gone,
        "the provider closed before consumers saw it go"
    );
    assert_eq!(
        report.closed,
        (true, true, 0),
        "close ran after the change was seen, the call finished and the deregistration"
    );
    assert_eq!(report.disabling, Deregistration::Done);
    assert_eq!(report.deregistration, Deregistration::Done);
    assert!(
        matches!(report.removal, Removal::Seen { after } if after < Duration::from_secs(3)),
        "{report:?}"
    );
    assert_eq!(report.in_flight_left, 0);
    assert!(report.drain_waited < Duration::from_secs(3), "{report:?}");

    provider.shutdown().await;
    consumer.shutdown().await;
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_outlasts_its_bound_closes_anyway_and_reports_the_call_left(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let (provider, consumer, directory) = provider_and_consumer(&server, "stuck").await?;
    let in_flight = InFlight::new();
    let _stuck = in_flight.enter();

    let options = StopOptions {
        propagation: Duration::from_secs(3),
        drain: Duration::from_millis(300),
    };
    let report = stop_provider(
        &provider,
        key("stuck"),
        &[InstanceSpec::new(IP, PORT)],
        &in_flight,
        options,
        async { in_flight.count() },
    )
    .await;

    assert_eq!(report.deregistration, Deregistration::Done);
    assert!(matches!(report.removal, Removal::Seen { .. }), "{report:?}");
    assert_eq!(report.in_flight_left, 1, "{report:?}");
    assert!(
        report.drain_waited >= Duration::from_millis(300),
        "{report:?}"
    );
    assert_eq!(report.closed, 1, "close ran with the call still in flight");
    assert!(
        eventually(Duration::from_secs(3), || async {
            !lists_provider(&directory)
        })
        .await,
        "the consumer still lists the provider"
    );

    provider.shutdown().await;
    consumer.shutdown().await;
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_registry_is_gone_still_drains_and_closes_within_its_bounds(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let (provider, consumer, _directory) = provider_and_consumer(&server, "orphan").await?;
    consumer.shutdown().await;
    server.stop().await?;
    let in_flight = InFlight::new();

    let options = StopOptions {
        propagation: Duration::from_millis(500),
        drain: Duration::from_millis(500),
    };
    let started = tokio::time::Instant::now();
    let report = stop_provider(
        &provider,
        key("orphan"),
        &[InstanceSpec::new(IP, PORT)],
        &in_flight,
        options,
        async { "closed" },
    )
    .await;

    assert_ne!(report.deregistration, Deregistration::Done, "{report:?}");
    assert_eq!(
        report.removal,
        Removal::NotSeen {
            waited: Duration::from_millis(500)
        }
    );
    assert_eq!(report.in_flight_left, 0);
    assert_eq!(report.closed, "closed");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the stop took {:?}",
        started.elapsed()
    );
    provider.shutdown().await;
    Ok(())
}
