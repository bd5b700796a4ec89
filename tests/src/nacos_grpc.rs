//! A raw Nacos 2.x gRPC client, speaking the wire protocol directly: the
//! handshake, unary requests, and a bi-stream reader that applies pushes
//! (newest `lastRefTime` wins, as the SDKs do) and acknowledges them. Tests
//! use it where an SDK would hide what matters (ordering, malformed
//! input); the load generator uses it to drive the server as clients do.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use understudy_proto::grpc::bi_request_stream_client::BiRequestStreamClient;
use understudy_proto::grpc::request_client::RequestClient;
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_rpc::Envelope;

/// A push as the client received it.
#[derive(Debug, Clone)]
pub struct Push {
    /// `group@@service`.
    pub service: String,
    /// The ServiceInfo.
    pub info: Value,
    /// When it arrived.
    pub at: Instant,
}

/// Whether the client answers the server's requests (pushes, detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// Answer every server request, as SDKs do.
    All,
    /// Answer nothing: a client that hangs.
    Nothing,
}

/// One client connection.
pub struct RawClient {
    unary: RequestClient<tonic::transport::Channel>,
    /// Keeps the bi-stream open; dropping the client ends it.
    _stream: mpsc::Sender<Payload>,
    /// The id the server gave this connection.
    pub connection_id: String,
    views: Arc<Mutex<HashMap<String, Value>>>,
    notified: Arc<Mutex<Vec<Value>>>,
    server: Arc<Mutex<ServerRequests>>,
    reader: tokio::task::JoinHandle<()>,
}

/// What the server sent besides pushes: its setup ack's ability table,
/// and every fuzzy-watch request (type and body), in order.
#[derive(Debug, Default)]
struct ServerRequests {
    abilities: Value,
    fuzzy: Vec<(String, Value)>,
}

impl Drop for RawClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn payload(kind: &str, body: &Value) -> Payload {
    understudy_proto::nacos_rpc::seal(kind, body)
}

impl RawClient {
    /// Connects as Java 2.x does: open the stream, send the setup with an
    /// ability table, wait for the setup ack, then check the server.
    /// `pushes` receives every push, if given.
    pub async fn connect(
        grpc: SocketAddr,
        pushes: Option<mpsc::UnboundedSender<Push>>,
    ) -> anyhow::Result<Self> {
        Self::connect_answering(grpc, pushes, Answers::All).await
    }

    /// Connects, answering the server's requests or not.
    pub async fn connect_answering(
        grpc: SocketAddr,
        pushes: Option<mpsc::UnboundedSender<Push>>,
        answers: Answers,
    ) -> anyhow::Result<Self> {
        Self::connect_from(grpc, pushes, answers, None, json!({})).await
    }

