//! A provider registering over the Nacos 2.x gRPC API (`api=nacos`), as
//! the Java client does: a connection per registry node, local DC first,
//! opened with the bi-stream and `ConnectionSetupRequest`, the instance
//! registered as ephemeral (owned by the connection), health checks every
//! keepalive period, the server's requests answered, and after any lost
//! connection the registration redone on the next one.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use understudy_client::cluster::START_TIMESTAMP;
use understudy_client::InstanceSpec;
use understudy_proto::grpc::bi_request_stream_client::BiRequestStreamClient;
use understudy_proto::grpc::request_client::RequestClient;
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_rpc::{seal, Envelope};

/// Registers `spec` as an instance of `service` (default namespace and
/// group) after `delay` and keeps it registered until `stop`.
pub(crate) async fn register(
    service: &'static str,
    spec: InstanceSpec,
    zone: String,
    mut endpoints: Vec<(SocketAddr, String)>,
    delay: Duration,
    keepalive: Duration,
    stop: CancellationToken,
) {
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    tokio::select! {
        () = stop.cancelled() => return,
        () = tokio::time::sleep(delay) => {}
    }
    endpoints.sort_by_key(|(_, dc)| *dc != zone);
    let (mut next, mut failures) = (0usize, 0u32);
    loop {
        let (address, _) = endpoints[next % endpoints.len()];
        let outcome = tokio::select! {
            () = stop.cancelled() => return,
            outcome = connection(address, service, &spec, started_ms, keepalive) => outcome,
        };
        if let Err(reason) = outcome {
            tracing::debug!(%address, %reason, "nacos registrant reconnecting");
        }
        failures += 1;
        if failures > 1 {
            next += 1;
        }
        let backoff = Duration::from_millis(50 * u64::from(failures.min(10)));
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
    }
}

fn call_payload(kind: &str, body: &Value) -> Payload {
    seal(kind, body)
}

async fn unary(
    client: &mut RequestClient<tonic::transport::Channel>,
    kind: &str,
    body: Value,
) -> Result<Value, String> {
    let answer = client
        .request(call_payload(kind, &body))
        .await
        .map_err(|s| s.message().to_owned())?
        .into_inner();
    let body: Value = Envelope::open(answer).decode().map_err(|e| e.to_string())?;
    if body["resultCode"] != 200 {
        return Err(format!("{kind}: {body}"));
    }
    Ok(body)
}

/// One connection: set up, register, then health checks until it fails.
async fn connection(
    address: SocketAddr,
    service: &str,
    spec: &InstanceSpec,
    started_ms: u64,
    keepalive: Duration,
) -> Result<(), String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut unary_client = RequestClient::new(channel.clone());
    let (stream, outgoing) = mpsc::channel::<Payload>(64);
    let mut inbound = BiRequestStreamClient::new(channel)
        .request_bi_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
        .await
        .map_err(|s| s.message().to_owned())?
        .into_inner();
    let setup = json!({"headers":{},"module":"internal","clientVersion":"understudy-rig",
        "tenant":"","labels":{"source":"sdk","module":"naming"},"abilityTable":{}});
    stream
        .send(call_payload("ConnectionSetupRequest", &setup))
        .await
        .map_err(|_| "the stream closed")?;
    unary(
        &mut unary_client,
        "ServerCheckRequest",
        json!({"headers":{}}),
    )
    .await?;
    let mut metadata: serde_json::Map<String, Value> = spec
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.clone())))
        .collect();
    metadata
        .entry(START_TIMESTAMP)
        .or_insert_with(|| Value::from(started_ms.to_string()));
    let register = json!({"headers":{},"namespace":"public","serviceName":service,
        "groupName":"DEFAULT_GROUP","type":"registerInstance","instance":{"ip":spec.ip,
        "port":spec.port,"weight":1.0,"healthy":true,"enabled":true,"ephemeral":true,
        "clusterName":"DEFAULT","metadata":metadata}});
    unary(&mut unary_client, "InstanceRequest", register).await?;
    let mut ticker = tokio::time::interval(keepalive);
    loop {
        tokio::select! {
            message = inbound.next() => {
                let Some(Ok(message)) = message else {
                    return Err("the stream ended".into());
                };
                let envelope = Envelope::open(message);
                let Ok(body) = envelope.decode::<Value>() else { continue };
                let answer = match envelope.kind.as_str() {
                    "NotifySubscriberRequest" => "NotifySubscriberResponse",
                    "ClientDetectionRequest" => "ClientDetectionResponse",
                    "ConnectResetRequest" => return Err("the server asked to reconnect".into()),
                    _ => continue,
                };
                let ack = json!({"resultCode":200,"errorCode":0,"success":true,
                    "requestId":body["requestId"]});
                stream
                    .send(call_payload(answer, &ack))
                    .await
                    .map_err(|_| "the stream closed")?;
            }
            _ = ticker.tick() => {
                let check = unary(&mut unary_client, "HealthCheckRequest", json!({"headers":{}}));
                tokio::time::timeout(keepalive * 3, check)
                    .await
                    .map_err(|_| "the health check went unanswered")??;
            }
        }
    }
}
