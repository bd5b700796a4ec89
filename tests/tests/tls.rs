//! TLS on every port: HTTPS and gRPC over TLS to a single node (plain
//! text and clients that do not trust the CA refused), and a 3-node
//! cluster whose nodes verify each other on the raft port.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::Value;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::ListNamespacesRequest;
use understudy_server::config::Settings;
use understudy_tests::{eventually, Server};

/// A CA and certificates it signed for 127.0.0.1, written as PEM files.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        std::fs::write(dir.path().join("ca.pem"), ca.pem())?;
        let key = KeyPair::generate()?;
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        let cert = params.signed_by(&key, &ca)?;
        std::fs::write(dir.path().join("node.pem"), cert.pem())?;
        std::fs::write(dir.path().join("node.key"), key.serialize_pem())?;
        Ok(Self { dir })
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn settings(&self) -> Settings {
        Settings {
            tls_cert: Some(self.path("node.pem")),
            tls_key: Some(self.path("node.key")),
            tls_ca: Some(self.path("ca.pem")),
            ..Settings::default()
        }
    }

    fn http(&self) -> anyhow::Result<reqwest::Client> {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(self.path("ca.pem"))?)?;
        Ok(reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()?)
    }
}

async fn grpc(
    server: &Server,
    ca: &Path,
) -> anyhow::Result<RegistryClient<tonic::transport::Channel>> {
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(std::fs::read(ca)?))
        .domain_name("127.0.0.1");
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{}", server.grpc))?
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(RegistryClient::new(channel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_https_and_grpc_over_tls_and_refuses_plain_text() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    let server = Server::start(pki.settings()).await?;
    assert_eq!(server.scheme, "https");
    let http = pki.http()?;
    let reply = http
        .post(server.url("/nacos/v1/ns/instance"))
        .form(&[
            ("serviceName", "secure"),
            ("ip", "10.5.0.1"),
            ("port", "443"),
        ])
        .send()
        .await?;
    assert_eq!(reply.text().await?, "ok");
    let info: Value = http
        .get(server.url("/nacos/v1/ns/instance/list?serviceName=secure"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(info["hosts"][0]["ip"], "10.5.0.1");

    // Plain HTTP to the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/health", server.http))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    // A client that does not trust the CA refuses the server.
    let untrusting = reqwest::Client::new()
        .get(server.url("/health"))
        .send()
        .await;
    assert!(
        untrusting.is_err(),
        "a certificate of an unknown CA was accepted"
    );

    let namespaces = grpc(&server, &pki.path("ca.pem"))
        .await?
        .list_namespaces(ListNamespacesRequest::default())
        .await?
        .into_inner()
        .namespaces;
    assert!(namespaces.iter().any(|n| n.id == "public"));
    let plain = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))?
        .connect()
        .await;
    if let Ok(channel) = plain {
        let answer = RegistryClient::new(channel)
            .list_namespaces(ListNamespacesRequest::default())
            .await;
        assert!(answer.is_err(), "plain gRPC was answered");
    }

    // ctl, given the CA: HTTPS for listings, gRPC over TLS for watches.
    let ca = pki.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let base = server.url("");
    let grpc = format!("https://{}", server.grpc);
    let words = [
        "ls",
        "instances",
        "secure",
        "-o",
        "json",
        "--server",
        &base,
        "--ca",
        ca,
    ];
    let mut out = Vec::new();
    understudy_server::ctl::run(&understudy_server::ctl::parse(words)?, &mut out).await?;
    let listed: Value = serde_json::from_slice(&out)?;
    assert_eq!(listed[0]["ip"], "10.5.0.1");
    let words = [
        "watch", "secure", "--count", "1", "-o", "json", "--server", &base, "--grpc", &grpc,
        "--ca", ca,
    ];
    let mut out = Vec::new();
    understudy_server::ctl::run(&understudy_server::ctl::parse(words)?, &mut out).await?;
    let snapshot: Value = serde_json::from_slice(&out)?;
    assert_eq!(snapshot["instances"][0]["ip"], "10.5.0.1");

    // The bundled client, given the CA, watches over TLS.
    let client = understudy_client::Client::builder()
        .endpoint(format!("https://{}", server.grpc), None)
        .tls_ca_pem(std::fs::read(pki.path("ca.pem"))?)
        .build()?;
    let key = understudy_client::core::ServiceKey::parse("", "", "secure")?;
    let directory = client.directory(key);
    tokio::time::timeout(Duration::from_secs(5), directory.wait_until_ready()).await??;
    assert_eq!(directory.instances()[0].ip, "10.5.0.1");
    client.shutdown().await;
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nodes_verify_each_other_over_tls() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    // Every node serves the same certificate: signed by the CA and naming
    // 127.0.0.1, which is what the peers check.
    let servers = Server::start_cluster(3, pki.settings()).await?;
    let http = pki.http()?;
    // A write through every node (a follower forwards its own over TLS)
    // and a gRPC call to each, so every port has accepted a connection.
    let mut clients = Vec::new();
    for (n, server) in servers.iter().enumerate() {
        let reply = http
            .post(server.url("/nacos/v1/ns/instance"))
            .form(&[
                ("serviceName", "replicated"),
                ("ip", "10.5.1.1"),
                ("port", &(443 + n).to_string()),
                ("ephemeral", "false"),
            ])
            .send()
            .await?;
        assert_eq!(reply.text().await?, "ok");
        let mut client = grpc(server, &pki.path("ca.pem")).await?;
        client
            .list_namespaces(ListNamespacesRequest::default())
            .await?;
        clients.push(client);
    }
    for server in &servers {
        let url = server.url("/nacos/v1/ns/instance/list?serviceName=replicated");
        assert!(
            eventually(Duration::from_secs(5), || async {
                let text = match http.get(&url).send().await {
                    Ok(reply) => reply.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                text.contains("10.5.1.1")
            })
            .await,
            "the registration never reached {}",
            server.http
        );
    }
    // The TLS ports too send without Nagle's delay (see nodelay.rs).
    understudy_tests::sockets::check_nodelay(&servers).await?;
    drop(clients);
    for server in servers {
        server.stop().await?;
    }
    Ok(())
}
