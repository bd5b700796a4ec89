//! Auth on and off, over every API: HTTP (Nacos and admin), Nacos gRPC,
//! the native API and the bundled client, and the official Rust SDK
//! configured with a username and password. Tokens issued by one node
//! are accepted by the others.

use std::time::Duration;

use nacos_sdk::api::naming::{NamingService, NamingServiceBuilder, ServiceInstance};
use nacos_sdk::api::props::ClientProps;
use serde_json::{json, Value};
use understudy_client::core::ServiceKey;
use understudy_client::Client;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{ListNamespacesRequest, LoginRequest};
use understudy_server::auth::hash_password;
use understudy_server::config::{Settings, UserSetting};
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

const TOKEN_SECRET: &str = "a token secret of at least 32 bytes";
const CLUSTER_SECRET: &str = "cluster-secret";

fn user(name: &str, password: &str, admin: bool) -> UserSetting {
    UserSetting {
        name: name.to_owned(),
        // The lowest bcrypt cost keeps the logins quick.
        password_hash: hash_password(password, 4).expect("a hash"),
        admin,
    }
}

fn secured() -> Settings {
    Settings {
        auth_enabled: Some(true),
        auth_token_secret: Some(TOKEN_SECRET.to_owned()),
        users: Some(vec![
            user("nacos", "nacos-pw", true),
            user("app", "app-pw", false),
        ]),
        ..Settings::default()
    }
}

/// Logs in as Java 2.x does (username in the query, password in the
/// form); the token, or the refusal's status and body.
async fn login(server: &Server, username: &str, password: &str) -> Result<String, (u16, String)> {
    let reply = reqwest::Client::new()
        .post(server.url(&format!("/nacos/v1/auth/users/login?username={username}")))
        .form(&[("password", password)])
        .send()
        .await
        .expect("the server answers");
    let status = reply.status().as_u16();
    let text = reply.text().await.expect("a body");
    if status != 200 {
        return Err((status, text));
    }
    let body: Value = serde_json::from_str(&text).expect("JSON");
    assert!(body["tokenTtl"].is_u64(), "{body}");
    assert_eq!(body["username"], username, "{body}");
    Ok(body["accessToken"].as_str().expect("a token").to_owned())
}

async fn status_and_text(request: reqwest::RequestBuilder) -> (u16, String) {
    let reply = request.send().await.expect("the server answers");
    (reply.status().as_u16(), reply.text().await.expect("a body"))
}