    /// Connects from the local address `from` (e.g. 127.0.0.2), adding
    /// `labels` to the setup's (`{"Vipserver-Tag": "canary"}`).
    pub async fn connect_from(
        grpc: SocketAddr,
        pushes: Option<mpsc::UnboundedSender<Push>>,
        answers: Answers,
        from: Option<std::net::IpAddr>,
        labels: Value,
    ) -> anyhow::Result<Self> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))?
            .local_address(from)
            .connect()
            .await?;
        let mut unary = RequestClient::new(channel.clone());
        let mut bi = BiRequestStreamClient::new(channel);
        let (stream, outgoing) = mpsc::channel::<Payload>(64);
        let inbound = bi
            .request_bi_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await?
            .into_inner();
        let views: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let notified: Arc<Mutex<Vec<Value>>> = Arc::default();
        let server: Arc<Mutex<ServerRequests>> = Arc::default();
        let (acked_tx, acked) = oneshot::channel();
        let reader = tokio::spawn(read(
            inbound,
            stream.clone(),
            Seen {
                views: views.clone(),
                notified: notified.clone(),
                server: server.clone(),
            },
            pushes,
            acked_tx,
            answers,
        ));
        let mut setup = json!({"headers":{},"module":"internal","clientVersion":"understudy-tests",
            "tenant":"","labels":{"source":"sdk","module":"naming","AppName":"tests-app"},"abilityTable":{}});
        if let Value::Object(extra) = labels {
            for (name, value) in extra {
                setup["labels"][name] = value;
            }
        }
        stream
            .send(payload("ConnectionSetupRequest", &setup))
            .await?;
        tokio::time::timeout(Duration::from_secs(5), acked).await??;
        let answer = unary
            .request(payload("ServerCheckRequest", &json!({"headers":{}})))
            .await?
            .into_inner();
        let body: Value = Envelope::open(answer)
            .decode()
            .map_err(anyhow::Error::msg)?;
        let connection_id = body["connectionId"].as_str().unwrap_or_default().to_owned();
        Ok(Self {
            unary,
            _stream: stream,
            connection_id,
            views,
            notified,
            server,
            reader,
        })
    }

    /// The ability table of the server's `SetupAckRequest`.
    pub fn abilities(&self) -> Value {
        lock(&self.server).abilities.clone()
    }

    /// Every fuzzy-watch request the server sent (type, body), in order.
    pub fn fuzzy_requests(&self) -> Vec<(String, Value)> {
        lock(&self.server).fuzzy.clone()
    }

    /// The keys the fuzzy-watch requests so far say exist, applied in
    /// order as a client does (syncs of `pattern`, and every change
    /// notice), and whether its first sync has finished.
    pub fn fuzzy_set(&self, pattern: &str) -> (std::collections::BTreeSet<String>, bool) {
        let mut keys = std::collections::BTreeSet::new();
        let mut finished = false;
        for (kind, body) in self.fuzzy_requests() {
            let mut apply = |key: &Value, changed: &Value| {
                let key = key.as_str().unwrap_or_default().to_owned();
                match changed.as_str().unwrap_or_default() {
                    "ADD_SERVICE" | "ADD_CONFIG" | "CONFIG_CHANGED" => keys.insert(key),
                    _ => keys.remove(&key),
                };
            };
            if kind.ends_with("SyncRequest") {
                if body["groupKeyPattern"] != pattern {
                    continue;
                }
                if body["syncType"] == "FINISH_FUZZY_WATCH_INIT_NOTIFY" {
                    finished = true;
                }
                for context in body["contexts"].as_array().into_iter().flatten() {
                    let key = if context["serviceKey"].is_null() {
                        &context["groupKey"]
                    } else {
                        &context["serviceKey"]
                    };
                    apply(key, &context["changedType"]);
                }
            } else if kind == "NamingFuzzyWatchChangeNotifyRequest" {
                apply(&body["serviceKey"], &body["changedType"]);
            } else if kind == "ConfigFuzzyWatchChangeNotifyRequest" {
                apply(&body["groupKey"], &body["changeType"]);
            }
        }
        (keys, finished)
    }

    /// Sends a unary request; returns the response type and body.
    pub async fn call(&self, kind: &str, body: Value) -> anyhow::Result<(String, Value)> {
        let answer = self
            .unary
            .clone()
            .request(payload(kind, &body))
            .await?
            .into_inner();
        let envelope = Envelope::open(answer);
        let json: Value = envelope.decode().map_err(anyhow::Error::msg)?;
        Ok((envelope.kind, json))
    }

    /// Sends raw bytes as a request body of type `kind`.
    pub async fn call_raw(&self, kind: &str, body: &[u8]) -> anyhow::Result<(String, Value)> {
        let mut request = payload(kind, &json!({}));
        if let Some(any) = request.body.as_mut() {
            any.value = body.to_vec();
        }
        let envelope = Envelope::open(self.unary.clone().request(request).await?.into_inner());
        let json: Value = envelope.decode().map_err(anyhow::Error::msg)?;
        Ok((envelope.kind, json))
    }

    /// Registers one instance of `service` for this connection.
    pub async fn register(&self, service: &str, ip: &str, port: u16) -> anyhow::Result<()> {
        let body = json!({"headers":{},"namespace":"public","serviceName":service,"groupName":"DEFAULT_GROUP",
            "type":"registerInstance","instance":{"ip":ip,"port":port,"weight":1.0,"healthy":true,
            "enabled":true,"ephemeral":true,"clusterName":"DEFAULT","metadata":{}}});
        expect_success(self.call("InstanceRequest", body).await?)
    }

    /// Removes this connection's instances of `service`.
    pub async fn deregister(&self, service: &str) -> anyhow::Result<()> {
        let body = json!({"headers":{},"namespace":"public","serviceName":service,"groupName":"DEFAULT_GROUP",
            "type":"deregisterInstance","instance":{"ip":"0.0.0.0","port":0}});
        expect_success(self.call("InstanceRequest", body).await?)
    }

    /// Queries `service` once (no subscription); returns its endpoints.
    pub async fn query(&self, service: &str) -> anyhow::Result<Vec<String>> {
        let body = json!({"headers":{},"namespace":"public","serviceName":service,"groupName":"DEFAULT_GROUP",
            "cluster":"","healthyOnly":false});
        let (kind, json) = self.call("ServiceQueryRequest", body).await?;
        anyhow::ensure!(kind == "QueryServiceResponse", "unexpected {kind}: {json}");
        Ok(endpoints(&json["serviceInfo"]))
    }

    /// Subscribes to `service`; the answer becomes the view, unless a
    /// newer push arrived first.
    pub async fn subscribe(&self, service: &str) -> anyhow::Result<()> {
        let body = json!({"headers":{},"namespace":"public","serviceName":service,"groupName":"DEFAULT_GROUP",
            "subscribe":true,"clusters":""});
        let (kind, json) = self.call("SubscribeServiceRequest", body).await?;
        anyhow::ensure!(
            kind == "SubscribeServiceResponse",
            "unexpected {kind}: {json}"
        );
        apply(
            &self.views,
            &format!("DEFAULT_GROUP@@{service}"),
            json["serviceInfo"].clone(),
        );
        Ok(())
    }

    /// Every `ConfigChangeNotifyRequest` received so far.
    pub fn config_notifications(&self) -> Vec<Value> {
        self.notified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The endpoints this client currently sees for `service`.
    pub fn view(&self, service: &str) -> Option<Vec<String>> {
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        views
            .get(&format!("DEFAULT_GROUP@@{service}"))
            .map(endpoints)
    }
}

