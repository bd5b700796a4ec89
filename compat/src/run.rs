//! Sends a sequence to a server and takes down its answers: HTTP through
//! reqwest, Nacos gRPC on named connections opened as the Java client
//! opens them (server check, bi-stream, setup, then requests), every
//! request the server sends on a connection answered and queued for the
//! `push` steps.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use understudy_proto::grpc::bi_request_stream_client::BiRequestStreamClient;
use understudy_proto::grpc::request_client::RequestClient;
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_rpc::{seal, Envelope};

use crate::corpus::{Sequence, Step, Until};
use crate::transcript::{Answer, Transcript};

/// How long a step's `until` (or a push) is waited for.
const SETTLE: Duration = Duration::from_secs(15);
/// Between two tries of a step that has not settled.
const RETRY: Duration = Duration::from_millis(50);

/// The server a sequence is sent to.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port`.
    pub http: String,
    /// The gRPC address.
    pub grpc: SocketAddr,
}

impl Target {
    /// A server at `addr` (`host:port`), gRPC at port + 1000 as Nacos.
    pub fn at(addr: SocketAddr) -> Self {
        Self {
            http: format!("http://{addr}"),
            grpc: SocketAddr::new(addr.ip(), addr.port() + 1000),
        }
    }
}

/// Sends `sequence` to `target`; one answer per step.
pub async fn run(target: &Target, sequence: &Sequence) -> anyhow::Result<Transcript> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let mut conns: HashMap<String, Conn> = HashMap::new();
    let mut answers = Vec::new();
    for (i, step) in sequence.steps.iter().enumerate() {
        let context = || format!("sequence {} step {i}", sequence.name);
        let request_id = format!("{}-{i}", sequence.name);
        let answer = if let Some(line) = &step.http {
            settle(step.until.as_ref(), || send_http(&http, target, line, step))
                .await
                .with_context(context)?
        } else if let Some(kind) = &step.grpc {
            let name = step.conn.as_deref().unwrap_or("main");
            if !conns.contains_key(name) {
                let conn = tokio::time::timeout(SETTLE, Conn::open(target.grpc))
                    .await
                    .map_err(|_| anyhow::anyhow!("no connection within {SETTLE:?}"))
                    .and_then(|opened| opened)
                    .with_context(context)?;
                conns.insert(name.to_owned(), conn);
            }
            let conn = &conns[name];
            let body = grpc_body(step.body.as_deref().unwrap_or("{}"), &request_id)
                .with_context(context)?;
            let mut answer = settle(step.until.as_ref(), || conn.call(kind, &body))
                .await
                .with_context(context)?;
            answer.request = format!("grpc {kind} @{name}");
            answer
        } else if let Some(kind) = &step.push {
            let name = step.conn.as_deref().unwrap_or("main");
            let conn = conns
                .get_mut(name)
                .with_context(|| format!("{}: no connection {name}", context()))?;
            conn.next_push(kind, step.until.as_ref())
                .await
                .with_context(context)?
        } else if let Some(name) = &step.close {
            conns.remove(name);
            Answer {
                request: format!("close @{name}"),
                body: Value::Null,
                attempts: 1,
                ..Answer::default()
            }
        } else {
            anyhow::bail!("{}: an empty step", context());
        };
        answers.push(answer);
    }
    Ok(Transcript {
        name: sequence.name.clone(),
        about: sequence.about.clone(),
        answers,
    })
}

/// Tries `send` until `until` holds (at once without one), up to
/// [`SETTLE`]; the last answer when it never holds.
async fn settle<F, Fut>(until: Option<&Until>, mut send: F) -> anyhow::Result<Answer>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Answer>>,
{
    let start = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut answer = send().await?;
        let held = until.is_none_or(|u| u.met(answer.status.unwrap_or(200), &answer.body));
        if held || start.elapsed() > SETTLE {
            if !held {
                eprintln!("  {}: never settled; kept its last answer", answer.request);
            }
            answer.attempts = attempts;
            answer.settled_ms = if attempts == 1 {
                0
            } else {
                start.elapsed().as_millis() as u64
            };
            return Ok(answer);
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn send_http(
    client: &reqwest::Client,
    target: &Target,
    line: &str,
    step: &Step,
) -> anyhow::Result<Answer> {
    let (method, path) = line
        .split_once(' ')
        .with_context(|| format!("'{line}' is not 'METHOD /path'"))?;
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut request = client.request(method, format!("{}{}", target.http, path.trim()));
    for (name, value) in &step.headers {
        request = request.header(name, value);
    }
    if let Some(form) = &step.form {
        request = request
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.clone());
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.to_ascii_lowercase().replace(' ', ""));
    let text = response.text().await?;
    Ok(Answer {
        request: line.to_owned(),
        status: Some(status),
        content_type,
        kind: None,
        body: body_of(&text),
        attempts: 1,
        settled_ms: 0,
    })
}

/// JSON as JSON; anything else (plain text, empty) as a string.
fn body_of(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
        _ => Value::String(text.to_owned()),
    }
}

