//! gRPC connections: identity by TCP connection, setup state, the two
//! outgoing queues of the bi-stream (control messages ahead of pushes),
//! liveness detection, and the one place a connection is closed. Every
//! unary call and the bi-stream of one client share one TCP connection,
//! so the accepted socket carries the [`Conn`] to every request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;
use understudy_core::{ConfigKey, Millis, Op, Owner, RemovalCause, ServiceKey};
use understudy_proto::grpc::Payload;

use crate::node::Node;
use crate::push::Subscriber;

/// One client connection.
#[derive(Debug)]
pub(crate) struct Conn {
    /// A process-unique number.
    pub(crate) seq: u64,
    /// Nacos' connection id: `<epoch ms>_<ip>_<port>`.
    pub(crate) id: String,
    registered: AtomicBool,
    last_active: AtomicU64,
    // Boxed: a channel allocates room for 32 messages up front, and a
    // boxed one keeps that at 32 pointers on every idle connection.
    control: mpsc::Sender<Box<Payload>>,
    pushes: mpsc::Sender<Box<Payload>>,
    outbound: Mutex<Option<Outbound>>,
    pub(crate) subscriber: Arc<Subscriber<ServiceKey>>,
    /// Config listeners; the variant is the tenant the client sent.
    pub(crate) listener: Arc<Subscriber<ConfigKey>>,
    /// An unanswered detection probe: its request id and when it was sent.
    detection: Mutex<Option<(String, Millis)>>,
    /// Cancelled when the connection is closed, for whatever reason.
    pub(crate) closed: CancellationToken,
    server_requests: AtomicU64,
    /// Set when the connection was over a connection limit: every request
    /// on it is answered with this, and the socket is closed soon after.
    pub(crate) refused: Option<String>,
    /// Native watches open on it.
    watches: AtomicUsize,
    /// The version, application name and tag the client announced at
    /// setup.
    announced: std::sync::OnceLock<(String, String, String)>,
    /// The md5 it holds of each config it listens to, as it last said.
    md5s: Mutex<std::collections::BTreeMap<ConfigKey, String>>,
    /// The user its requests came from, when auth is on and that user
    /// is limited by its roles (not a config-file user): a subscription
    /// it may no longer read is dropped before the next push.
    user: Mutex<Option<Box<str>>>,
    /// Its place under the port's connection limits (none if refused).
    _ticket: Option<crate::admission::Ticket>,
    /// Marks the id as held by this process while the connection lives.
    _held: crate::node::Held,
    /// Itself, for the pusher it starts.
    me: std::sync::Weak<Conn>,
    /// Starts its push task: set when its stream opens, taken at its
    /// first subscription (which needs the setup the stream carries), so
    /// a connection that subscribes to nothing (a provider that only
    /// registers) holds no push task.
    pusher: Mutex<Option<StartPusher>>,
    /// Its fuzzy watches of services and of configs, made at its first.
    fuzzy_services: std::sync::OnceLock<Arc<crate::fuzzy::Watches<ServiceKey>>>,
    fuzzy_configs: std::sync::OnceLock<Arc<crate::fuzzy::Watches<ConfigKey>>>,
}

/// Starts a connection's push task.
pub(crate) struct StartPusher(pub(crate) Box<dyn FnOnce(Arc<Conn>) + Send>);

impl std::fmt::Debug for StartPusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StartPusher")
    }
}

impl Conn {
    /// Its stream is open: `start` starts its pusher at its first
    /// subscription.
    pub(crate) fn stream_opened(&self, start: StartPusher) {
        *lock(&self.pusher) = Some(start);
    }

    /// It subscribed to a service or listens to a config: its pusher
    /// starts, if it has not yet.
    pub(crate) fn subscribed(&self) {
        let start = lock(&self.pusher).take();
        if let (Some(StartPusher(start)), Some(me)) = (start, self.me.upgrade()) {
            start(me);
        }
    }

    /// Its fuzzy watches of services.
    pub(crate) fn fuzzy_services(&self) -> &Arc<crate::fuzzy::Watches<ServiceKey>> {
        self.fuzzy_services.get_or_init(|| {
            Arc::new(crate::fuzzy::Watches::new(
                self.seq,
                self.subscriber.waker(),
            ))
        })
    }

    /// Its fuzzy watches of configs.
    pub(crate) fn fuzzy_configs(&self) -> &Arc<crate::fuzzy::Watches<ConfigKey>> {
        self.fuzzy_configs.get_or_init(|| {
            Arc::new(crate::fuzzy::Watches::new(
                self.seq,
                self.subscriber.waker(),
            ))
        })
    }

