//! The machine's ceiling: a bare tonic server that echoes every Nacos
//! unary request back and holds bi-streams open doing nothing, and a bare
//! hyper HTTP/1.1 server that answers every request with a fixed beat
//! answer. No registry work is done, so what they reach is what the
//! transport alone costs on this machine with this load generator.

use std::net::SocketAddr;
use std::pin::Pin;

use http_body_util::Full;
use hyper::body::Bytes;
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt as _};
use understudy_proto::grpc::bi_request_stream_server::{BiRequestStream, BiRequestStreamServer};
use understudy_proto::grpc::request_server::{Request, RequestServer};
use understudy_proto::grpc::Payload;

/// What a v1 beat answers on Nacos.
const BEAT_ANSWER: &[u8] = br#"{"clientBeatInterval":5000,"code":10200,"lightBeatEnabled":true}"#;

struct Echo;

#[tonic::async_trait]
impl Request for Echo {
    async fn request(
        &self,
        request: tonic::Request<Payload>,
    ) -> Result<tonic::Response<Payload>, tonic::Status> {
        Ok(tonic::Response::new(request.into_inner()))
    }
}

#[tonic::async_trait]
impl BiRequestStream for Echo {
    type requestBiStreamStream =
        Pin<Box<dyn Stream<Item = Result<Payload, tonic::Status>> + Send + 'static>>;

    async fn request_bi_stream(
        &self,
        request: tonic::Request<tonic::Streaming<Payload>>,
    ) -> Result<tonic::Response<Self::requestBiStreamStream>, tonic::Status> {
        // Reads and drops what the client sends; sends nothing.
        let inbound = request.into_inner();
        let silent = inbound.filter_map(|_| None::<Result<Payload, tonic::Status>>);
        Ok(tonic::Response::new(Box::pin(silent)))
    }
}

/// Serves the gRPC echo on `grpc` and the HTTP answerer on `http` until
/// the process ends.
pub async fn serve(grpc: TcpListener, http: TcpListener) -> anyhow::Result<()> {
    let grpc_task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RequestServer::new(Echo))
            .add_service(BiRequestStreamServer::new(Echo))
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
