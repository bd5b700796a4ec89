//! A tonic client balanced over an understudy directory, two ways: tonic's
//! balanced `Channel` ([`balanced_channel`]) and `tower::balance`'s
//! power-of-two-choices over [`Discover`]. Both follow the directory as
//! backends come and go.
//!
//! `cargo run -p understudy-client --example tower_balance` starts, in this
//! process, a one-node understudy, three gRPC backends registered in it,
//! and calls them through both clients while one backend is deregistered
//! and stopped and another one joins. `cargo test` runs it as a test.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use understudy_client::core::ServiceKey;
use understudy_client::discover::{balanced_channel, Discover};
use understudy_client::{Client, InstanceSpec};
use understudy_proto::grpc::request_client::RequestClient;
use understudy_proto::grpc::request_server::{Request, RequestServer};
use understudy_proto::grpc::{Metadata, Payload};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A backend that answers every call with its own port.
struct Backend(u16);

#[tonic::async_trait]
impl Request for Backend {
    async fn request(
        &self,
        _: tonic::Request<Payload>,
    ) -> Result<tonic::Response<Payload>, tonic::Status> {
        Ok(tonic::Response::new(Payload {
            metadata: Some(Metadata {
                r#type: self.0.to_string(),
                ..Metadata::default()
            }),
            body: None,
        }))
    }
}

/// Starts a backend on a free port; it stops when `stop` is cancelled.
async fn backend(stop: CancellationToken) -> Result<u16, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RequestServer::new(Backend(port)))
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                stop.cancelled_owned(),
            ),
    );
    Ok(port)
}

/// Calls `client` once: the port of the backend that answered.
async fn ask<T>(client: &mut RequestClient<T>) -> Result<u16, Error>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let answer = tokio::time::timeout(Duration::from_secs(5), client.request(Payload::default()))
        .await??
        .into_inner();
    Ok(answer.metadata.unwrap_or_default().r#type.parse()?)
}

/// Calls `client` until `done` holds for the ports seen over the last
/// `window` calls, within a deadline; every call must succeed.
async fn call_until<T>(
    what: &str,
    client: &mut RequestClient<T>,
    window: usize,
    done: impl Fn(&[u16]) -> bool,
) -> Result<(), Error>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let port = ask(client)
            .await
            .map_err(|e| format!("{what}: a call failed: {e}"))?;
        seen.push(port);
        let last = &seen[seen.len().saturating_sub(window)..];
        if last.len() == window && done(last) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            let recent: BTreeSet<&u16> = last.iter().collect();
            return Err(
                format!("{what}: not within 20 s; the last calls reached {recent:?}").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The whole run: a registry, backends coming and going, two balanced
/// clients calling through it all.
pub async fn run() -> Result<(), Error> {
    // A one-node understudy on free ports.
    let config =
        understudy_server::ValidConfig::from_settings(understudy_server::config::Settings {
            http_port: Some(0),
            grpc_port: Some(0),
            log: Some("warn".into()),
            ..Default::default()
        })?;
    let listeners = understudy_server::Listeners::bind(&config).await?;
    let registry = listeners.grpc.local_addr()?.to_string();
    let faults = understudy_server::faults::LinkFaults::new(0);
    let node = understudy_server::serve(config, listeners, faults).await?;
    let connect = || Client::builder().endpoint(registry.clone(), None).build();

    // Three backends, registered by one provider.
    let service = ServiceKey::parse("", "", "echo")?;
    let stops: Vec<CancellationToken> = (0..4).map(|_| CancellationToken::new()).collect();
    let mut ports = Vec::new();
    for stop in &stops[..3] {
        ports.push(backend(stop.clone()).await?);
    }
    let spec = |ports: &[u16]| {
        ports
            .iter()
            .map(|p| InstanceSpec::new("127.0.0.1", *p))
            .collect()
    };
    let provider = connect()?;
    provider.register(service.clone(), spec(&ports)).await?;

    // The consumer: one directory, two balanced clients over it.
    let consumer = connect()?;
    let directory = consumer.directory(service.clone());
    directory.wait_until_ready().await?;
    let endpoint = |i: &understudy_client::Instance| {
        Endpoint::from_shared(format!("http://{}:{}", i.ip, i.port))
            .expect("an instance's address is a URI")
    };
    let mut tonic_balanced = RequestClient::new(balanced_channel(&directory, endpoint));
    let discover = Discover::new(&directory, move |i: &understudy_client::Instance| {
        tower::load::Constant::new(endpoint(i).connect_lazy(), 1)
    });
    let balance = tower::balance::p2c::Balance::new(discover);
    let mut tower_balanced = RequestClient::new(tower::buffer::Buffer::new(balance, 64));

    // Every backend answers.
    let all: BTreeSet<u16> = ports.iter().copied().collect();
    let covers = |wanted: BTreeSet<u16>| {
        move |last: &[u16]| last.iter().copied().collect::<BTreeSet<_>>() == wanted
    };
    call_until(
        "tonic: all three",
        &mut tonic_balanced,
        60,
        covers(all.clone()),
    )
    .await?;
    call_until(
        "tower: all three",
        &mut tower_balanced,
        60,
        covers(all.clone()),
    )
    .await?;

    // The first leaves: deregistered, it stops taking calls; then it stops.
    let (gone, staying) = (ports[0], ports[1..].to_vec());
    provider.register(service.clone(), spec(&staying)).await?;
    let without = |last: &[u16]| !last.contains(&gone);
    call_until("tonic: the first left", &mut tonic_balanced, 40, without).await?;
    call_until("tower: the first left", &mut tower_balanced, 40, without).await?;
    stops[0].cancel();
    let staying_set: BTreeSet<u16> = staying.iter().copied().collect();
    call_until(
        "tonic: after the stop",
        &mut tonic_balanced,
        40,
        covers(staying_set.clone()),
    )
    .await?;
    call_until(
        "tower: after the stop",
        &mut tower_balanced,
        40,
        covers(staying_set),
    )
    .await?;

    // A fourth joins and takes calls.
    let joined = backend(stops[3].clone()).await?;
    let mut now = staying.clone();
    now.push(joined);
    provider.register(service.clone(), spec(&now)).await?;
    let reaches = |last: &[u16]| last.contains(&joined);
    call_until("tonic: the fourth joined", &mut tonic_balanced, 1, reaches).await?;
    call_until("tower: the fourth joined", &mut tower_balanced, 1, reaches).await?;
    println!("calls followed the directory: {ports:?}, then {staying:?}, then {now:?}");

    consumer.shutdown().await;
    provider.shutdown().await;
    for stop in &stops {
        stop.cancel();
    }
    node.stop().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    run().await
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_follow_the_directory_as_backends_come_and_go() {
        super::run().await.unwrap();
    }
}