fn expect_success((kind, json): (String, Value)) -> anyhow::Result<()> {
    anyhow::ensure!(json["success"] == true, "{kind}: {json}");
    Ok(())
}

/// `ip:port` of each host, sorted.
pub fn endpoints(info: &Value) -> Vec<String> {
    let mut list: Vec<String> = info["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| format!("{}:{}", h["ip"].as_str().unwrap_or_default(), h["port"]))
        .collect();
    list.sort();
    list
}

fn apply(views: &Mutex<HashMap<String, Value>>, key: &str, info: Value) {
    let mut views = views.lock().unwrap_or_else(|p| p.into_inner());
    let newer = views
        .get(key)
        .is_none_or(|old| old["lastRefTime"].as_u64() < info["lastRefTime"].as_u64());
    if newer {
        views.insert(key.to_owned(), info);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the reader puts what it sees.
struct Seen {
    views: Arc<Mutex<HashMap<String, Value>>>,
    notified: Arc<Mutex<Vec<Value>>>,
    server: Arc<Mutex<ServerRequests>>,
}

async fn read(
    mut inbound: tonic::Streaming<Payload>,
    stream: mpsc::Sender<Payload>,
    seen: Seen,
    pushes: Option<mpsc::UnboundedSender<Push>>,
    acked: oneshot::Sender<()>,
    answers: Answers,
) {
    let mut acked = Some(acked);
    while let Some(Ok(message)) = inbound.next().await {
        let envelope = Envelope::open(message);
        let Ok(body) = envelope.decode::<Value>() else {
            continue;
        };
        let request_id = body["requestId"].clone();
        let answer = match envelope.kind.as_str() {
            "SetupAckRequest" => {
                lock(&seen.server).abilities = body["abilityTable"].clone();
                if let Some(acked) = acked.take() {
                    let _ = acked.send(());
                }
                continue;
            }
            "NotifySubscriberRequest" => {
                let info = body["serviceInfo"].clone();
                let key = format!(
                    "{}@@{}",
                    info["groupName"].as_str().unwrap_or_default(),
                    info["name"].as_str().unwrap_or_default()
                );
                if let Some(pushes) = &pushes {
                    let _ = pushes.send(Push {
                        service: key.clone(),
                        info: info.clone(),
                        at: Instant::now(),
                    });
                }
                apply(&seen.views, &key, info);
                "NotifySubscriberResponse"
            }
            "ConfigChangeNotifyRequest" => {
                lock(&seen.notified).push(body.clone());
                "ConfigChangeNotifyResponse"
            }
            "NamingFuzzyWatchSyncRequest"
            | "NamingFuzzyWatchChangeNotifyRequest"
            | "ConfigFuzzyWatchSyncRequest"
            | "ConfigFuzzyWatchChangeNotifyRequest" => {
                lock(&seen.server)
                    .fuzzy
                    .push((envelope.kind.clone(), body.clone()));
                match envelope.kind.as_str() {
                    "NamingFuzzyWatchSyncRequest" => "NamingFuzzyWatchSyncResponse",
                    "NamingFuzzyWatchChangeNotifyRequest" => "NamingFuzzyWatchChangeNotifyResponse",
                    "ConfigFuzzyWatchSyncRequest" => "ConfigFuzzyWatchSyncResponse",
                    _ => "ConfigFuzzyWatchChangeNotifyResponse",
                }
            }
            "ClientDetectionRequest" => "ClientDetectionResponse",
            "ConnectResetRequest" => "ConnectResetResponse",
            _ => continue,
        };
        if answers == Answers::Nothing {
            continue;
        }
        let ack = json!({"resultCode":200,"errorCode":0,"success":true,"requestId":request_id});
        if stream.send(payload(answer, &ack)).await.is_err() {
            break;
        }
    }
}