#[tokio::test]
async fn http_calls_need_a_token_and_admin_calls_an_admin() -> anyhow::Result<()> {
    let server = Server::start(secured()).await?;
    let http = reqwest::Client::new();
    let list = server.url("/nacos/v1/ns/instance/list?serviceName=orders");

    // Without a token: refused as Nacos refuses, in each API's shape.
    assert_eq!(
        status_and_text(http.get(&list)).await,
        (403, "user not found!".to_owned())
    );
    let (status, body) =
        status_and_text(http.get(server.url("/nacos/v2/ns/instance/list?serviceName=orders")))
            .await;
    assert_eq!(status, 403);
    let body: Value = serde_json::from_str(&body)?;
    // Nacos v2's ACCESS_DENIED.
    assert_eq!(body["code"], 10001, "{body}");
    assert_eq!(body["data"], "user not found!");
    // Probes, metrics and login stay open.
    for open in [
        "/health",
        "/ready",
        "/metrics",
        "/nacos/v1/console/health/liveness",
    ] {
        assert_eq!(
            status_and_text(http.get(server.url(open))).await.0,
            200,
            "{open}"
        );
    }

    // A wrong password or an unknown user gets no token.
    assert_eq!(
        login(&server, "app", "wrong").await,
        Err((403, "unknown user!".to_owned()))
    );
    assert_eq!(login(&server, "nobody", "x").await.unwrap_err().0, 403);
    let app = login(&server, "app", "app-pw").await.expect("app logs in");
    let admin = login(&server, "nacos", "nacos-pw")
        .await
        .expect("nacos logs in");

    // The token is accepted where Nacos reads it: query, form, headers.
    let register = |token: Option<&str>| {
        let mut form = vec![
            ("serviceName", "orders".to_owned()),
            ("ip", "10.0.0.1".to_owned()),
            ("port", "8080".to_owned()),
        ];
        if let Some(token) = token {
            form.push(("accessToken", token.to_owned()));
        }
        http.post(server.url("/nacos/v1/ns/instance")).form(&form)
    };
    assert_eq!(status_and_text(register(None)).await.0, 403);
    assert_eq!(
        status_and_text(register(Some(&app))).await,
        (200, "ok".to_owned())
    );
    let (status, body) = status_and_text(http.get(format!("{list}&accessToken={app}"))).await;
    assert_eq!(status, 200);
    assert!(body.contains("10.0.0.1"), "{body}");
    assert_eq!(
        status_and_text(http.get(&list).bearer_auth(&app)).await.0,
        200
    );
    assert_eq!(
        status_and_text(http.get(&list).header("accessToken", &app))
            .await
            .0,
        200
    );

    // A token altered or signed with another key is refused.
    let mut forged = app.clone();
    forged.pop();
    forged.push(if app.ends_with('A') { 'B' } else { 'A' });
    assert_eq!(
        status_and_text(http.get(&list).bearer_auth(&forged)).await,
        (403, "token invalid!".to_owned())
    );

    // Admin endpoints want an admin; namespace writes too.
    let chaos = server.url("/understudy/v1/chaos");
    assert_eq!(status_and_text(http.get(&chaos)).await.0, 403);
    let (status, body) = status_and_text(http.get(&chaos).bearer_auth(&app)).await;
    assert_eq!(status, 403);
    assert!(body.contains("not an admin"), "{body}");
    assert_eq!(
        status_and_text(http.get(&chaos).bearer_auth(&admin))
            .await
            .0,
        200
    );
    let namespace = |token: &str| {
        http.post(server.url("/nacos/v1/console/namespaces"))
            .form(&[
                ("customNamespaceId", "dev"),
                ("namespaceName", "dev"),
                ("accessToken", token),
            ])
    };
    assert_eq!(status_and_text(namespace(&app)).await.0, 403);
    assert_eq!(
        status_and_text(namespace(&admin)).await,
        (200, "true".to_owned())
    );
    let (status, body) = status_and_text(
        http.get(server.url("/nacos/v1/console/namespaces"))
            .bearer_auth(&app),
    )
    .await;
    assert_eq!(status, 200, "reading namespaces needs any user");
    assert!(body.contains("\"dev\""), "{body}");

    // Nacos 3: the admin plane needs a token (refused in its envelope),
    // the core plane's writes an admin; its state probes stay open.
    let v3_list = server.url("/nacos/v3/admin/ns/instance/list?serviceName=orders");
    let (status, body) = status_and_text(http.get(&v3_list)).await;
    assert_eq!(status, 403);
    assert_eq!(
        serde_json::from_str::<Value>(&body)?["code"],
        10001,
        "{body}"
    );
    assert_eq!(
        status_and_text(http.get(&v3_list).bearer_auth(&app))
            .await
            .0,
        200
    );
    let v3_namespace = |token: &str| {
        http.post(server.url("/nacos/v3/admin/core/namespace"))
            .bearer_auth(token)
            .form(&[("namespaceId", "qa"), ("namespaceName", "qa")])
    };
    assert_eq!(status_and_text(v3_namespace(&app)).await.0, 403);
    assert_eq!(status_and_text(v3_namespace(&admin)).await.0, 200);
    for open in [
        "/nacos/v3/admin/core/state",
        "/nacos/v3/admin/core/state/liveness",
    ] {
        assert_eq!(
            status_and_text(http.get(server.url(open))).await.0,
            200,
            "{open}"
        );
    }
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn an_expired_token_is_refused() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        auth_token_ttl_s: Some(1),
        ..secured()
    })
    .await?;
    let token = login(&server, "app", "app-pw").await.expect("app logs in");
    let http = reqwest::Client::new();
    let list = server.url("/nacos/v1/ns/instance/list?serviceName=orders");
    assert_eq!(
        status_and_text(http.get(&list).bearer_auth(&token)).await.0,
        200
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            status_and_text(http.get(&list).bearer_auth(&token)).await
                == (403, "token expired!".to_owned())
        })
        .await,
        "the token never expired"
    );
    server.stop().await?;
    Ok(())
}

fn instance_request(token: Option<&str>) -> Value {
    let headers = match token {
        Some(token) => json!({ "accessToken": token }),
        None => json!({}),
    };
    json!({"headers": headers, "namespace": "public", "serviceName": "orders",
        "groupName": "DEFAULT_GROUP", "type": "registerInstance",
        "instance": {"ip": "10.0.0.2", "port": 9000, "weight": 1.0, "healthy": true,
            "enabled": true, "ephemeral": true, "clusterName": "DEFAULT", "metadata": {}}})
}

