//! The Nacos 2.x gRPC adapter on the gRPC port: the unary `Request`
//! service and the `BiRequestStream` service over one accept loop that
//! gives every TCP connection its identity. It owns the connection
//! lifecycle (setup, detection, close), the per-connection pusher, and the
//! shutdown sequence (ConnectReset, then end the streams).

mod ai;
mod config;
mod conn;
mod fuzzy;
mod hold;
pub(crate) mod kind;
mod lock;
pub(crate) mod naming;
pub(crate) mod native;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_proto::grpc::bi_request_stream_server::{BiRequestStream, BiRequestStreamServer};
use understudy_proto::grpc::request_server::{Request, RequestServer};
use understudy_proto::grpc::Payload;
use understudy_proto::nacos::{NameStyle, ServiceInfoRef};
use understudy_proto::nacos3_rpc::ability;
use understudy_proto::nacos_rpc::{
    error_response, seal, ClientAck, ConnectionSetup, Envelope, NotifySubscriber, ServerRequest,
    SetupAck, OVER_THRESHOLD, SERVER_ERROR,
};

use self::conn::{Conn, ConnInfo, Conns, Outbound};
use crate::node::Node;

/// Serves the gRPC API until `shutdown` fires.
pub(crate) async fn serve(
    node: Node,
    listener: TcpListener,
    shutdown: CancellationToken,
    kill: CancellationToken,
    tasks: TaskTracker,
) -> Result<(), tonic::transport::Error> {
    let (conns, mut dropped) = Conns::new(node.clone());
    let clients: std::sync::Weak<dyn crate::clients::Clients> = Arc::downgrade(&conns) as _;
    node.serving_clients(clients);
    let kill_conns = conns.clone();
    let stop_watching = shutdown.clone();
    tasks.spawn(async move {
        tokio::select! {
            biased;
            () = kill.cancelled() => kill_conns.kill_all(),
            () = stop_watching.cancelled() => {}
        }
    });
    let max = node.config().grpc.max_message_bytes;
    let unary = RequestServer::new(Unary { node: node.clone() })
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let bi = BiRequestStreamServer::new(Bi {
        node: node.clone(),
        conns: conns.clone(),
        tasks: tasks.clone(),
    })
    .max_decoding_message_size(max)
    .max_encoding_message_size(max);

    // Accept loop: each socket gets its connection before tonic sees it.
    let (incoming_tx, incoming_rx) = mpsc::channel::<std::io::Result<conn::TrackedIo>>(64);
    let accept_conns = conns.clone();
    // The accept loop outlives the shutdown signal below: tonic stops
    // polling the signal once its incoming stream ends.
    let stop_accepting = CancellationToken::new();
    let accepting = stop_accepting.clone();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                () = accepting.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, remote)) => {
                        let _ = stream.set_nodelay(true);
                        if incoming_tx.send(Ok(accept_conns.accept(stream, remote))).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "gRPC accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
    });

    // Cleanup of dropped sockets and client detection.
    let cleanup_conns = conns.clone();
    let cleanup_conns_node = node.clone();
    let stop_cleanup = shutdown.clone();
    let detection_every = (node.config().grpc.connection_idle / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(3));
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(detection_every);
        let mut quorum_tick = tokio::time::interval(Duration::from_millis(200));
        let reset_after = cleanup_conns_node.config().cluster.quorum_loss_reset;
        loop {
            tokio::select! {
                () = stop_cleanup.cancelled() => break,
                Some(seq) = dropped.recv() => cleanup_conns.close(seq, "socket closed").await,
                _ = tick.tick() => cleanup_conns.detect().await,
                _ = quorum_tick.tick() => {
                    let cut_off = cleanup_conns_node.quorum_lost_for();
                    if cut_off.is_some_and(|lost| lost >= reset_after) {
                        let sent = cleanup_conns.send_elsewhere("cut off from the cluster majority").await;
                        if sent > 0 {
                            tracing::warn!(
                                connections = sent,
                                cut_off_ms = cut_off.map_or(0, |d| d.as_millis() as u64),
                                "cut off from the cluster majority: clients sent elsewhere"
                            );
                        }
                    }
                }
            }
        }
    });

    let stop_native = shutdown.clone();
    let reset_conns = conns.clone();
    let signal = async move {
        shutdown.cancelled().await;
        reset_conns.shutting_down();
        reset_conns.send_elsewhere("server shutting down").await;
        stop_accepting.cancel();
    };
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = &node.config().tls {
        server = server.tls_config(crate::tls::grpc_config(tls))?;
    }
    server
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_service(unary)
        .add_service(bi)
        .add_service(
            understudy_proto::native::registry_server::RegistryServer::new(native::NativeApi {
                node: node.clone(),
                tasks: tasks.clone(),
                stop: stop_native,
            })
            .max_decoding_message_size(max)
            .max_encoding_message_size(max),
        )
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::ReceiverStream::new(incoming_rx),
            signal,
        )
        .await
}

