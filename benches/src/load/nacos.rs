//! A lean Nacos 2.x gRPC client for load: the connection set up as the
//! Java client does it (server check, then the bi-stream and its setup),
//! unary requests with pre-built JSON bodies, and a stream reader that
//! hands pushes on and acknowledges every server request, as SDKs do.
//!
//! It works against any Nacos 2.x server (understudy, r-nacos, Nacos).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use understudy_proto::grpc::bi_request_stream_client::BiRequestStreamClient;
use understudy_proto::grpc::request_client::RequestClient;
use understudy_proto::grpc::{Metadata, Payload};

/// A push (`NotifySubscriberRequest`) as the client received it.
#[derive(Debug)]
pub struct Pushed {
    /// The tag of the connection it came on.
    pub tag: usize,
    /// Its JSON body.
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

/// One client connection.
pub struct Conn {
    unary: RequestClient<tonic::transport::Channel>,
    /// Keeps the bi-stream open; dropping the connection ends it.
    _stream: mpsc::Sender<Payload>,
    reader: tokio::task::JoinHandle<()>,
    /// Whether answers are checked (not against the echo ceiling, which
    /// answers every request with itself).
    checked: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A request payload of type `kind` with a JSON body.
pub fn payload(kind: &str, body: Vec<u8>) -> Payload {
    Payload {
        metadata: Some(Metadata {
            r#type: kind.to_owned(),
            client_ip: "127.0.0.1".to_owned(),
            headers: Default::default(),
        }),
        body: Some(prost_types::Any {
            type_url: String::new(),
            value: body,
        }),
    }
}

/// A response's type and JSON body.
#[derive(Debug)]
pub struct Answer {
    /// `Metadata.type`.
    pub kind: String,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl Answer {
    fn of(payload: Payload) -> Self {
        Self {
            kind: payload.metadata.map(|m| m.r#type).unwrap_or_default(),
            body: payload.body.map(|b| b.value).unwrap_or_default(),
        }
    }

    /// Whether the response succeeded: `resultCode` 200, as the Java
    /// client's `isSuccess` decides (some servers leave `success` out).
    pub fn succeeded(&self) -> bool {
        #[derive(serde::Deserialize)]
        struct Outcome {
            #[serde(default, rename = "resultCode")]
            result_code: Option<i64>,
        }
        serde_json::from_slice::<Outcome>(&self.body).is_ok_and(|o| o.result_code == Some(200))
    }

    /// The body as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    /// Fails unless the response succeeded.
    pub fn ok(self) -> anyhow::Result<Self> {
        anyhow::ensure!(
            self.succeeded(),
            "{} failed: {}",
            self.kind,
            String::from_utf8_lossy(&self.body)
        );
        Ok(self)
    }
}

impl Conn {
    /// Connects: a `ServerCheckRequest`, then the bi-stream with a
    /// `ConnectionSetupRequest` (no ability table, so no server waits on
    /// a negotiation), then health checks until the server knows the
    /// connection. `pushes` receives every push, tagged, if given.
    pub async fn connect(
        grpc: SocketAddr,
        pushes: Option<(usize, mpsc::UnboundedSender<Pushed>)>,
    ) -> anyhow::Result<Self> {
        Self::open(grpc, pushes, true).await
    }

    /// Connects to the echo ceiling: the same calls, no answer checked.
    pub async fn connect_echo(
        grpc: SocketAddr,
        pushes: Option<(usize, mpsc::UnboundedSender<Pushed>)>,
    ) -> anyhow::Result<Self> {
        Self::open(grpc, pushes, false).await
    }

    async fn open(
        grpc: SocketAddr,
        pushes: Option<(usize, mpsc::UnboundedSender<Pushed>)>,
        checked: bool,
    ) -> anyhow::Result<Self> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        let mut unary = RequestClient::new(channel.clone());
        let check = unary
            .request(payload("ServerCheckRequest", br#"{"headers":{}}"#.to_vec()))
            .await?
            .into_inner();
        if checked {
            Answer::of(check).ok()?;
        }
        let mut bi = BiRequestStreamClient::new(channel);
        let (stream, outgoing) = mpsc::channel::<Payload>(64);
        // With an ability table, as the Java client 2.3+ sends it: the
        // server answers with a SetupAckRequest, and grpc-java (Nacos)
        // sends a bi-stream's headers only with its first message.
        let setup = br#"{"headers":{},"module":"naming","clientVersion":"Nacos-Java-Client:v2.3.2","tenant":"","labels":{"source":"sdk","module":"naming"},"abilityTable":{"supportPersistentInstanceByGrpc":true}}"#;
        stream
            .send(payload("ConnectionSetupRequest", setup.to_vec()))
            .await?;
        let inbound = bi
            .request_bi_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await?
            .into_inner();
        let reader = tokio::spawn(read(inbound, stream.clone(), pushes));
        let conn = Self {
            unary,
            _stream: stream,
            reader,
            checked,
        };
        if !checked {
            return Ok(conn);
        }
        // The setup travels on the stream, the health check on a unary
        // call: the server may see the check first and refuse it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answer = conn
                .call("HealthCheckRequest", br#"{"headers":{}}"#.to_vec())
                .await?;
            if answer.succeeded() {
                return Ok(conn);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the server never accepted the connection: {}",
                String::from_utf8_lossy(&answer.body)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Sends a unary request and requires it to succeed (against a
    /// registry).
    pub async fn request(&self, kind: &str, body: Vec<u8>) -> anyhow::Result<Answer> {
        let answer = self.call(kind, body).await?;
        if self.checked {
            answer.ok()
        } else {
            Ok(answer)
        }
    }

    /// Sends a unary request.
    pub async fn call(&self, kind: &str, body: Vec<u8>) -> anyhow::Result<Answer> {
        let answer = self
            .unary
            .clone()
            .request(payload(kind, body))
            .await?
            .into_inner();
        Ok(Answer::of(answer))
    }
}

/// The JSON of an `InstanceRequest` registering one ephemeral instance.
pub fn register_body(service: &str, ip: &str, port: u16, metadata: &str) -> Vec<u8> {
    register_weighted(service, ip, port, 1, metadata)
}

/// [`register_body`] with a weight: re-registering with another weight
/// is a change every server publishes (r-nacos keeps an instance's first
/// metadata, so a metadata-only change is none there).
pub fn register_weighted(
    service: &str,
    ip: &str,
    port: u16,
    weight: u64,
    metadata: &str,
) -> Vec<u8> {
    format!(
        r#"{{"headers":{{}},"namespace":"public","serviceName":"{service}","groupName":"DEFAULT_GROUP","type":"registerInstance","instance":{{"ip":"{ip}","port":{port},"weight":{weight}.0,"healthy":true,"enabled":true,"ephemeral":true,"clusterName":"DEFAULT","serviceName":"{service}","metadata":{{{metadata}}}}}}}"#
    )
    .into_bytes()
}

/// The JSON of a `ServiceQueryRequest`.
pub fn query_body(service: &str) -> Vec<u8> {
    format!(
        r#"{{"headers":{{}},"namespace":"public","serviceName":"{service}","groupName":"DEFAULT_GROUP","cluster":"","healthyOnly":false,"udpPort":0}}"#
    )
    .into_bytes()
}

/// The JSON of a `SubscribeServiceRequest`.
pub fn subscribe_body(service: &str) -> Vec<u8> {
    format!(
        r#"{{"headers":{{}},"namespace":"public","serviceName":"{service}","groupName":"DEFAULT_GROUP","subscribe":true,"clusters":""}}"#
    )
    .into_bytes()
}

/// The hosts of a `serviceInfo` in a response or push body.
pub fn hosts(body: &serde_json::Value) -> &[serde_json::Value] {
    body["serviceInfo"]["hosts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

async fn read(
    mut inbound: tonic::Streaming<Payload>,
    stream: mpsc::Sender<Payload>,
    pushes: Option<(usize, mpsc::UnboundedSender<Pushed>)>,
) {
    while let Some(Ok(message)) = inbound.next().await {
        let at = Instant::now();
        let answer = Answer::of(message);
        let reply = match answer.kind.as_str() {
            "NotifySubscriberRequest" => "NotifySubscriberResponse",
            "ClientDetectionRequest" => "ClientDetectionResponse",
            "ConnectResetRequest" => "ConnectResetResponse",
            "ConfigChangeNotifyRequest" => "ConfigChangeNotifyResponse",
            "SetupAckRequest" => "SetupAckResponse",
            _ => continue,
        };
        let id = request_id(&answer.body);
        let ack = format!(r#"{{"resultCode":200,"errorCode":0,"success":true,"requestId":{id}}}"#);
        if stream.send(payload(reply, ack.into_bytes())).await.is_err() {
            break;
        }
        if reply == "NotifySubscriberResponse" {
            if let Some((tag, pushes)) = &pushes {
                let _ = pushes.send(Pushed {
                    tag: *tag,
                    body: answer.body,
                    at,
                });
            }
        }
    }
}

/// The `requestId` of a server request, as JSON text (`null` if absent).
/// Servers write it near the start, so it is found without parsing the
/// whole push: the load generator answers every push it receives.
fn request_id(body: &[u8]) -> String {
    const KEY: &[u8] = b"\"requestId\":\"";
    if let Some(start) = body.windows(KEY.len()).position(|w| w == KEY) {
        let rest = &body[start + KEY.len()..];
        if let Some(end) = rest.iter().position(|b| *b == b'"' || *b == b'\\') {
            if rest[end] == b'"' {
                return format!("\"{}\"", String::from_utf8_lossy(&rest[..end]));
            }
        }
    }
    #[derive(serde::Deserialize)]
    struct Id {
        #[serde(default, rename = "requestId")]
        request_id: serde_json::Value,
    }
    serde_json::from_slice::<Id>(body)
        .map(|i| i.request_id.to_string())
        .unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_read_quickly_or_parsed() {
        let id = |body: &str| super::request_id(body.as_bytes());
        assert_eq!(
            id(r#"{"headers":{},"requestId":"17","module":"naming"}"#),
            r#""17""#
        );
        assert_eq!(id(r#"{"requestId": "a\"b"}"#), r#""a\"b""#);
        assert_eq!(id(r#"{"module":"naming"}"#), "null");
    }
}