    /// Its fuzzy watches of services, if it made any.
    pub(crate) fn fuzzy_services_made(&self) -> Option<&Arc<crate::fuzzy::Watches<ServiceKey>>> {
        self.fuzzy_services.get()
    }

    /// Its fuzzy watches of configs, if it made any.
    pub(crate) fn fuzzy_configs_made(&self) -> Option<&Arc<crate::fuzzy::Watches<ConfigKey>>> {
        self.fuzzy_configs.get()
    }

    /// Remembers the limited user its requests come from.
    pub(crate) fn limit_to(&self, user: &str) {
        let mut held = self.user.lock().unwrap_or_else(|p| p.into_inner());
        if held.as_deref() != Some(user) {
            *held = Some(user.into());
        }
    }

    /// The limited user its requests came from, if any.
    pub(crate) fn limited_user(&self) -> Option<Box<str>> {
        self.user.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The owner of the ephemeral instances it registers.
    pub(crate) fn owner(&self, node: &Node) -> Owner {
        Owner::Connection {
            node: node.config().node_id,
            id: self.id.as_str().into(),
        }
    }

    /// The client's IP address, as its id (`<ms>_<ip>_<port>`) holds it.
    pub(crate) fn remote_ip(&self) -> &str {
        let rest = self.id.split_once('_').map_or("", |(_, rest)| rest);
        rest.rsplit_once('_').map_or(rest, |(ip, _)| ip)
    }

    /// Records the version, application and tag (`Vipserver-Tag`, which
    /// gray releases match) a client announced.
    pub(crate) fn announce(&self, version: String, app_name: String, tag: String) {
        let _ = self.announced.set((version, app_name, tag));
    }

    /// The tag it announced, if any.
    pub(crate) fn tag(&self) -> Option<&str> {
        self.announced
            .get()
            .map(|(_, _, tag)| tag.as_str())
            .filter(|t| !t.is_empty())
    }

    /// Records the md5 a listener holds of `key`.
    pub(crate) fn hold_md5(&self, key: &ConfigKey, md5: &str) {
        lock(&self.md5s).insert(key.clone(), md5.to_owned());
    }

    /// Forgets a config the client no longer listens to.
    pub(crate) fn forget_md5(&self, key: &ConfigKey) {
        lock(&self.md5s).remove(key);
    }

    /// This connection as the admin API reports it.
    fn info(&self) -> crate::clients::ClientInfo {
        let port = self
            .id
            .rsplit_once('_')
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or(0);
        let (version, app_name, _) = self.announced.get().cloned().unwrap_or_default();
        crate::clients::ClientInfo {
            id: self.id.clone(),
            ip: self.remote_ip().to_owned(),
            port,
            version,
            app_name,
            last_active: self.last_active.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    pub(crate) fn mark_registered(&self) {
        self.registered.store(true, Ordering::Release);
    }

    pub(crate) fn touch(&self, now: Millis) {
        self.last_active.fetch_max(now, Ordering::Relaxed);
    }

    /// A fresh id for a server-initiated request.
    pub(crate) fn next_request_id(&self) -> String {
        format!("s{}", self.server_requests.fetch_add(1, Ordering::Relaxed))
    }

    /// Queues a control message (setup ack, detection, reset). Control
    /// messages never wait behind pushes; if even the control queue is
    /// full the client is not reading and detection will drop it.
    pub(crate) fn send_control(&self, payload: Payload) -> bool {
        self.control.try_send(Box::new(payload)).is_ok()
    }

    /// Queues a push, waiting up to `patience` for room (the push queue
    /// is bounded). A client that leaves a full queue unread that long is
    /// not reading its stream: its connection is closed, which removes
    /// what it registered, as a lost client's would be.
    pub(crate) async fn send_push(&self, payload: Payload, patience: Duration) -> bool {
        // The queue has room almost always: no timer is armed for that.
        let payload = match self.pushes.try_send(Box::new(payload)) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(payload)) => payload,
        };
        tokio::select! {
            sent = self.pushes.send(payload) => sent.is_ok(),
            () = self.closed.cancelled() => false,
            () = tokio::time::sleep(patience) => {
                metrics::counter!("understudy_connections_closed_total", "why" => "pushes_unread")
                    .increment(1);
                tracing::warn!(
                    connection = %self.id,
                    queued = self.pushes.max_capacity(),
                    "pushes left unread in a full queue: connection closed"
                );
                self.closed.cancel();
                false
            }
        }
    }

    /// Takes the outgoing side for the bi-stream (once).
    pub(crate) fn take_outbound(&self) -> Option<Outbound> {
        self.outbound
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Counts a new native watch, unless the connection has `max` open:
    /// then the error is how many it has.
    pub(crate) fn open_watch(self: &Arc<Self>, max: usize) -> Result<WatchSlot, usize> {
        let opened = self
            .watches
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            });
        match opened {
            Ok(_) => Ok(WatchSlot(self.clone())),
            Err(open) => Err(open),
        }
    }

