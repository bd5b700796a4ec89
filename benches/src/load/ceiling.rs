//! The machine's ceiling: a bare tonic server that echoes every Nacos
//! unary request back, and pushes to the bi-streams of connections that
//! subscribed whenever an instance is registered; and a bare hyper
//! HTTP/1.1 server that answers every request with a fixed beat answer.
//! No registry work is done, so what they reach is what the transport
//! alone costs on this machine with this load generator.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Bytes;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt as _};
use understudy_proto::grpc::bi_request_stream_server::{BiRequestStream, BiRequestStreamServer};
use understudy_proto::grpc::request_server::{Request, RequestServer};
use understudy_proto::grpc::Payload;

/// What a v1 beat answers on Nacos.
const BEAT_ANSWER: &[u8] = br#"{"clientBeatInterval":5000,"code":10200,"lightBeatEnabled":true}"#;

/// Pushes queued per stream before the fan-out drops one.
const PUSH_QUEUE: usize = 64;

/// The bi-streams of the open connections (by the client's address:
/// a connection's unary calls and its bi-stream share it), and those of
/// the connections that subscribed.
#[derive(Default)]
struct Echo {
    /// Bi-streams stay silent and cost nothing per connection: the bare
    /// echo an idle connection is measured against.
    silent: bool,
    streams: Mutex<HashMap<SocketAddr, mpsc::Sender<Payload>>>,
    subscribed: Mutex<Vec<mpsc::Sender<Payload>>>,
}

impl Echo {
    /// What a `SubscribeServiceRequest` or `InstanceRequest` costs the
    /// transport: the first enrols the caller's stream, the second sends
    /// every enrolled stream a push listing the registered instance (its
    /// ip and weight; nothing else is kept).
    fn fan_out(&self, request: &tonic::Request<Payload>) {
        let kind = request
            .get_ref()
            .metadata
            .as_ref()
            .map_or("", |m| m.r#type.as_str());
        match kind {
            "SubscribeServiceRequest" => {
                let stream = request
                    .remote_addr()
                    .and_then(|addr| lock(&self.streams).get(&addr).cloned());
                if let Some(stream) = stream {
                    lock(&self.subscribed).push(stream);
                }
            }
            "InstanceRequest" => {
                let subscribed = lock(&self.subscribed);
                if subscribed.is_empty() {
                    return;
                }
                let Some(push) = request
                    .get_ref()
                    .body
                    .as_ref()
                    .and_then(|b| push_of(&b.value))
                else {
                    return;
                };
                for stream in subscribed.iter() {
                    let _ = stream.try_send(push.clone());
                }
            }
            _ => {}
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The push of a registered instance: a `NotifySubscriberRequest` whose
/// service lists it alone.
fn push_of(register: &[u8]) -> Option<Payload> {
    #[derive(serde::Deserialize)]
    struct Register {
        instance: Instance,
    }
    #[derive(serde::Deserialize)]
    struct Instance {
        ip: String,
        port: u16,
        #[serde(default)]
        weight: f64,
    }
    let Register { instance } = serde_json::from_slice(register).ok()?;
    let body = format!(
        r#"{{"requestId":"1","module":"naming","serviceInfo":{{"hosts":[{{"ip":"{}","port":{},"weight":{},"healthy":true}}]}}}}"#,
        instance.ip, instance.port, instance.weight
    );
    Some(super::nacos::payload(
        "NotifySubscriberRequest",
        body.into_bytes(),
    ))
}

#[derive(Clone, Default)]
struct Shared(Arc<Echo>);

#[tonic::async_trait]
impl Request for Shared {
    async fn request(
        &self,
        request: tonic::Request<Payload>,
    ) -> Result<tonic::Response<Payload>, tonic::Status> {
        self.0.fan_out(&request);
        Ok(tonic::Response::new(request.into_inner()))
    }
}

#[tonic::async_trait]
impl BiRequestStream for Shared {
    type requestBiStreamStream =
        Pin<Box<dyn Stream<Item = Result<Payload, tonic::Status>> + Send + 'static>>;

    async fn request_bi_stream(
        &self,
        request: tonic::Request<tonic::Streaming<Payload>>,
    ) -> Result<tonic::Response<Self::requestBiStreamStream>, tonic::Status> {
        // Sends what the fan-out queues; reads and drops what the client
        // sends (its setup, its answers to pushes).
        let remote = request.remote_addr();
        let silent = request
            .into_inner()
            .filter_map(|_| None::<Result<Payload, tonic::Status>>);
        if self.0.silent {
            return Ok(tonic::Response::new(Box::pin(silent)));
        }
        let (tx, rx) = mpsc::channel(PUSH_QUEUE);
        if let Some(addr) = remote {
            lock(&self.0.streams).insert(addr, tx);
        }
        // One stream polls both: no task is added per connection.
        let pushes = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok);
        Ok(tonic::Response::new(Box::pin(pushes.merge(silent))))
    }
}

/// Serves the gRPC echo on `grpc` and the HTTP answerer on `http` until
/// the process ends; with `silent_streams`, the bi-streams push nothing.
pub async fn serve(
    grpc: TcpListener,
    http: TcpListener,
    silent_streams: bool,
) -> anyhow::Result<()> {
    let echo = Shared(Arc::new(Echo {
        silent: silent_streams,
        ..Echo::default()
    }));
    let grpc_task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RequestServer::new(echo.clone()))
            .add_service(BiRequestStreamServer::new(echo))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true)),
            ),
    );
    let http_task = tokio::spawn(serve_http(http));
    tokio::select! {
        grpc = grpc_task => grpc??,
        http = http_task => http??,
    }
    Ok(())
}

async fn serve_http(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|_request| async {
                Ok::<_, std::convert::Infallible>(
                    hyper::Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(BEAT_ANSWER)))
                        .expect("a fixed response"),
                )
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(socket), service)
                .await;
        });
    }
}

/// Binds both listeners on 127.0.0.1 (port 0: any free port).
pub async fn bind(grpc_port: u16, http_port: u16) -> anyhow::Result<(TcpListener, TcpListener)> {
    let grpc = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], grpc_port))).await?;
    let http = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], http_port))).await?;
    Ok((grpc, http))
}
