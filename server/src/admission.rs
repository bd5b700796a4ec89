//! Admission: the connection limits of a client port, and load shedding.
//!
//! Each client port (HTTP, gRPC) holds at most `max_connections` open
//! connections, at most `max_connections_per_ip` of them from one client
//! address; a connection over either is told why and closed.
//!
//! Load shedding: a node works on at most `max_concurrent_requests`
//! ordinary requests (registrations, queries, subscriptions, config calls)
//! at once; one more waits up to `request_queue_timeout_ms` for a slot and
//! is then refused as busy, so a flood is answered at once instead of
//! queueing without bound. What keeps registrations alive is never held
//! here: heartbeats, deregistrations, and the probes and health checks
//! that tell a client its server is there. An overloaded registry then
//! sheds new work but does not start expiring healthy instances.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The request slots of a node.
#[derive(Debug)]
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    max: usize,
    wait: Duration,
}

/// No slot came free in time.
#[derive(Debug, Clone, Error)]
#[error(
    "the server is busy: {max} requests are in progress (max_concurrent_requests); retry later"
)]
pub(crate) struct Busy {
    max: usize,
}

/// A slot, held while the request is worked on.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    pub(crate) fn new(max: usize, wait: Duration) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            max,
            wait,
        }
    }

    /// Takes a slot, waiting up to the queue timeout; `api` labels the
    /// refusals.
    pub(crate) async fn enter(&self, api: &'static str) -> Result<Slot, Busy> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(Slot { _permit: permit });
        }
        match tokio::time::timeout(self.wait, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Slot { _permit: permit }),
            _ => {
                metrics::counter!("understudy_requests_shed_total", "api" => api).increment(1);
                Err(Busy { max: self.max })
            }
        }
    }

    /// Slots in use now.
    pub(crate) fn in_use(&self) -> usize {
        self.max - self.slots.available_permits()
    }
}

/// The open connections of one client port.
#[derive(Debug)]
pub(crate) struct Connections {
    /// The port's name, for errors and metrics.
    port: &'static str,
    max: usize,
    max_per_ip: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// An admitted connection; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct Ticket {
    connections: Arc<Connections>,
    ip: IpAddr,
}

impl Connections {
    /// The budget of the client port named `port`, from the config.
    pub(crate) fn of(port: &'static str, config: &crate::ValidConfig) -> Arc<Self> {
        Self::new(
            port,
            config.admission.max_connections,
            config.admission.max_connections_per_ip,
        )
    }

    fn new(port: &'static str, max: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Self {
            port,
            max,
            max_per_ip,
            open: Mutex::default(),
        })
    }

    fn open(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `ip`, or says which limit it is over.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, String> {
        let mut open = self.open();
        let refused = if open.total >= self.max {
            Some((
                "max_connections",
                format!(
                    "the {} port has {} connections: over the limit of {} (max_connections); retry later or use another server",
                    self.port, open.total, self.max
                ),
            ))
        } else {
            let from_ip = open.per_ip.get(&ip).copied().unwrap_or(0);
            (from_ip >= self.max_per_ip).then(|| {
                (
                    "max_connections_per_ip",
                    format!(
                        "{ip} has {from_ip} connections to the {} port: over the limit of {} (max_connections_per_ip)",
                        self.port, self.max_per_ip
                    ),
                )
            })
        };
        if let Some((limit, reason)) = refused {
            metrics::counter!("understudy_connections_refused_total", "port" => self.port, "limit" => limit)
                .increment(1);
            return Err(reason);
        }
        open.total += 1;
        *open.per_ip.entry(ip).or_default() += 1;
        Ok(Ticket {
            connections: self.clone(),
            ip,
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.connections.open();
        open.total -= 1;
        if let Some(from_ip) = open.per_ip.get_mut(&self.ip) {
            *from_ip -= 1;
            if *from_ip == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

/// An HTTP listener under its port's connection limits: a connection over
/// them is answered `503` with the reason and closed, unread.
pub(crate) struct Limited<L> {
    inner: L,
    connections: Arc<Connections>,
}

impl<L> Limited<L> {
    pub(crate) fn new(inner: L, connections: Arc<Connections>) -> Self {
        Self { inner, connections }
    }
}

impl<L> axum::serve::Listener for Limited<L>
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    type Io = Counted<L::Io>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, addr) = self.inner.accept().await;
            match self.connections.admit(addr.ip()) {
                Ok(ticket) => {
                    return (
                        Counted {
                            io,
                            _ticket: ticket,
                        },
                        addr,
                    )
                }
                Err(reason) => {
                    tokio::spawn(refuse(io, reason));
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A client's address, as axum's connection info for a [`Limited`]
/// listener: handlers read `ConnectInfo<SocketAddr>`, which
/// [`peer_as_socket_addr`] puts in place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(std::net::SocketAddr);

impl<L> axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Limited<L>>> for Peer
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, Limited<L>>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// Gives a request the `ConnectInfo<SocketAddr>` a bare listener gives.
pub(crate) async fn peer_as_socket_addr(
    mut request: axum::extract::Request,
) -> axum::extract::Request {
    use axum::extract::ConnectInfo;
    if let Some(ConnectInfo(Peer(addr))) = request.extensions().get::<ConnectInfo<Peer>>().copied()
    {
        request.extensions_mut().insert(ConnectInfo(addr));
    }
    request
}

/// Answers a refused HTTP connection with why, then closes it.
async fn refuse<I: tokio::io::AsyncWrite + Unpin>(mut io: I, reason: String) {
    use tokio::io::AsyncWriteExt as _;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain;charset=UTF-8\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{reason}",
        reason.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        io.write_all(answer.as_bytes()).await?;
        io.shutdown().await
    })
    .await;
}

/// An admitted connection's socket, holding its place until dropped.
pub(crate) struct Counted<I> {
    io: I,
    _ticket: Ticket,
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counted<I> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_beyond_the_slots_waits_then_is_refused_and_a_freed_slot_admits_again() {
        let admission = Admission::new(2, Duration::from_millis(100));
        let first = admission.enter("test").await.unwrap();
        let _second = admission.enter("test").await.unwrap();
        assert_eq!(admission.in_use(), 2);
        let refused = admission.enter("test").await.unwrap_err();
        assert!(refused.to_string().contains("max_concurrent_requests"));
        // A slot freed while waiting is taken.
        let waiting = admission.enter("test");
        let free = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(first);
        };
        let (admitted, ()) = tokio::join!(waiting, free);
        assert!(admitted.is_ok());
    }

    #[test]
    fn connections_are_limited_in_all_and_per_address_and_a_dropped_ticket_frees_its_place() {
        let connections = Connections::new("test", 3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = connections.admit(a).unwrap();
        let _a2 = connections.admit(a).unwrap();
        let refused = connections.admit(a).unwrap_err();
        assert!(refused.contains("10.0.0.1") && refused.contains("(max_connections_per_ip)"));
        let _b1 = connections.admit(b).unwrap();
        let refused = connections.admit(b).unwrap_err();
        assert!(refused.contains("(max_connections)"), "{refused}");
        drop(a1);
        connections.admit(b).unwrap();
    }
}