pub(crate) fn connection(extensions: &tonic::Extensions) -> Option<Arc<Conn>> {
    extensions.get::<ConnInfo>().map(|info| info.0.clone())
}

struct Unary {
    node: Node,
}

#[tonic::async_trait]
impl Request for Unary {
    async fn request(
        &self,
        request: tonic::Request<Payload>,
    ) -> Result<tonic::Response<Payload>, tonic::Status> {
        let Some(conn) = connection(request.extensions()) else {
            return Ok(tonic::Response::new(error_response(
                SERVER_ERROR,
                "no connection for this request",
            )));
        };
        if let Some(reason) = &conn.refused {
            return Ok(tonic::Response::new(error_response(OVER_THRESHOLD, reason)));
        }
        let envelope = Envelope::open(request.into_inner());
        Ok(tonic::Response::new(
            naming::dispatch(&self.node, &conn, envelope).await,
        ))
    }
}

struct Bi {
    node: Node,
    conns: Arc<Conns>,
    tasks: TaskTracker,
}

#[tonic::async_trait]
impl BiRequestStream for Bi {
    type requestBiStreamStream = Outbound;

    async fn request_bi_stream(
        &self,
        request: tonic::Request<tonic::Streaming<Payload>>,
    ) -> Result<tonic::Response<Outbound>, tonic::Status> {
        let conn = connection(request.extensions())
            .ok_or_else(|| tonic::Status::internal("no connection"))?;
        if let Some(reason) = &conn.refused {
            return Err(tonic::Status::resource_exhausted(reason));
        }
        let outbound = conn.take_outbound().ok_or_else(|| {
            tonic::Status::already_exists("this connection already has its stream")
        })?;
        // Before the reader: a request is refused until the setup it
        // reads, so no subscription can come before this.
        let (node, tasks) = (self.node.clone(), self.tasks.clone());
        conn.stream_opened(conn::StartPusher(Box::new(move |conn| {
            tasks.spawn(push(node, conn));
        })));
        let inbound = request.into_inner();
        self.tasks.spawn(read(
            self.node.clone(),
            self.conns.clone(),
            conn.clone(),
            inbound,
        ));
        Ok(tonic::Response::new(outbound))
    }
}

/// Reads what the client sends on its stream: the setup, and answers to
/// the server's requests. The stream ending closes the connection.
async fn read(
    node: Node,
    conns: Arc<Conns>,
    conn: Arc<Conn>,
    mut inbound: tonic::Streaming<Payload>,
) {
    // One waiter for the whole stream, not one registered per message.
    let closed = conn.closed.clone().cancelled_owned();
    tokio::pin!(closed);
    loop {
        let message = tokio::select! {
            () = &mut closed => return,
            message = inbound.next() => message,
        };
        let Some(Ok(payload)) = message else {
            break;
        };
        let envelope = Envelope::open(payload);
        conn.touch(node.now());
        if kind::RequestKind::parse(&envelope.kind) == Some(kind::RequestKind::ConnectionSetup) {
            setup(&conn, &envelope);
        } else if envelope.kind.ends_with("Response") {
            match envelope.decode::<ClientAck>() {
                Ok(ack) => answered(&node, &conn, &ack),
                Err(e) => tracing::debug!(connection = %conn.id, error = %e, "unreadable answer"),
            }
        } else {
            tracing::debug!(connection = %conn.id, kind = %envelope.kind, "ignored stream message");
        }
    }
    conns.close(conn.seq, "stream ended").await;
}

/// The abilities announced in `SetupAckRequest`: each is true only when
/// this server serves it, and a Nacos 3 client uses a feature only when
/// the server announced it.
pub(crate) const ABILITIES: [(&str, bool); 5] = [
    (ability::PERSISTENT_INSTANCE_BY_GRPC, true),
    (ability::FUZZY_WATCH, true),
    (ability::LOCK, true),
    (ability::MCP, true),
    (ability::AGENT, true),
];

