//! Legacy UDP push for v1 HTTP clients (Java 1.x, nacos-sdk-python 0.x,
//! npm `nacos`): a client that lists a service with `udpPort` becomes its
//! subscriber, and each change is sent as a `dom` datagram, acknowledged
//! with `push-ack` and retried until acknowledged (a few times). The
//! subscription lapses when the client stops listing.
//!
//! Datagrams go to the address the list request came from (with the
//! client's `udpPort`), never to an address the request merely names:
//! otherwise anyone could aim pushes at a third party.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use understudy_core::{Millis, ServiceKey};
use understudy_proto::nacos::{NameStyle, ServiceInfo, View};

use crate::node::{Node, UdpListeners};
use crate::push::Subscriber;

/// A UDP subscription lapses this long after its client last listed.
const LAPSE_MS: Millis = 30_000;
/// Datagrams this large or larger are gzip-compressed, as in Nacos.
const COMPRESS_FROM: usize = 1024;

/// The UDP push service of a node.
#[derive(Debug)]
pub(crate) struct UdpPush {
    socket: Arc<UdpSocket>,
    clients: Mutex<HashMap<SocketAddr, Arc<Client>>>,
    next_id: AtomicU64,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

#[derive(Debug)]
struct Client {
    addr: SocketAddr,
    subscriber: Arc<Subscriber<ServiceKey>>,
    last_listed: AtomicU64,
    gone: CancellationToken,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Datagram<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    data: String,
    last_ref_time: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ack {
    #[serde(rename = "type")]
    kind: String,
    last_ref_time: u64,
}

impl UdpPush {
    /// Binds the push socket on `ip` (any port) and starts reading acks.
    pub(crate) fn start(
        ip: std::net::IpAddr,
        tasks: &TaskTracker,
        cancel: CancellationToken,
    ) -> std::io::Result<Arc<Self>> {
        let socket = std::net::UdpSocket::bind(SocketAddr::new(ip, 0))?;
        socket.set_nonblocking(true)?;
        let push = Arc::new(Self {
            socket: Arc::new(UdpSocket::from_std(socket)?),
            clients: Mutex::default(),
            next_id: AtomicU64::new(1 << 40),
            tasks: tasks.clone(),
            cancel,
        });
        tasks.spawn(read_acks(push.clone()));
        Ok(push)
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Arc<Client>>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl UdpListeners for UdpPush {
    /// A client listed `key` and wants pushes at `addr`. Installs (or
    /// refreshes) the subscription and renders the answer through it, so
    /// answer and pushes share one `lastRefTime` sequence.
    fn listen(
        self: Arc<Self>,
        node: &Node,
        addr: SocketAddr,
        key: &ServiceKey,
        view: View<'_>,
    ) -> ServiceInfo {
        let now = node.now();
        let client = {
            let mut clients = self.clients();
            clients
                .entry(addr)
                .or_insert_with(|| {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let client = Arc::new(Client {
                        addr,
                        subscriber: Arc::new(Subscriber::new(id)),
                        last_listed: AtomicU64::new(now),
                        gone: self.cancel.child_token(),
                    });
                    self.tasks
                        .spawn(push(node.clone(), self.clone(), client.clone()));
                    client
                })
                .clone()
        };
        client.last_listed.fetch_max(now, Ordering::Relaxed);
        let hub = node.state().hub();
        let max = node.config().grpc.max_subscriptions_per_connection;
        let subscribed = hub.subscribe(
            &client.subscriber,
            key,
            view.clusters_raw,
            view.clusters.to_vec(),
            max,
        );
        if subscribed.is_err() {
            // The list is answered; this service is just not pushed to it.
            metrics::counter!("understudy_subscriptions_refused_total", "via" => "udp")
                .increment(1);
            return render(node, key, view, now);
        }
        let info = client
            .subscriber
            .render_now(key, view.clusters_raw, now, |target| {
                render(node, target.key, view, target.ref_time)
            })
            .expect("the subscription was just installed");
        client.subscriber.release(key, view.clusters_raw);
        info
    }

    /// How many UDP subscribers there are.
    fn len(&self) -> usize {
        self.clients().len()
    }
}

fn render(node: &Node, key: &ServiceKey, view: View<'_>, ref_time: Millis) -> ServiceInfo {
    let service = node.registry().service(key);
    ServiceInfo::render(key, service.as_deref(), NameStyle::Grouped, view, ref_time)
}

fn encode(info: &ServiceInfo, id: u64) -> Vec<u8> {
    let data = serde_json::to_string(info).expect("a ServiceInfo serializes");
    let datagram = Datagram {
        kind: "dom",
        data,
        last_ref_time: id,
    };
    let bytes = serde_json::to_vec(&datagram).expect("a datagram serializes");
    if bytes.len() < COMPRESS_FROM {
        return bytes;
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    match gz.write_all(&bytes).and_then(|()| gz.finish()) {
        Ok(compressed) => compressed,
        Err(_) => bytes,
    }
}

async fn read_acks(push: Arc<UdpPush>) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let received = tokio::select! {
            () = push.cancel.cancelled() => return,
            received = push.socket.recv_from(&mut buf) => received,
        };
        let Ok((len, from)) = received else {
            continue;
        };
        let Ok(ack) = serde_json::from_slice::<Ack>(&buf[..len]) else {
            continue;
        };
        if ack.kind != "push-ack" {
            continue;
        }
        let client = push.clients().get(&from).cloned();
        if let Some(client) = client {
            client
                .subscriber
                .ack(&ack.last_ref_time.to_string(), true, 0, 0);
        }
    }
}

/// Pushes due subscriptions of one UDP client until it lapses.
async fn push(node: Node, service: Arc<UdpPush>, client: Arc<Client>) {
    let grpc = node.config().grpc;
    let subscriber = client.subscriber.clone();
    loop {
        let now = node.now();
        if now.saturating_sub(client.last_listed.load(Ordering::Relaxed)) >= LAPSE_MS {
            break;
        }
        subscriber.expire(
            now,
            crate::clock::millis(grpc.push_timeout),
            crate::clock::millis(grpc.push_retry),
        );
        let datagrams = subscriber.due_pushes(now, |request_id, target| {
            let id: u64 = request_id.parse().unwrap_or_default();
            let view = View {
                clusters_raw: target.clusters_raw,
                clusters: target.clusters,
                healthy_only: false,
            };
            // v1 listeners answer no revision anyone waits on.
            (
                encode(&render(&node, target.key, view, target.ref_time), id),
                0,
            )
        });
        for datagram in datagrams {
            if !node.push_passes_faults().await {
                continue;
            }
            if let Err(e) = service.socket.send_to(&datagram, client.addr).await {
                tracing::debug!(to = %client.addr, error = %e, "UDP push not sent");
            }
            metrics::counter!("understudy_udp_pushes_sent_total").increment(1);
        }
        let lapse_at = client
            .last_listed
            .load(Ordering::Relaxed)
            .saturating_add(LAPSE_MS);
        let wake_at = subscriber
            .next_timer(crate::clock::millis(grpc.push_timeout))
            .map_or(lapse_at, |t| t.min(lapse_at));
        tokio::select! {
            () = client.gone.cancelled() => break,
            () = subscriber.wake().notified() => {}
            () = tokio::time::sleep_until(node.clock().instant_at(wake_at)) => {}
        }
    }
    node.state().hub().remove(&subscriber);
    service.clients().remove(&client.addr);
}