    /// Records the answer to a detection probe; `true` if it was one.
    pub(crate) fn detection_answered(&self, request_id: &str) -> bool {
        let mut pending = self.detection.lock().unwrap_or_else(|p| p.into_inner());
        if pending.as_ref().is_some_and(|(id, _)| id == request_id) {
            *pending = None;
            return true;
        }
        false
    }
}

/// One open native watch of a connection; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct WatchSlot(Arc<Conn>);

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0.watches.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The outgoing half of the bi-stream: control messages first, then pushes.
#[derive(Debug)]
pub(crate) struct Outbound {
    control: mpsc::Receiver<Box<Payload>>,
    pushes: mpsc::Receiver<Box<Payload>>,
    closed: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl tokio_stream::Stream for Outbound {
    type Item = Result<Payload, tonic::Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Poll::Ready(Some(p)) = self.control.poll_recv(cx) {
            return Poll::Ready(Some(Ok(*p)));
        }
        if let Poll::Ready(Some(p)) = self.pushes.poll_recv(cx) {
            return Poll::Ready(Some(Ok(*p)));
        }
        // Both queues live as long as the connection; the stream ends only
        // when the connection is closed (what is queued then goes unsent,
        // as the socket goes too).
        if self.closed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

use std::future::Future;

/// The request ids of config change pushes start with this; those of
/// service pushes are bare numbers.
const CONFIG_PUSH: &str = "c";

/// How long a refused connection stays open for its client to read why.
const REFUSED_LINGER: Duration = Duration::from_secs(2);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every open connection.
#[derive(Debug)]
pub(crate) struct Conns {
    node: Node,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    /// The port's connection limits.
    limits: Arc<crate::admission::Connections>,
    next: AtomicU64,
    /// Connections whose socket was dropped, for the cleanup task.
    dropped: mpsc::UnboundedSender<u64>,
    shutting_down: AtomicBool,
}

impl Conns {
    pub(crate) fn new(node: Node) -> (Arc<Self>, mpsc::UnboundedReceiver<u64>) {
        let (dropped, dropped_rx) = mpsc::unbounded_channel();
        let limits = crate::admission::Connections::of("gRPC", node.config());
        let conns = Arc::new(Self {
            node,
            limits,
            open: Mutex::default(),
            next: AtomicU64::new(1),
            dropped,
            shutting_down: AtomicBool::new(false),
        });
        (conns, dropped_rx)
    }

    fn open_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        lock(&self.open)
    }

    /// Registers an accepted socket. One over a connection limit is
    /// accepted too, so its client reads why in the answer to its first
    /// request; it is closed a moment later.
    pub(crate) fn accept(self: &Arc<Self>, stream: TcpStream, remote: SocketAddr) -> TrackedIo {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let (ticket, refused) = match self.limits.admit(remote.ip()) {
            Ok(ticket) => (Some(ticket), None),
            Err(reason) => (None, Some(reason)),
        };
        let now = self.node.now();
        let queue = self.node.config().grpc.push_queue;
        let (control, control_rx) = mpsc::channel(16);
        // One wake-up for the pusher, whichever of the two has a push
        // due, or the connection closed.
        let wake = Arc::new(tokio::sync::Notify::new());
        let (pushes, pushes_rx) = mpsc::channel(queue);
        let closed = CancellationToken::new();
        let id = format!("{now}_{}_{}", remote.ip(), remote.port());
        let conn = Arc::new_cyclic(|me| Conn {
            me: me.clone(),
            pusher: Mutex::default(),
            seq,
            _held: self.node.hold(&id),
            id,
            registered: AtomicBool::new(false),
            last_active: AtomicU64::new(now),
            control,
            pushes,
            outbound: Mutex::new(Some(Outbound {
                control: control_rx,
                pushes: pushes_rx,
                closed: Box::pin(closed.clone().cancelled_owned()),
            })),
            subscriber: Arc::new(Subscriber::with_prefix(seq, "", wake.clone())),
            listener: Arc::new(Subscriber::with_prefix(seq, CONFIG_PUSH, wake)),
            detection: Mutex::new(None),
            closed,
            server_requests: AtomicU64::new(1),
            refused,
            watches: AtomicUsize::new(0),
            announced: std::sync::OnceLock::new(),
            md5s: Mutex::default(),
            user: Mutex::default(),
            fuzzy_services: std::sync::OnceLock::new(),
            fuzzy_configs: std::sync::OnceLock::new(),
            _ticket: ticket,
        });
        if let Some(reason) = &conn.refused {
            tracing::debug!(connection = %conn.id, reason, "connection refused");
            let closed = conn.closed.clone();
            tokio::spawn(async move {
                tokio::time::sleep(REFUSED_LINGER).await;
                closed.cancel();
            });
        } else {
            self.open_map().insert(seq, conn.clone());
            metrics::gauge!("understudy_grpc_connections").increment(1.0);
        }
        TrackedIo {
            io: stream,
            killed: Box::pin(conn.closed.clone().cancelled_owned()),
            conn,
            dropped: self.dropped.clone(),
        }
    }

    /// Closes a connection once: its subscriptions go, and (unless the
    /// server is shutting down) its ephemeral instances are removed, which
    /// pushes the removal to other subscribers.
    pub(crate) async fn close(&self, seq: u64, why: &'static str) {
        let Some(conn) = self.end(seq, why) else {
            return;
        };
        if self.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let op = Op::RemoveOwner {
            owner: conn.owner(&self.node),
            cause: RemovalCause::ConnectionClosed,
        };
        if let Err(e) = self.node.propose(op).await {
            tracing::warn!(connection = %conn.id, error = %e, "instances of a closed connection not removed");
        }
    }

    /// Ends a connection's stream and subscriptions; its instances stay.
    fn end(&self, seq: u64, why: &'static str) -> Option<Arc<Conn>> {
        let conn = self.open_map().remove(&seq)?;
        metrics::gauge!("understudy_grpc_connections").decrement(1.0);
        tracing::debug!(connection = %conn.id, why, "connection closed");
        conn.closed.cancel();
        conn.subscriber.wake().notify_one();
        self.node.state().hub().remove(&conn.subscriber);
        self.node.state().config_hub().remove(&conn.listener);
        self.node.state().fuzzy_services().remove(conn.seq);
        self.node.state().fuzzy_configs().remove(conn.seq);
        self.node.races().closed(&conn.id, self.node.now());
        Some(conn)
    }

    /// Asks every client to reconnect elsewhere, and ends the connections
    /// a moment later (some clients ignore the request). Their instances
    /// stay: at shutdown the node is going away, not the clients; cut off
    /// from the majority, the clients re-register where they reconnect,
    /// which moves the instances in place, and the leader removes what is
    /// left after the owner grace period. Answers how many connections
    /// were ended.
    pub(crate) async fn send_elsewhere(&self, why: &'static str) -> usize {
        let conns: Vec<Arc<Conn>> = self.open_map().values().cloned().collect();
        if conns.is_empty() {
            return 0;
        }
        for conn in &conns {
            send_reset(conn);
        }
        // Let the resets reach the clients before the connections end.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let open: Vec<u64> = self.open_map().keys().copied().collect();
        open.into_iter()
            .filter_map(|seq| self.end(seq, why))
            .count()
    }

    /// Drops every connection at once, as a crash would: no reset request,
    /// no cleanup, their instances stay (owners lost are the leader's
    /// business).
    pub(crate) fn kill_all(&self) {
        self.shutting_down();
        let open: Vec<u64> = self.open_map().keys().copied().collect();
        for seq in open {
            self.end(seq, "node killed");
        }
    }

    /// At shutdown: from now on a closing connection leaves its instances
    /// in place (see [`Conns::send_elsewhere`]).
    pub(crate) fn shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Probes idle connections and closes those that left a probe
    /// unanswered for too long.
    pub(crate) async fn detect(&self) {
        let now = self.node.now();
        let grpc = self.node.config().grpc;
        let conns: Vec<Arc<Conn>> = self.open_map().values().cloned().collect();
        for conn in conns {
            let idle = now.saturating_sub(conn.last_active.load(Ordering::Relaxed));
            let probe = {
                let mut pending = conn.detection.lock().unwrap_or_else(|p| p.into_inner());
                match pending.as_ref() {
                    Some((_, sent))
                        if now.saturating_sub(*sent)
                            >= crate::clock::millis(grpc.detection_timeout) =>
                    {
                        Probe::GiveUp
                    }
                    Some(_) => Probe::Wait,
                    None if idle >= crate::clock::millis(grpc.connection_idle)
                        && conn.is_registered() =>
                    {
                        let id = conn.next_request_id();
                        *pending = Some((id.clone(), now));
                        Probe::Send(id)
                    }
                    None => Probe::Wait,
                }
            };
            match probe {
                Probe::GiveUp => self.close(conn.seq, "no answer to client detection").await,
                Probe::Send(id) => {
                    let request = understudy_proto::nacos_rpc::ServerRequest::new(
                        id,
                        "internal",
                        understudy_proto::nacos_rpc::Empty {},
                    );
                    conn.send_control(understudy_proto::nacos_rpc::seal(
                        "ClientDetectionRequest",
                        &request,
                    ));
                }
                Probe::Wait => {}
            }
        }
    }
}

/// Asks the client to reconnect (to another server, if it knows one).
fn send_reset(conn: &Conn) {
    let request = understudy_proto::nacos_rpc::ServerRequest::new(
        conn.next_request_id(),
        "internal",
        understudy_proto::nacos_rpc::ConnectReset {
            connection_id: conn.id.clone(),
        },
    );
    conn.send_control(understudy_proto::nacos_rpc::seal(
        "ConnectResetRequest",
        &request,
    ));
}

enum Probe {
    Send(String),
    Wait,
    GiveUp,
}

/// The connection info every request on a socket carries.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo(pub(crate) Arc<Conn>);

/// An accepted socket that knows its connection, reports when it is
/// dropped (the client went away), and ends itself when the server closes
/// the connection (ejection, shutdown): some clients ignore a
/// ConnectReset, so the socket itself must go.
#[derive(Debug)]
pub(crate) struct TrackedIo {
    io: TcpStream,
    conn: Arc<Conn>,
    dropped: mpsc::UnboundedSender<u64>,
    killed: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl TrackedIo {
    fn killed(&mut self, cx: &mut Context<'_>) -> bool {
        self.killed.as_mut().poll(cx).is_ready()
    }
}

impl Drop for TrackedIo {
    fn drop(&mut self) {
        let _ = self.dropped.send(self.conn.seq);
    }
}

impl Connected for TrackedIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo(self.conn.clone())
    }
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.killed(cx) {
            return Poll::Ready(Err(std::io::ErrorKind::ConnectionAborted.into()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.killed(cx) {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl crate::clients::Clients for Conns {
    fn connections(&self) -> Vec<crate::clients::ClientInfo> {
        let open: Vec<Arc<Conn>> = self.open_map().values().cloned().collect();
        let mut all: Vec<_> = open
            .iter()
            .filter(|c| c.is_registered())
            .map(|c| c.info())
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    fn subscriptions(&self, id: &str) -> Option<Vec<ServiceKey>> {
        let conn = self.open_map().values().find(|c| c.id == id).cloned()?;
        Some(conn.subscriber.keys())
    }

    fn subscribers(&self, service: &ServiceKey) -> Vec<crate::clients::ClientInfo> {
        let open: Vec<Arc<Conn>> = self.open_map().values().cloned().collect();
        open.iter()
            .filter(|c| c.subscriber.keys().contains(service))
            .map(|c| c.info())
            .collect()
    }

    fn acknowledged(&self, service: &ServiceKey) -> Vec<(crate::clients::ClientInfo, u64)> {
        let open: Vec<Arc<Conn>> = self.open_map().values().cloned().collect();
        let mut all: Vec<_> = open
            .iter()
            .filter_map(|c| Some((c.info(), c.subscriber.acked_revision(service)?)))
            .collect();
        all.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        all
    }

    fn listeners(&self, config: &ConfigKey) -> Vec<(crate::clients::ClientInfo, String)> {
        let open: Vec<Arc<Conn>> = self.open_map().values().cloned().collect();
        open.iter()
            .filter_map(|c| {
                let md5 = lock(&c.md5s).get(config).cloned()?;
                Some((c.info(), md5))
            })
            .collect()
    }

    fn listening(&self, ip: &str) -> Vec<(ConfigKey, String)> {
        let open: Vec<Arc<Conn>> = self.open_map().values().cloned().collect();
        open.iter()
            .filter(|c| c.remote_ip() == ip)
            .flat_map(|c| {
                lock(&c.md5s)
                    .iter()
                    .map(|(k, m)| (k.clone(), m.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}