/// The step's body with `headers` and `requestId` added when absent.
fn grpc_body(text: &str, request_id: &str) -> anyhow::Result<Value> {
    let mut body: Value = serde_json::from_str(text).context("a gRPC body is not JSON")?;
    let object = body
        .as_object_mut()
        .context("a gRPC body is not a JSON object")?;
    object.entry("headers").or_insert_with(|| json!({}));
    object
        .entry("requestId")
        .or_insert_with(|| json!(request_id));
    Ok(body)
}

/// One Nacos gRPC connection.
struct Conn {
    unary: RequestClient<tonic::transport::Channel>,
    /// What the server sent on the bi-stream, already answered.
    pushes: mpsc::UnboundedReceiver<(String, Value)>,
    reader: tokio::task::JoinHandle<()>,
    /// Keeps the bi-stream open.
    _stream: mpsc::Sender<Payload>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Conn {
    /// Connects as the Java client does and waits until the server has
    /// taken the setup (a health check no longer answers 301).
    async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await
            .with_context(|| format!("connecting to gRPC at {addr}"))?;
        let mut unary = RequestClient::new(channel.clone());
        unary
            .request(seal("ServerCheckRequest", &json!({"headers": {}})))
            .await?;
        let (stream, outgoing) = mpsc::channel::<Payload>(64);
        // The setup goes out first: grpc-java answers a bi-stream's
        // headers only once the client has sent on it.
        let setup = json!({"headers": {}, "clientVersion": "Nacos-Java-Client:v2.5.1",
            "tenant": "", "labels": {"source": "sdk", "module": "naming"},
            "abilityTable": {"fuzzyWatch": true, "lock": true}});
        stream.send(seal("ConnectionSetupRequest", &setup)).await?;
        let inbound = BiRequestStreamClient::new(channel)
            .request_bi_stream(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await?
            .into_inner();
        let (tx, pushes) = mpsc::unbounded_channel();
        let reader = tokio::spawn(answer_server(inbound, stream.clone(), tx));
        let start = Instant::now();
        loop {
            let answer = unary
                .request(seal("HealthCheckRequest", &json!({"headers": {}})))
                .await?
                .into_inner();
            let body: Value = Envelope::open(answer)
                .decode()
                .map_err(anyhow::Error::msg)?;
            if body["success"] == true {
                break;
            }
            anyhow::ensure!(
                start.elapsed() < SETTLE,
                "the server never took the connection's setup: {body}"
            );
            tokio::time::sleep(RETRY).await;
        }
        Ok(Self {
            unary,
            pushes,
            reader,
            _stream: stream,
        })
    }

    async fn call(&self, kind: &str, body: &Value) -> anyhow::Result<Answer> {
        let answer = self
            .unary
            .clone()
            .request(seal(kind, body))
            .await?
            .into_inner();
        let envelope = Envelope::open(answer);
        Ok(Answer {
            request: String::new(),
            kind: Some(envelope.kind.clone()),
            body: body_of(&String::from_utf8_lossy(&envelope.body)),
            attempts: 1,
            ..Answer::default()
        })
    }

    /// The next request of type `kind` the server sent that meets
    /// `until`; others of that type before it are skipped.
    async fn next_push(&mut self, kind: &str, until: Option<&Until>) -> anyhow::Result<Answer> {
        let start = Instant::now();
        let mut skipped = 0;
        loop {
            let left = SETTLE.saturating_sub(start.elapsed());
            let (got, body) = tokio::time::timeout(left, self.pushes.recv())
                .await
                .with_context(|| format!("no {kind} within {SETTLE:?} ({skipped} skipped)"))?
                .context("the connection closed")?;
            if got != kind {
                continue;
            }
            if until.is_none_or(|u| u.met(200, &body)) {
                return Ok(Answer {
                    request: format!("push {kind}"),
                    kind: Some(got),
                    body,
                    attempts: skipped + 1,
                    settled_ms: start.elapsed().as_millis() as u64,
                    ..Answer::default()
                });
            }
            skipped += 1;
        }
    }
}

/// Answers each request the server sends (as clients do) and queues it.
async fn answer_server(
    mut inbound: tonic::Streaming<Payload>,
    stream: mpsc::Sender<Payload>,
    queue: mpsc::UnboundedSender<(String, Value)>,
) {
    while let Some(Ok(message)) = inbound.next().await {
        let envelope = Envelope::open(message);
        let body = body_of(&String::from_utf8_lossy(&envelope.body));
        if let Some(base) = envelope.kind.strip_suffix("Request") {
            let answer = json!({"resultCode": 200, "errorCode": 0, "success": true,
                "requestId": body["requestId"].clone()});
            let _ = stream.send(seal(&format!("{base}Response"), &answer)).await;
        }
        if queue.send((envelope.kind, body)).is_err() {
            return;
        }
    }
}
