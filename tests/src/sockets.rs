//! The TCP sockets this process holds, read back from the kernel: the
//! addresses each one joins and whether it sends at once (`TCP_NODELAY`).
//! Each descriptor is copied with `pidfd_getfd` (a process may copy its
//! own without privileges), so reading one leaves the original alone.

use std::net::SocketAddr;

use rustix::net::{sockopt, AddressFamily, SocketType};
use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};

/// One TCP socket of this process.
#[derive(Debug, Clone, Copy)]
pub struct TcpSocket {
    /// Its own address.
    pub local: SocketAddr,
    /// The other end; `None` for a listener.
    pub peer: Option<SocketAddr>,
    /// Whether `TCP_NODELAY` is set.
    pub nodelay: bool,
}

/// Every TCP socket this process holds now.
pub fn tcp_sockets() -> anyhow::Result<Vec<TcpSocket>> {
    let me = pidfd_open(getpid(), PidfdFlags::empty())?;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        // A descriptor closed since the listing is simply gone.
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(number) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fd) = pidfd_getfd(&me, number, PidfdGetfdFlags::empty()) else {
            continue;
        };
        let inet = matches!(
            sockopt::socket_domain(&fd)?,
            AddressFamily::INET | AddressFamily::INET6
        );
        if !inet || sockopt::socket_type(&fd)? != SocketType::STREAM {
            continue;
        }
        let local = SocketAddr::try_from(rustix::net::getsockname(&fd)?)?;
        let peer = rustix::net::getpeername(&fd)
            .ok()
            .flatten()
            .and_then(|addr| SocketAddr::try_from(addr).ok());
        found.push(TcpSocket {
            local,
            peer,
            nodelay: sockopt::tcp_nodelay(&fd)?,
        });
    }
    Ok(found)
}

/// The sockets accepted on `listener` (connected, with it as their own
/// address).
pub fn accepted_on(listener: SocketAddr) -> anyhow::Result<Vec<TcpSocket>> {
    Ok(tcp_sockets()?
        .into_iter()
        .filter(|s| s.local == listener && s.peer.is_some())
        .collect())
}

/// The sockets this process opened to `server`.
pub fn connected_to(server: SocketAddr) -> anyhow::Result<Vec<TcpSocket>> {
    Ok(tcp_sockets()?
        .into_iter()
        .filter(|s| s.peer == Some(server))
        .collect())
}

/// Checks every port of every node in `servers`: the sockets accepted on
/// its HTTP, gRPC and raft listeners, and those the nodes opened to each
/// other's raft ports, are all there and all carry `TCP_NODELAY`. Each
/// port must have been used once (a request answered) before. A socket
/// caught between its connect and the option being set (a raft link
/// reconnecting, a test beside this one in the process) is given up to
/// 2 s to get it: only a socket that stays without it fails the check.
pub async fn check_nodelay(servers: &[crate::Server]) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match check_nodelay_now(servers) {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}

fn check_nodelay_now(servers: &[crate::Server]) -> anyhow::Result<()> {
    for (n, server) in servers.iter().enumerate() {
        let mut ports = vec![("HTTP", server.http), ("gRPC", server.grpc)];
        ports.extend(server.raft.map(|raft| ("raft", raft)));
        for (name, address) in ports {
            let accepted = accepted_on(address)?;
            anyhow::ensure!(
                !accepted.is_empty(),
                "node {n}: no socket accepted on its {name} port {address}"
            );
            for socket in accepted {
                anyhow::ensure!(
                    socket.nodelay,
                    "node {n}: a socket accepted on its {name} port {address} from {:?} has no TCP_NODELAY",
                    socket.peer
                );
            }
            if name == "raft" {
                let opened = connected_to(address)?;
                anyhow::ensure!(
                    !opened.is_empty(),
                    "node {n}: no raft link opened to {address}"
                );
                for socket in opened {
                    anyhow::ensure!(
                        socket.nodelay,
                        "a raft link from {} to node {n} at {address} has no TCP_NODELAY",
                        socket.local
                    );
                }
            }
        }
    }
    Ok(())
}
