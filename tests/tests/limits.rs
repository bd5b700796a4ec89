//! Every configured limit, hit on purpose: the caller gets a clear error
//! naming the setting, nothing is half-written, and the server goes on
//! serving everyone else.

use std::time::Duration;

use serde_json::{json, Value};
use tokio_stream::StreamExt as _;
use understudy_proto::grpc::bi_request_stream_client::BiRequestStreamClient;
use understudy_proto::grpc::request_client::RequestClient;
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_rpc::{seal, Envelope};
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::WatchRequest;
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

const OVER_THRESHOLD: i64 = 503;

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// Status and body of an HTTP call.
async fn call(method: reqwest::Method, url: String, form: &[(&str, &str)]) -> (u16, String) {
    let reply = http()
        .request(method, url)
        .form(form)
        .send()
        .await
        .expect("the server answers");
    let status = reply.status().as_u16();
    (status, reply.text().await.unwrap_or_default())
}

async fn register_http(server: &Server, service: &str, ip: &str, port: u16) -> (u16, String) {
    let port = port.to_string();
    call(
        reqwest::Method::POST,
        server.url("/nacos/v1/ns/instance"),
        &[("serviceName", service), ("ip", ip), ("port", &port)],
    )
    .await
}

/// A new client, once the node has room for it (a closed connection is
/// cleaned up a moment after its socket goes).
async fn connect_when_room(server: &Server) -> RawClient {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match RawClient::connect(server.grpc, None).await {
            Ok(client) => return client,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                panic!("no room for a connection within 5 s: {e:#}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The server still does its job: a registration is listed, and a new
/// gRPC client connects and queries.
async fn assert_healthy(server: &Server) {
    // Connections just closed by the test free their places a moment later.
    assert!(
        eventually(Duration::from_secs(5), || async {
            http()
                .get(server.url("/nacos/v1/console/health/readiness"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await,
        "the HTTP port answers"
    );
    let (status, body) = register_http(server, "health-probe", "10.9.9.9", 9).await;
    assert_eq!(status, 200, "{body}");
    let listed = server.instance_list("serviceName=health-probe").await;
    assert_eq!(listed["hosts"][0]["ip"], "10.9.9.9", "{listed}");
    let client = RawClient::connect(server.grpc, None)
        .await
        .expect("a new gRPC client connects");
    assert_eq!(
        client.query("health-probe").await.unwrap(),
        vec!["10.9.9.9:9".to_owned()]
    );
}

/// The answer to a ServerCheck on a fresh connection: its code and message.
async fn server_check(server: &Server) -> (i64, String) {
    let mut unary = RequestClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let answer = unary
        .request(seal("ServerCheckRequest", &json!({"headers":{}})))
        .await
        .unwrap()
        .into_inner();
    let body: Value = Envelope::open(answer).decode().unwrap();
    (
        body["errorCode"].as_i64().unwrap_or(0),
        body["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn connections_over_the_node_limit_are_refused_by_name_until_one_closes() {
    let server = Server::start(Settings {
        max_connections: Some(2),
        ..Settings::default()
    })
    .await
    .unwrap();
    let first = RawClient::connect(server.grpc, None).await.unwrap();
    let second = RawClient::connect(server.grpc, None).await.unwrap();
    let (code, message) = server_check(&server).await;
    assert_eq!(code, OVER_THRESHOLD, "{message}");
    assert!(message.contains("(max_connections)"), "{message}");
    // A client that opens its stream first is told the same, as a status.
    let refused = match RawClient::connect(server.grpc, None).await {
        Ok(_) => panic!("a third connection was admitted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(refused.contains("max_connections"), "{refused}");
    // The admitted clients are unaffected.
    first.register("held", "10.0.0.1", 80).await.unwrap();
    assert_eq!(
        second.query("held").await.unwrap(),
        vec!["10.0.0.1:80".to_owned()]
    );
    drop(second);
    assert!(
        eventually(Duration::from_secs(5), || async {
            RawClient::connect(server.grpc, None).await.is_ok()
        })
        .await,
        "a closed connection makes room"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn connections_over_the_per_ip_limit_are_refused_by_name_and_the_server_stays_healthy() {
    let server = Server::start(Settings {
        max_connections_per_ip: Some(3),
        ..Settings::default()
    })
    .await
    .unwrap();
    let held: Vec<RawClient> = vec![
        RawClient::connect(server.grpc, None).await.unwrap(),
        RawClient::connect(server.grpc, None).await.unwrap(),
    ];
    // The third connection is the health check's client.
    assert_healthy(&server).await;
    let third = connect_when_room(&server).await;
    let (code, message) = server_check(&server).await;
    assert_eq!(code, OVER_THRESHOLD, "{message}");
    assert!(
        message.contains("127.0.0.1") && message.contains("(max_connections_per_ip)"),
        "{message}"
    );
    // The native API on the same port refuses the same way.
    let mut native = RegistryClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let status = native
        .list_namespaces(understudy_proto::native::ListNamespacesRequest {})
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("max_connections_per_ip"),
        "{status:?}"
    );
    // The HTTP port has its own budget: three idle connections fill it.
    let idle: Vec<tokio::net::TcpStream> = idle_connections(server.http, 3).await;
    let mut refused = tokio::net::TcpStream::connect(server.http).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_string(&mut refused, &mut answer),
    )
    .await
    .expect("the refusal is written and the connection closed")
    .unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 503")
            && answer.contains("retry-after: 1")
            && answer.contains("the HTTP port")
            && answer.contains("(max_connections_per_ip)"),
        "{answer}"
    );
    drop(idle);
    drop(third);
    drop(held);
    assert!(
        eventually(Duration::from_secs(5), || async {
            server_check(&server).await.0 == 0
        })
        .await,
        "closed connections make room"
    );
    assert_healthy(&server).await;
    server.stop().await.unwrap();
}

/// `n` idle connections to `addr`.
async fn idle_connections(addr: std::net::SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut open = Vec::new();
    for _ in 0..n {
        open.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    open
}

#[tokio::test]
async fn subscriptions_over_the_per_connection_limit_are_refused_and_the_held_ones_still_push() {
    let server = Server::start(Settings {
        max_subscriptions_per_connection: Some(2),
        ..Settings::default()
    })
    .await
    .unwrap();
    let client = RawClient::connect(server.grpc, None).await.unwrap();
    client.subscribe("sub-a").await.unwrap();
    client.subscribe("sub-b").await.unwrap();
    // Subscribing again to what it holds is not growth.
    client.subscribe("sub-a").await.unwrap();
    let (kind, body) = client
        .call(
            "SubscribeServiceRequest",
            json!({"headers":{},"namespace":"public","serviceName":"sub-c",
                "groupName":"DEFAULT_GROUP","subscribe":true,"clusters":""}),
        )
        .await
        .unwrap();
    assert_eq!(kind, "ErrorResponse", "{body}");
    assert_eq!(body["errorCode"], OVER_THRESHOLD, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("DEFAULT_GROUP@@sub-c")
            && message.contains("(max_subscriptions_per_connection)"),
        "{message}"
    );
    // What it holds is still pushed.
    let (status, body) = register_http(&server, "sub-b", "10.0.0.2", 81).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        eventually(Duration::from_secs(5), || async {
            client.view("sub-b") == Some(vec!["10.0.0.2:81".to_owned()])
        })
        .await,
        "the held subscription is pushed"
    );
    // Config listeners have a budget of their own, refused the same way.
    let listen = |data_id: &str| {
        json!({"headers":{},"listen":true,"configListenContexts":[
            {"dataId":data_id,"group":"DEFAULT_GROUP","tenant":"","md5":""}]})
    };
    for data_id in ["c1", "c2"] {
        let (kind, body) = client
            .call("ConfigBatchListenRequest", listen(data_id))
            .await
            .unwrap();
        assert_eq!(kind, "ConfigChangeBatchListenResponse", "{body}");
    }
    let (_, body) = client
        .call("ConfigBatchListenRequest", listen("c3"))
        .await
        .unwrap();
    assert_eq!(body["errorCode"], OVER_THRESHOLD, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("max_subscriptions_per_connection"),
        "{body}"
    );
    assert_healthy(&server).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn watches_over_the_per_connection_limit_are_refused_until_one_ends() {
    let server = Server::start(Settings {
        max_watches_per_connection: Some(2),
        ..Settings::default()
    })
    .await
    .unwrap();
    // One channel is one connection.
    let native = RegistryClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let watch = |service: &str| WatchRequest {
        service: service.to_owned(),
        ..WatchRequest::default()
    };
    let mut first = native
        .clone()
        .watch(watch("w1"))
        .await
        .unwrap()
        .into_inner();
    let _second = native
        .clone()
        .watch(watch("w2"))
        .await
        .unwrap()
        .into_inner();
    let status = native
        .clone()
        .watch(watch("w3"))
        .await
        .expect_err("a third watch on the connection");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("(max_watches_per_connection)"),
        "{status:?}"
    );
    // The open watches still deliver.
    assert!(first.next().await.is_some(), "the first watch's snapshot");
    drop(first);
    assert!(
        eventually(Duration::from_secs(5), || {
            let native = native.clone();
            async move { native.clone().watch(watch("w3")).await.is_ok() }
        })
        .await,
        "an ended watch frees its slot"
    );
    assert_healthy(&server).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn instances_per_service_and_services_per_namespace_are_refused_by_setting_name() {
    let server = Server::start(Settings {
        max_instances_per_service: Some(2),
        max_services_per_namespace: Some(3),
        ..Settings::default()
    })
    .await
    .unwrap();
    for port in [1, 2] {
        let (status, body) = register_http(&server, "full", "10.0.0.1", port).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = register_http(&server, "full", "10.0.0.1", 3).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("DEFAULT_GROUP@@full") && body.contains("(max_instances_per_service)"),
        "{body}"
    );
    // Over gRPC the same limit is Nacos' over-threshold code.
    let client = RawClient::connect(server.grpc, None).await.unwrap();
    let refused = client
        .register("full", "10.0.0.1", 4)
        .await
        .expect_err("a third instance");
    let refused = format!("{refused:#}");
    assert!(
        refused.contains("\"errorCode\":503") && refused.contains("max_instances_per_service"),
        "{refused}"
    );
    // Nothing of the refused registrations was written.
    let listed = server.instance_list("serviceName=full").await;
    assert_eq!(listed["hosts"].as_array().unwrap().len(), 2, "{listed}");

    // "full" is one service; two more fill the namespace.
    for service in ["s2", "s3"] {
        let (status, body) = register_http(&server, service, "10.0.0.1", 1).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = register_http(&server, "s4", "10.0.0.1", 1).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("(max_services_per_namespace)"), "{body}");
    let (status, body) = call(
        reqwest::Method::POST,
        server.url("/nacos/v1/ns/service"),
        &[("serviceName", "s4")],
    )
    .await;
    assert_eq!(status, 429, "explicit creation too: {body}");
    // Another namespace has room of its own.
    let (status, body) = call(
        reqwest::Method::POST,
        server.url("/nacos/v1/ns/instance"),
        &[
            ("serviceName", "s4"),
            ("namespaceId", "elsewhere"),
            ("ip", "10.0.0.1"),
            ("port", "1"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn metadata_body_and_config_sizes_are_refused_by_field_and_the_server_stays_healthy() {
    let server = Server::start(Settings {
        max_metadata_entries: Some(2),
        max_metadata_key_bytes: Some(8),
        max_metadata_value_bytes: Some(16),
        max_body_bytes: Some(4096),
        max_config_bytes: Some(64),
        ..Settings::default()
    })
    .await
    .unwrap();
    let register_with = |metadata: String| {
        let url = server.url("/nacos/v1/ns/instance");
        async move {
            call(
                reqwest::Method::POST,
                url,
                &[
                    ("serviceName", "meta"),
                    ("ip", "10.0.0.1"),
                    ("port", "80"),
                    ("metadata", &metadata),
                ],
            )
            .await
        }
    };
    let (status, body) = register_with(r#"{"a":"1","b":"2","c":"3"}"#.to_owned()).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("metadata") && body.contains("limit of 2"),
        "{body}"
    );
    let (status, body) = register_with(r#"{"much-too-long-key":"1"}"#.to_owned()).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("metadata") && body.contains("1 to 8 bytes"),
        "{body}"
    );
    let (status, body) = register_with(format!(r#"{{"k":"{}"}}"#, "v".repeat(17))).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("metadata") && body.contains("limit of 16"),
        "{body}"
    );

    let (status, body) = register_with(format!(r#"{{"k":"{}"}}"#, "v".repeat(5000))).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("max_body_bytes"), "{body}");

    let (status, body) = call(
        reqwest::Method::POST,
        server.url("/nacos/v1/cs/configs"),
        &[
            ("dataId", "big"),
            ("group", "DEFAULT_GROUP"),
            ("content", &"x".repeat(65)),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("content"), "{body}");
    let listed = server.instance_list("serviceName=meta").await;
    assert!(listed["hosts"].as_array().unwrap().is_empty(), "{listed}");
    assert_healthy(&server).await;
    server.stop().await.unwrap();
}

/// A client that opens its stream and subscribes, then never reads: its
/// pushes pile up until the queue is full for a push timeout, then the
/// connection is closed, taking its registration with it.
#[tokio::test]
async fn a_client_that_never_reads_its_pushes_is_closed_when_its_queue_stays_full() {
    let server = Server::start(Settings {
        push_queue: Some(4),
        push_timeout_ms: Some(300),
        push_retry_ms: Some(50),
        // Keep client detection out of it: only the full queue may close it.
        connection_idle_ms: Some(600_000),
        ..Settings::default()
    })
    .await
    .unwrap();
    // The smallest HTTP/2 windows, so unread pushes back up quickly.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let (outgoing, rx) = tokio::sync::mpsc::channel::<Payload>(8);
    let _unread = BiRequestStreamClient::new(channel.clone())
        .request_bi_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    outgoing
        .send(seal(
            "ConnectionSetupRequest",
            &json!({"headers":{},"clientVersion":"unread","labels":{}}),
        ))
        .await
        .unwrap();
    let unary = RequestClient::new(channel);
    let request = |kind: &str, body: Value| {
        let mut unary = unary.clone();
        let payload = seal(kind, &body);
        async move {
            let answer = unary.request(payload).await.unwrap().into_inner();
            Envelope::open(answer).decode::<Value>().unwrap()
        }
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            request(
                "InstanceRequest",
                json!({"headers":{},"namespace":"public","serviceName":"unread-owner",
                    "groupName":"DEFAULT_GROUP","type":"registerInstance",
                    "instance":{"ip":"10.1.1.1","port":1,"ephemeral":true}}),
            )
            .await["success"]
                == true
        })
        .await,
        "the connection is set up and registers"
    );
    // Big views, each pushed under several cluster filters.
    let metadata = format!(r#"{{"pad":"{}"}}"#, "p".repeat(3000));
    for port in 1..=20 {
        let port = port.to_string();
        let (status, body) = call(
            reqwest::Method::POST,
            server.url("/nacos/v1/ns/instance"),
            &[
                ("serviceName", "busy"),
                ("ip", "10.2.2.2"),
                ("port", &port),
                ("ephemeral", "false"),
                ("metadata", &metadata),
            ],
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    for clusters in ["", "DEFAULT", "DEFAULT,a", "DEFAULT,b"] {
        let body = request(
            "SubscribeServiceRequest",
            json!({"headers":{},"namespace":"public","serviceName":"busy",
                "groupName":"DEFAULT_GROUP","subscribe":true,"clusters":clusters}),
        )
        .await;
        assert_eq!(body["success"], true, "{body}");
    }
    // Keep changing the view; the retries of unanswered pushes pile up too.
    let owner_gone = eventually(Duration::from_secs(20), || async {
        let (status, _) = call(
            reqwest::Method::PUT,
            server.url("/nacos/v1/ns/instance"),
            &[
                ("serviceName", "busy"),
                ("ip", "10.2.2.2"),
                ("port", "1"),
                ("ephemeral", "false"),
                ("weight", &format!("{}", 1 + rand_weight())),
            ],
        )
        .await;
        assert_eq!(status, 200);
        let listed = server.instance_list("serviceName=unread-owner").await;
        listed["hosts"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    assert!(
        owner_gone,
        "the unread connection was closed and its instance removed"
    );
    assert_healthy(&server).await;
    server.stop().await.unwrap();
}

fn rand_weight() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) % 50
}