#[tokio::test]
async fn nacos_grpc_requests_need_a_token_in_their_headers() -> anyhow::Result<()> {
    let server = Server::start(secured()).await?;
    let client = RawClient::connect(server.grpc, None).await?;
    // Refused in the handler's own response type, so Java re-logs in.
    let (kind, body) = client
        .call("InstanceRequest", instance_request(None))
        .await?;
    assert_eq!(kind, "InstanceResponse", "{body}");
    assert_eq!(body["errorCode"], 403, "{body}");
    assert_eq!(body["resultCode"], 500, "{body}");
    assert_eq!(body["success"], false, "{body}");
    let (kind, body) = client
        .call(
            "ServiceQueryRequest",
            json!({"headers": {}, "namespace": "public", "serviceName": "orders",
                "groupName": "DEFAULT_GROUP", "cluster": "", "healthyOnly": false}),
        )
        .await?;
    assert_eq!(
        (kind.as_str(), &body["errorCode"]),
        ("QueryServiceResponse", &json!(403))
    );
    // Health checks need no token.
    let (kind, body) = client
        .call("HealthCheckRequest", json!({"headers": {}}))
        .await?;
    assert_eq!(
        (kind.as_str(), &body["success"]),
        ("HealthCheckResponse", &json!(true))
    );

    let token = login(&server, "app", "app-pw").await.expect("app logs in");
    let (kind, body) = client
        .call("InstanceRequest", instance_request(Some(&token)))
        .await?;
    assert_eq!(
        (kind.as_str(), &body["success"]),
        ("InstanceResponse", &json!(true)),
        "{body}"
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn the_native_api_and_the_bundled_client_need_a_token() -> anyhow::Result<()> {
    let server = Server::start(secured()).await?;
    let mut raw = RegistryClient::connect(format!("http://{}", server.grpc)).await?;
    let refused = raw
        .list_namespaces(ListNamespacesRequest::default())
        .await
        .expect_err("no token, no answer");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert_eq!(refused.message(), "user not found!");
    let wrong = raw
        .login(LoginRequest {
            username: "app".to_owned(),
            password: "wrong".to_owned(),
        })
        .await
        .expect_err("a wrong password");
    assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
    let issued = raw
        .login(LoginRequest {
            username: "app".to_owned(),
            password: "app-pw".to_owned(),
        })
        .await?
        .into_inner();
    assert_eq!(issued.ttl_seconds, 18000);
    assert!(!issued.admin);
    let mut call = tonic::Request::new(ListNamespacesRequest::default());
    call.metadata_mut()
        .insert("authorization", format!("Bearer {}", issued.token).parse()?);
    let namespaces = raw.list_namespaces(call).await?.into_inner().namespaces;
    assert!(namespaces.iter().any(|n| n.id == "public"));

    // The bundled client logs in with its credentials, for its session
    // (a registration) and its watch (a directory).
    let endpoint = server.grpc.to_string();
    let client = Client::builder()
        .endpoint(&endpoint, None)
        .credentials("app", "app-pw")
        .build()?;
    let service = ServiceKey::parse("", "", "native-orders")?;
    client
        .register(
            service.clone(),
            vec![understudy_client::InstanceSpec::new("10.0.0.3", 7000)],
        )
        .await?;
    let directory = client.directory(service.clone());
    assert!(
        eventually(Duration::from_secs(5), || async {
            directory.instances().len() == 1
        })
        .await,
        "the logged-in client's directory never saw its own instance"
    );
    // Without credentials nothing gets through: the server refuses the
    // session and the watch, and the client keeps nothing.
    let anonymous = Client::builder()
        .endpoint(&endpoint, None)
        .backoff(Duration::from_millis(20), Duration::from_millis(50))
        .build()?;
    let register = anonymous.register(
        service.clone(),
        vec![understudy_client::InstanceSpec::new("10.0.0.4", 7000)],
    );
    let anonymous_view = anonymous.directory(service);
    let http = reqwest::Client::new();
    let refused = |method: &'static str| {
        let http = http.clone();
        let url = server.url("/metrics");
        async move {
            let text = http.get(url).send().await.unwrap().text().await.unwrap();
            let series = format!(
                "understudy_native_requests_total{{method=\"{method}\",code=\"Unauthenticated\"}}"
            );
            text.lines().any(|l| l.starts_with(&series))
        }
    };
    tokio::select! {
        registered = register => panic!("registered without credentials: {registered:?}"),
        seen = async {
            eventually(Duration::from_secs(5), || async {
                refused("Session").await && refused("Watch").await
            })
            .await
        } => assert!(seen, "the server never refused the anonymous session and watch"),
    }
    assert!(anonymous_view.instances().is_empty());
    assert_eq!(
        anonymous_view.revision(),
        0,
        "the anonymous watch got no snapshot"
    );
    client.shutdown().await;
    anonymous.shutdown().await;
    server.stop().await?;
    Ok(())
}

async fn sdk(server: &Server, credentials: Option<(&str, &str)>) -> NamingService {
    let cache = std::env::temp_dir().join(format!(
        "understudy-auth-cache-{}-{}",
        std::process::id(),
        server.http.port()
    ));
    let mut props = ClientProps::new()
        .server_addr(server.http.to_string())
        .app_name("understudy-tests")
        .naming_load_cache_at_start(false)
        .cache_dir(cache)
        .env_first(false);
    let mut builder = NamingServiceBuilder::new(props.clone());
    if let Some((username, password)) = credentials {
        props = props.auth_username(username).auth_password(password);
        builder = NamingServiceBuilder::new(props).enable_auth_plugin_http();
    }
    builder.build().await.expect("the SDK starts")
}

fn sdk_instance(ip: &str) -> ServiceInstance {
    ServiceInstance {
        ip: ip.to_owned(),
        port: 8080,
        ..ServiceInstance::default()
    }
}

#[tokio::test]
async fn the_rust_sdk_works_with_credentials_and_is_refused_without() -> anyhow::Result<()> {
    let server = Server::start_nacos(secured()).await?;
    let client = sdk(&server, Some(("app", "app-pw"))).await;
    client
        .register_instance("sdk-orders".to_owned(), None, sdk_instance("10.0.1.1"))
        .await?;
    let seen = client
        .get_all_instances("sdk-orders".to_owned(), None, vec![], false)
        .await?;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].ip, "10.0.1.1");

    let anonymous = sdk(&server, None).await;
    let refused = anonymous
        .register_instance("sdk-orders".to_owned(), None, sdk_instance("10.0.1.2"))
        .await;
    assert!(refused.is_err(), "registered without credentials");
    let refused = anonymous
        .get_all_instances("sdk-orders".to_owned(), None, vec![], false)
        .await;
    assert!(refused.is_err(), "queried without credentials: {refused:?}");
    // The first client's instance alone is there.
    let http = reqwest::Client::new();
    let token = login(&server, "app", "app-pw").await.expect("app logs in");
    let (_, body) = status_and_text(
        http.get(server.url("/nacos/v1/ns/instance/list?serviceName=sdk-orders"))
            .bearer_auth(token),
    )
    .await;
    assert!(
        body.contains("10.0.1.1") && !body.contains("10.0.1.2"),
        "{body}"
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn with_auth_off_credentials_are_accepted_and_not_needed() -> anyhow::Result<()> {
    let server = Server::start_nacos(Settings::default()).await?;
    let with = sdk(&server, Some(("anyone", "anything"))).await;
    with.register_instance("open-orders".to_owned(), None, sdk_instance("10.0.2.1"))
        .await?;
    let without = sdk(&server, None).await;
    let seen = without
        .get_all_instances("open-orders".to_owned(), None, vec![], false)
        .await?;
    assert_eq!(seen.len(), 1);
    let client = RawClient::connect(server.grpc, None).await?;
    let (_, body) = client
        .call("InstanceRequest", instance_request(None))
        .await?;
    assert_eq!(body["success"], true, "{body}");
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_token_from_one_node_is_valid_on_the_others() -> anyhow::Result<()> {
    let servers = Server::start_cluster(
        3,
        Settings {
            cluster_secret: Some(CLUSTER_SECRET.to_owned()),
            ..secured()
        },
    )
    .await?;
    let token = login(&servers[0], "app", "app-pw")
        .await
        .expect("app logs in");
    let http = reqwest::Client::new();
    let reply = http
        .post(servers[0].url("/nacos/v1/ns/instance"))
        .form(&[
            ("serviceName", "moved"),
            ("ip", "10.0.3.1"),
            ("port", "80"),
            ("accessToken", token.as_str()),
        ])
        .send()
        .await?;
    assert_eq!(reply.text().await?, "ok");
    for other in &servers[1..] {
        let list = other.url("/nacos/v1/ns/instance/list?serviceName=moved");
        assert!(
            eventually(Duration::from_secs(5), || async {
                let (status, body) = status_and_text(http.get(&list).bearer_auth(&token)).await;
                status == 200 && body.contains("10.0.3.1")
            })
            .await,
            "node {} did not accept the token",
            other.http
        );
        let client = RawClient::connect(other.grpc, None).await?;
        let (_, body) = client
            .call("InstanceRequest", instance_request(Some(&token)))
            .await?;
        assert_eq!(body["success"], true, "{body}");
    }
    for server in servers {
        server.stop().await?;
    }
    Ok(())
}
