//! TLS on the ports, from the PEM files of the config (`tls_cert`,
//! `tls_key`, `tls_ca`): the HTTP port through rustls (an axum listener
//! that hands over connections once their handshake is done), the gRPC
//! port and the raft port through tonic's own rustls support. On the raft
//! port both sides present their certificate and check the other's
//! against `tls_ca`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::config::TlsConfig;

/// How long a client may take over its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections whose handshakes are under way at once, before accepting
/// waits.
const PENDING_HANDSHAKES: usize = 256;

/// The rustls server configuration of the HTTP port.
pub(crate) fn http_config(tls: &TlsConfig) -> std::io::Result<Arc<rustls::ServerConfig>> {
    let invalid = |what: &str, e: &dyn std::fmt::Display| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what}: {e}"))
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&tls.cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid("tls_cert", &e))?;
    let key = PrivateKeyDer::from_pem_slice(&tls.key_pem).map_err(|e| invalid("tls_key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid("tls_cert and tls_key", &e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The gRPC port's TLS.
pub(crate) fn grpc_config(tls: &TlsConfig) -> ServerTlsConfig {
    ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem))
}

/// The raft port's TLS: this node's certificate, and peers' checked
/// against the CA.
pub(crate) fn raft_server_config(tls: &TlsConfig) -> ServerTlsConfig {
    let config = grpc_config(tls);
    match &tls.ca_pem {
        Some(ca) => config.client_ca_root(Certificate::from_pem(ca)),
        None => config,
    }
}

/// How this node calls a peer's raft port at `host`.
pub(crate) fn raft_client_config(tls: &TlsConfig, host: &str) -> ClientTlsConfig {
    let config = ClientTlsConfig::new()
        .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem))
        .domain_name(host);
    match &tls.ca_pem {
        Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
        None => config,
    }
}

/// A TLS listener for axum: a task accepts TCP connections and runs each
/// handshake on its own task (so a slow client holds up no one), and
/// `accept` hands over the connections whose handshake succeeded.
pub(crate) struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    _accepting: tokio_util::task::AbortOnDropHandle<()>,
}

impl TlsListener {
    /// Serves TLS on `listener` with `config`.
    pub(crate) fn new(
        listener: TcpListener,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (tx, ready) = mpsc::channel(PENDING_HANDSHAKES);
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, as axum does.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // As on a plain port: no answer waits for a delayed ACK.
                let _ = stream.set_nodelay(true);
                let Ok(permit) = tx.clone().reserve_owned().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            permit.send((tls, peer));
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            ready,
            local,
            _accepting: tokio_util::task::AbortOnDropHandle::new(accepting),
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
