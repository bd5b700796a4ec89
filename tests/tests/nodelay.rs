//! Every port sends without Nagle's delay: the sockets each listener
//! accepts (HTTP; gRPC, which carries the Nacos and the native APIs;
//! raft) and the raft links the nodes open to each other carry
//! `TCP_NODELAY`, read back from the kernel. A small request or answer on
//! a socket without it can wait out the peer's delayed ACK (up to 40 ms
//! on Linux): the raft port once lacked it, and a 3-node cluster wrote
//! at a fifth of one node's speed. The TLS ports are checked in tls.rs.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, sockets, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_port_and_raft_link_sends_without_delay() -> anyhow::Result<()> {
    let servers = Server::start_cluster(3, Settings::default()).await?;
    let http = reqwest::Client::new();
    let mut kept = Vec::new();
    let mut clients = Vec::new();
    for (n, server) in servers.iter().enumerate() {
        // A write through each node: a follower forwards it over its raft
        // link to the leader, so every raft port has accepted a link.
        let reply = http
            .post(server.url("/nacos/v1/ns/instance"))
            .form(&[
                ("serviceName", "nodelay"),
                ("ip", "10.9.0.1"),
                ("port", &(8000 + n).to_string()),
                ("ephemeral", "false"),
            ])
            .send()
            .await?;
        assert_eq!(reply.text().await?, "ok");
        // A kept-alive HTTP/1.1 connection, answered once.
        let mut raw = tokio::net::TcpStream::connect(server.http).await?;
        raw.write_all(b"GET /nacos/v1/console/health/liveness HTTP/1.1\r\nhost: test\r\n\r\n")
            .await?;
        let mut answer = [0u8; 64];
        let read = raw.read(&mut answer).await?;
        assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
        kept.push(raw);
        // A Nacos gRPC connection, set up and answered.
        let grpc = RawClient::connect(server.grpc, None).await?;
        grpc.query("nodelay").await?;
        clients.push(grpc);
    }
    // Every node has applied the three writes.
    for server in &servers {
        let applied = eventually(Duration::from_secs(10), || async {
            let info: Value = server.instance_list("serviceName=nodelay").await;
            info["hosts"].as_array().map_or(0, Vec::len) == 3
        });
        assert!(applied.await, "{} did not apply every write", server.http);
    }
    sockets::check_nodelay(&servers).await?;
    drop(kept);
    drop(clients);
    for server in servers {
        server.stop().await?;
    }
    Ok(())
}