fn setup(conn: &Conn, envelope: &Envelope) {
    let setup = envelope.decode::<ConnectionSetup>().unwrap_or_default();
    let label = |name: &str| {
        setup
            .labels
            .as_ref()
            .and_then(|labels| labels.get(name))
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    conn.announce(
        setup.client_version.clone().unwrap_or_default(),
        label("AppName"),
        label("Vipserver-Tag"),
    );
    conn.mark_registered();
    tracing::debug!(
        connection = %conn.id,
        client = setup.client_version.as_deref().unwrap_or("unknown"),
        "connection set up"
    );
    // Clients that negotiate abilities wait for this; others must not get it.
    if setup.ability_table.is_some() {
        let ack = ServerRequest::new(
            conn.next_request_id(),
            "internal",
            SetupAck {
                ability_table: ABILITIES
                    .iter()
                    .map(|(name, served)| ((*name).to_owned(), *served))
                    .collect(),
            },
        );
        conn.send_control(seal("SetupAckRequest", &ack));
    }
}

fn answered(node: &Node, conn: &Conn, ack: &ClientAck) {
    let Some(request_id) = ack.request_id.as_deref() else {
        return;
    };
    if conn.detection_answered(request_id) {
        return;
    }
    let grpc = node.config().grpc;
    let (now, retry) = (node.now(), crate::clock::millis(grpc.push_retry));
    // A config change push's answer clears it as a service push's does,
    // so the next change is pushed at once, not after the retry time.
    let acked = if conn.listener.sent(request_id) {
        conn.listener.ack(request_id, ack.succeeded(), now, retry)
    } else {
        let acked = conn.subscriber.ack(request_id, ack.succeeded(), now, retry);
        if acked.is_some() {
            node.races()
                .push_answered(&conn.id, request_id, ack.succeeded(), now);
        }
        acked
    };
    let Some(in_flight) = acked else {
        return;
    };
    let success = if ack.succeeded() { "true" } else { "false" };
    metrics::counter!("understudy_pushes_acknowledged_total", "success" => success).increment(1);
    metrics::histogram!("understudy_push_seconds").record(in_flight as f64 / 1000.0);
}

/// Ends the subscriptions and config listeners of `conn` that `user` may
/// no longer read (the user was deleted, or lost the permission since it
/// subscribed): nothing more is pushed for them.
fn drop_revoked(node: &Node, conn: &Conn, user: &str) {
    use understudy_core::access::{config_resource, service_resource, Action};
    let auth = node.auth();
    let state = node.state();
    let mut dropped = 0_u64;
    for key in conn.subscriber.keys() {
        if !auth.still_allows(user, &service_resource(&key), Action::Read) {
            state.hub().unsubscribe(&conn.subscriber, &key);
            dropped += 1;
        }
    }
    for key in conn.listener.keys() {
        if !auth.still_allows(user, &config_resource(&key), Action::Read) {
            state.config_hub().unsubscribe(&conn.listener, &key);
            dropped += 1;
        }
    }
    if dropped > 0 {
        tracing::info!(connection = %conn.id, user, dropped, "subscriptions whose user may no longer read them dropped");
        metrics::counter!("understudy_subscriptions_revoked_total").increment(dropped);
    }
}

/// Pushes due subscriptions (services and config listeners) to one
/// connection until it closes.
async fn push(node: Node, conn: Arc<Conn>) {
    let grpc = node.config().grpc;
    let (push_timeout, push_retry) = (
        crate::clock::millis(grpc.push_timeout),
        crate::clock::millis(grpc.push_retry),
    );
    let subscriber = conn.subscriber.clone();
    let listener = conn.listener.clone();
    let races = node.races();
    loop {
        // Closing the connection wakes its pusher too.
        if conn.closed.is_cancelled() {
            return;
        }
        if let Some(user) = conn.limited_user() {
            drop_revoked(&node, &conn, &user);
        }
        let now = node.now();
        let expired = subscriber.expire(now, push_timeout, push_retry)
            + listener.expire(now, push_timeout, push_retry);
        if expired > 0 {
            metrics::counter!("understudy_pushes_timed_out_total").increment(expired as u64);
        }
        let mut retries = 0_u64;
        let mut pushes = subscriber.due_pushes(now, |request_id, target| {
            retries += u64::from(target.retry);
            let (hosts, revision) = naming::push_hosts(&node, &target);
            let key = target.key;
            let body = NotifySubscriber {
                service_info: ServiceInfoRef::new(
                    key,
                    NameStyle::Plain,
                    target.clusters_raw,
                    &hosts,
                    target.ref_time,
                ),
            };
            let payload = seal(
                "NotifySubscriberRequest",
                &ServerRequest::new(request_id, "naming", body),
            );
            races.push_sent(&conn.id, key, request_id, revision, now);
            (payload, revision)
        });
        pushes.extend(listener.due_pushes(now, |request_id, target| {
            retries += u64::from(target.retry);
            let notice = config::change_notice(request_id, target.key, target.clusters_raw);
            (notice, 0)
        }));
        if retries > 0 {
            metrics::counter!("understudy_push_retries_total").increment(retries);
        }
        // Fuzzy-watch notices are not merged or retried: the stream keeps
        // their order, and a client that does not take them loses its
        // connection (and re-syncs its set on the next).
        pushes.extend(fuzzy::render(&node, &conn));
        for payload in pushes {
            if !node.push_passes_faults().await {
                continue;
            }
            if !conn.send_push(payload, grpc.push_timeout).await {
                return;
            }
            metrics::counter!("understudy_pushes_sent_total").increment(1);
        }
        let timer = [
            subscriber.next_timer(push_timeout),
            listener.next_timer(push_timeout),
        ]
        .into_iter()
        .flatten()
        .min();
        let sleep = async {
            match timer {
                Some(at) => tokio::time::sleep_until(node.clock().instant_at(at)).await,
                None => std::future::pending().await,
            }
        };
        // The subscriber and the listener share one wake-up.
        tokio::select! {
            () = subscriber.wake().notified() => merge_delay(grpc.push_merge_delay).await,
            () = sleep => {}
        }
    }
}

async fn merge_delay(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}
