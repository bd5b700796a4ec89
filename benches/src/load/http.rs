//! A lean HTTP/1.1 client for load: one kept-alive connection per
//! client, requests written by hyper, answers read whole.

use std::net::SocketAddr;

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;

/// One kept-alive connection.
pub struct HttpConn {
    sender: SendRequest<Empty<Bytes>>,
    addr: SocketAddr,
    host: String,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for HttpConn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl HttpConn {
    /// Opens a connection to `addr`.
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        let (sender, driver) = Self::open(addr).await?;
        Ok(Self {
            sender,
            addr,
            host: addr.to_string(),
            driver,
        })
    }

    async fn open(
        addr: SocketAddr,
    ) -> anyhow::Result<(SendRequest<Empty<Bytes>>, tokio::task::JoinHandle<()>)> {
        let socket = tokio::net::TcpStream::connect(addr).await?;
        socket.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(socket)).await?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok((sender, driver))
    }

    /// Sends `method path_and_query` with an empty body; returns the
    /// status and the body.
    pub async fn send(
        &mut self,
        method: hyper::Method,
        path_and_query: &str,
    ) -> anyhow::Result<(hyper::StatusCode, Bytes)> {
        // A server may close a kept-alive connection after so many
        // requests (Tomcat, so Nacos, after 100): open another, as HTTP
        // clients do.
        if self.sender.is_closed() || self.sender.ready().await.is_err() {
            let (sender, driver) = Self::open(self.addr).await?;
            self.driver.abort();
            self.sender = sender;
            self.driver = driver;
            self.sender.ready().await?;
        }
        let request = hyper::Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(hyper::header::HOST, &self.host)
            .header("User-Agent", "Nacos-Java-Client:v1.4.6")
            .body(Empty::new())?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}
