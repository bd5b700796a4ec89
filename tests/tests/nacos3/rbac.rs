//! Users, roles and permissions created through `/nacos/v3/auth`: a user
//! with `r` on one namespace reads it and nothing else and writes
//! nothing; a user with `rw` writes it; refusals are 403 naming the
//! resource; a deleted user's token stops working at once; on a cluster,
//! a permission granted on one node holds on the others once applied.
//! Over HTTP v1, v2 and v3, Nacos gRPC (requests and the pushes a
//! subscriber gets, and Nacos 3's fuzzy watches, MCP requests and locks),
//! the native API (listings, watches, sessions) and `ctl`.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use understudy_server::auth::hash_password;
use understudy_server::config::{Settings, UserSetting};
use understudy_tests::{eventually, Server};

fn secured() -> Settings {
    Settings {
        auth_enabled: Some(true),
        auth_token_secret: Some("a token secret of at least 32 bytes".to_owned()),
        users: Some(vec![UserSetting {
            name: "nacos".to_owned(),
            password_hash: hash_password("nacos-pw", 4).expect("a hash"),
            admin: true,
        }]),
        ..Settings::default()
    }
}

async fn login(server: &Server, user: &str, password: &str) -> String {
    let reply: Value = reqwest::Client::new()
        .post(server.url("/nacos/v1/auth/users/login"))
        .form(&[("username", user), ("password", password)])
        .send()
        .await
        .expect("the server answers")
        .json()
        .await
        .expect("JSON");
    reply["accessToken"].as_str().expect("a token").to_owned()
}

/// A call with a token: the status and the body.
async fn call(
    server: &Server,
    token: &str,
    method: Method,
    path: &str,
    form: &[(&str, &str)],
) -> (StatusCode, String) {
    let client = reqwest::Client::new();
    let request = client
        .request(method.clone(), server.url(path))
        .header("accessToken", token);
    let request = if method == Method::GET || method == Method::DELETE {
        request.query(form)
    } else {
        request.form(form)
    };
    let reply = request.send().await.expect("the server answers");
    (reply.status(), reply.text().await.expect("a body"))
}

async fn ok(
    server: &Server,
    token: &str,
    method: Method,
    path: &str,
    form: &[(&str, &str)],
) -> String {
    let (status, body) = call(server, token, method.clone(), path, form).await;
    assert_eq!(status, StatusCode::OK, "{method} {path}: {body}");
    body
}

/// Creates `user` with `action` on namespace `ns` through a role of its own.
async fn grant(server: &Server, admin: &str, user: &str, ns: &str, action: &str) {
    let role = format!("{user}-role");
    ok(
        server,
        admin,
        Method::POST,
        "/nacos/v3/auth/user",
        &[("username", user), ("password", "pw-of-user")],
    )
    .await;
    ok(
        server,
        admin,
        Method::POST,
        "/nacos/v3/auth/role",
        &[("role", &role), ("username", user)],
    )
    .await;
    let resource = format!("{ns}:*:*");
    ok(
        server,
        admin,
        Method::POST,
        "/nacos/v3/auth/permission",
        &[("role", &role), ("resource", &resource), ("action", action)],
    )
    .await;
}

/// A secured server with namespace `team-a`, a user `reader` with `r` on
/// it and a user `writer` with `rw`, and the tokens of all three.
struct Team {
    server: Server,
    admin: String,
    reader: String,
    writer: String,
}

async fn team_a() -> anyhow::Result<Team> {
    let server = Server::start(secured()).await?;
    let admin = login(&server, "nacos", "nacos-pw").await;
    ok(
        &server,
        &admin,
        Method::POST,
        "/nacos/v3/admin/core/namespace",
        &[("namespaceId", "team-a"), ("namespaceName", "A")],
    )
    .await;
    grant(&server, &admin, "reader", "team-a", "r").await;
    grant(&server, &admin, "writer", "team-a", "rw").await;
    let reader = login(&server, "reader", "pw-of-user").await;
    let writer = login(&server, "writer", "pw-of-user").await;
    Ok(Team {
        server,
        admin,
        reader,
        writer,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_hold_per_namespace_on_every_http_api() -> anyhow::Result<()> {
    let Team {
        server,
        admin,
        reader,
        writer,
    } = team_a().await?;

    let instance = [
        ("serviceName", "orders"),
        ("ip", "10.0.0.1"),
        ("port", "80"),
        ("namespaceId", "team-a"),
    ];
    // The writer writes team-a over v1, v2 and v3, and not public.
    ok(
        &server,
        &writer,
        Method::POST,
        "/nacos/v1/ns/instance",
        &instance,
    )
    .await;
    ok(
        &server,
        &writer,
        Method::POST,
        "/nacos/v2/cs/config",
        &[
            ("dataId", "a"),
            ("group", "g"),
            ("namespaceId", "team-a"),
            ("content", "x"),
        ],
    )
    .await;
    let (status, body) = call(
        &server,
        &writer,
        Method::POST,
        "/nacos/v3/admin/ns/instance",
        &instance[..3],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.contains("public:DEFAULT_GROUP:naming/orders"),
        "the refusal names the resource: {body}"
    );

    // The reader reads team-a and nothing else, and writes nothing.
    let list = ok(
        &server,
        &reader,
        Method::GET,
        "/nacos/v3/client/ns/instance/list",
        &[("serviceName", "orders"), ("namespaceId", "team-a")],
    )
    .await;
    assert!(list.contains("10.0.0.1"), "{list}");
    let config = ok(
        &server,
        &reader,
        Method::GET,
        "/nacos/v1/cs/configs",
        &[("dataId", "a"), ("group", "g"), ("tenant", "team-a")],
    )
    .await;
    assert_eq!(config, "x");
    for (method, path, form) in [
        (
            Method::GET,
            "/nacos/v2/ns/instance/list",
            vec![("serviceName", "orders")],
        ),
        (Method::POST, "/nacos/v1/ns/instance", instance.to_vec()),
        (
            Method::DELETE,
            "/nacos/v3/admin/cs/config",
            vec![
                ("dataId", "a"),
                ("groupName", "g"),
                ("namespaceId", "team-a"),
            ],
        ),
    ] {
        let (status, body) = call(&server, &reader, method.clone(), path, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert!(body.contains("may not"), "{body}");
    }
    // The same over Nacos gRPC, the token in the request's headers.
    let grpc = understudy_tests::nacos_grpc::RawClient::connect(server.grpc, None).await?;
    let instance_request = |token: &str, ns: &str| {
        json!({"headers":{"accessToken":token},"namespace":ns,"serviceName":"pay","groupName":"DEFAULT_GROUP",
            "type":"registerInstance","instance":{"ip":"10.0.0.2","port":81,"weight":1.0,"healthy":true,
            "enabled":true,"ephemeral":true,"clusterName":"DEFAULT","metadata":{}}})
    };
    let query = |token: &str, ns: &str| {
        json!({"headers":{"accessToken":token},"namespace":ns,"serviceName":"orders","groupName":"DEFAULT_GROUP",
            "cluster":"","healthyOnly":false})
    };
    let (_, answer) = grpc
        .call("InstanceRequest", instance_request(&writer, "team-a"))
        .await?;
    assert_eq!(answer["resultCode"], 200, "{answer}");
    for (kind, body) in [
        ("InstanceRequest", instance_request(&reader, "team-a")),
        ("ServiceQueryRequest", query(&reader, "public")),
    ] {
        let (_, answer) = grpc.call(kind, body).await?;
        assert_eq!(answer["errorCode"], 403, "{kind}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("may not"),
            "{answer}"
        );
    }
    let (_, answer) = grpc
        .call("ServiceQueryRequest", query(&reader, "team-a"))
        .await?;
    assert_eq!(answer["resultCode"], 200, "{answer}");
    drop(grpc);

    // Neither may manage users.
    let (status, _) = call(
        &server,
        &writer,
        Method::POST,
        "/nacos/v3/auth/user",
        &[("username", "x"), ("password", "y")],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The lists carry no password hash; a bootstrap account is not the API's.
    let users = ok(
        &server,
        &admin,
        Method::GET,
        "/nacos/v3/auth/user/list",
        &[],
    )
    .await;
    assert!(
        users.contains("\"reader\"") && !users.contains("$2"),
        "{users}"
    );
    // Searches and the other lists, exact and blurred.
    let read = |path: &'static str, query: Vec<(&'static str, &'static str)>| {
        let (server, admin) = (&server, &admin);
        async move {
            let body = ok(server, admin, Method::GET, path, &query).await;
            serde_json::from_str::<Value>(&body).expect("JSON")["data"].clone()
        }
    };
    let found = read("/nacos/v3/auth/user/search", vec![("username", "read")]).await;
    assert_eq!(found, json!(["reader"]));
    let found = read("/nacos/v3/auth/role/search", vec![("role", "writer")]).await;
    assert_eq!(found, json!(["writer-role"]));
    let roles = read(
        "/nacos/v3/auth/role/list",
        vec![("role", "*-role"), ("search", "blur")],
    )
    .await;
    assert_eq!(roles["totalCount"], 2, "{roles}");
    let roles = read("/nacos/v3/auth/role/list", vec![("username", "reader")]).await;
    assert_eq!(
        roles["pageItems"],
        json!([{"role": "reader-role", "username": "reader"}])
    );
    let held = read(
        "/nacos/v3/auth/permission/list",
        vec![("role", "writer-role")],
    )
    .await;
    assert_eq!(
        held["pageItems"],
        json!([{"role": "writer-role", "resource": "team-a:*:*", "action": "rw"}])
    );
    let (status, body) = call(
        &server,
        &admin,
        Method::DELETE,
        "/nacos/v3/auth/user",
        &[("username", "nacos")],
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = call(
        &server,
        &admin,
        Method::POST,
        "/nacos/v3/auth/role",
        &[("role", "r"), ("username", "nobody")],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let exists = ok(
        &server,
        &admin,
        Method::GET,
        "/nacos/v3/auth/permission",
        &[
            ("role", "reader-role"),
            ("resource", "team-a:*:*"),
            ("action", "r"),
        ],
    )
    .await;
    assert!(exists.contains("\"data\":true"), "{exists}");

    // A deleted user's token stops working at once.
    ok(
        &server,
        &admin,
        Method::DELETE,
        "/nacos/v3/auth/user",
        &[("username", "writer")],
    )
    .await;
    let (status, body) = call(
        &server,
        &writer,
        Method::POST,
        "/nacos/v1/ns/instance",
        &instance,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("token invalid"), "{body}");
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_granted_on_one_node_holds_on_the_others_once_applied() -> anyhow::Result<()> {
    let nodes = Server::start_cluster(
        3,
        Settings {
            cluster_secret: Some("cluster-secret".to_owned()),
            ..secured()
        },
    )
    .await?;
    let admin = login(&nodes[0], "nacos", "nacos-pw").await;
    ok(
        &nodes[0],
        &admin,
        Method::POST,
        "/nacos/v3/admin/core/namespace",
        &[("namespaceId", "team-b"), ("namespaceName", "B")],
    )
    .await;
    ok(
        &nodes[0],
        &admin,
        Method::POST,
        "/nacos/v3/auth/user",
        &[("username", "late"), ("password", "pw-of-user")],
    )
    .await;
    ok(
        &nodes[0],
        &admin,
        Method::POST,
        "/nacos/v3/auth/role",
        &[("role", "late-role"), ("username", "late")],
    )
    .await;
    // The user exists everywhere once applied: it logs in on node 3.
    let logs_in = || async {
        reqwest::Client::new()
            .post(nodes[2].url("/nacos/v1/auth/users/login"))
            .form(&[("username", "late"), ("password", "pw-of-user")])
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    };
    assert!(
        eventually(Duration::from_secs(10), logs_in).await,
        "the user reaches node 3"
    );
    let token = login(&nodes[2], "late", "pw-of-user").await;
    let list = [("serviceName", "orders"), ("namespaceId", "team-b")];
    let (status, _) = call(
        &nodes[2],
        &token,
        Method::GET,
        "/nacos/v3/client/ns/instance/list",
        &list,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no permission yet");
    ok(
        &nodes[0],
        &admin,
        Method::POST,
        "/nacos/v3/auth/permission",
        &[
            ("role", "late-role"),
            ("resource", "team-b:*:*"),
            ("action", "r"),
        ],
    )
    .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            call(
                &nodes[2],
                &token,
                Method::GET,
                "/nacos/v3/client/ns/instance/list",
                &list,
            )
            .await
            .0 == StatusCode::OK
        })
        .await,
        "the permission holds on node 3 once applied there"
    );
    for node in nodes {
        node.stop().await?;
    }
    Ok(())
}

/// A native call with the token as `authorization: Bearer`.
fn native<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("a header value"),
    );
    request
}

/// Runs `ctl WORDS` as `user`.
async fn ctl_as(server: &Server, user: &str, words: &[&str]) -> Result<String, String> {
    let http = format!("http://{}", server.http);
    let grpc = format!("http://{}", server.grpc);
    let mut all: Vec<&str> = words.to_vec();
    if words[0] == "watch" || words[0] == "ls" {
        all.extend(["--grpc", &grpc]);
    }
    all.extend([
        "--server",
        &http,
        "--username",
        user,
        "--password",
        "pw-of-user",
    ]);
    let command = understudy_server::ctl::parse(all.iter().copied()).expect("ctl words");
    let mut out = Vec::new();
    understudy_server::ctl::run(&command, &mut out)
        .await
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8(out).expect("UTF-8"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_api_ctl_and_pushes_follow_the_permissions() -> anyhow::Result<()> {
    use tokio_stream::StreamExt as _;
    use understudy_proto::native::registry_client::RegistryClient;
    use understudy_proto::native::{
        session_response, GetServiceRequest, ListServicesRequest, ServiceRef, WatchRequest,
    };

    let Team {
        server,
        admin,
        reader,
        writer,
    } = team_a().await?;
    let service = |ns: &str| ServiceRef {
        namespace: ns.to_owned(),
        group: "DEFAULT_GROUP".to_owned(),
        name: "orders".to_owned(),
    };

    // ctl: the writer registers in team-a, not in public; the reader
    // lists team-a, not public, and registers nowhere.
    let register = |ns: &'static str| {
        [
            "register", "orders", "-n", ns, "--ip", "10.0.0.1", "--port", "80",
        ]
    };
    ctl_as(&server, "writer", &register("team-a"))
        .await
        .expect("the writer registers in team-a");
    let refused = ctl_as(&server, "writer", &register(""))
        .await
        .expect_err("not in public");
    assert!(
        refused.contains("public:DEFAULT_GROUP:naming/orders"),
        "{refused}"
    );
    let refused = ctl_as(&server, "reader", &register("team-a"))
        .await
        .expect_err("the reader writes nothing");
    assert!(refused.contains("may not write"), "{refused}");
    let listed = ctl_as(&server, "reader", &["ls", "services", "-n", "team-a"])
        .await
        .expect("the reader lists team-a");
    assert!(listed.contains("orders"), "{listed}");
    let refused = ctl_as(&server, "reader", &["ls", "services"])
        .await
        .expect_err("not public");
    assert!(refused.contains("may not read public"), "{refused}");
    let watched = ctl_as(
        &server,
        "reader",
        &["watch", "orders", "-n", "team-a", "--count", "1"],
    )
    .await
    .expect("the reader watches team-a");
    assert!(watched.contains("10.0.0.1"), "{watched}");
    ctl_as(&server, "reader", &["watch", "orders", "--count", "1"])
        .await
        .expect_err("not public");

    // The console's views: a namespace the reader may read, not another,
    // and not the event stream of every namespace.
    ok(
        &server,
        &reader,
        Method::GET,
        "/understudy/v1/registry",
        &[("namespace", "team-a")],
    )
    .await;
    for (path, namespace, resource) in [
        ("/understudy/v1/registry", "public", "public:*:naming/*"),
        ("/understudy/v1/events", "team-a", "*:*:naming/*"),
    ] {
        let (status, body) = call(
            &server,
            &reader,
            Method::GET,
            path,
            &[("namespace", namespace)],
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert!(body.contains(resource), "{path}: {body}");
    }

    // The native API itself: listings, sessions.
    let mut registry = RegistryClient::connect(format!("http://{}", server.grpc)).await?;
    let found = registry
        .get_service(native(
            &reader,
            GetServiceRequest {
                service: Some(service("team-a")),
            },
        ))
        .await?
        .into_inner();
    assert_eq!(found.instances.len(), 1);
    let denied = registry
        .get_service(native(
            &reader,
            GetServiceRequest {
                service: Some(service("")),
            },
        ))
        .await
        .expect_err("not public");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert!(
        denied
            .message()
            .contains("public:DEFAULT_GROUP:naming/orders"),
        "{denied:?}"
    );
    let denied = registry
        .list_services(native(
            &reader,
            ListServicesRequest {
                namespace: String::new(),
                group: String::new(),
            },
        ))
        .await
        .expect_err("not public");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    match register_in_session(&mut registry, &reader, service("team-a")).await? {
        Some(session_response::Kind::Error(error)) => {
            assert_eq!(error.field, "service");
            assert!(error.message.contains("may not write"), "{error:?}");
        }
        other => panic!("the reader's registration is refused, not {other:?}"),
    }
    let pay = ServiceRef {
        name: "pay".to_owned(),
        ..service("team-a")
    };
    match register_in_session(&mut registry, &writer, pay).await? {
        Some(session_response::Kind::Ack(_)) => {}
        other => panic!("the writer's registration is acknowledged, not {other:?}"),
    }

    // Subscriptions made before a revocation: the reader watches team-a
    // (native) and subscribes over Nacos gRPC; once its permission is
    // revoked, the watch ends as PERMISSION_DENIED at the next change and
    // the subscription is dropped instead of pushed.
    let mut watch = registry
        .watch(native(
            &reader,
            WatchRequest {
                namespace: "team-a".to_owned(),
                ..WatchRequest::default()
            },
        ))
        .await?
        .into_inner();
    watch.next().await.expect("the first snapshot")?;
    let (pushes, mut pushed) = tokio::sync::mpsc::unbounded_channel();
    let grpc = understudy_tests::nacos_grpc::RawClient::connect(server.grpc, Some(pushes)).await?;
    let (_, answer) = grpc
        .call(
            "SubscribeServiceRequest",
            json!({"headers":{"accessToken":reader},"namespace":"team-a","serviceName":"orders",
                "groupName":"DEFAULT_GROUP","subscribe":true,"clusters":""}),
        )
        .await?;
    assert_eq!(answer["resultCode"], 200, "{answer}");
    let subscribed = || async {
        let body = ok(
            &server,
            &admin,
            Method::GET,
            "/nacos/v3/admin/ns/client/subscribe/list",
            &[("clientId", grpc.connection_id.as_str())],
        )
        .await;
        body.contains("orders")
    };
    assert!(subscribed().await, "the subscription is listed");
    ok(
        &server,
        &admin,
        Method::DELETE,
        "/nacos/v3/auth/permission",
        &[
            ("role", "reader-role"),
            ("resource", "team-a:*:*"),
            ("action", "r"),
        ],
    )
    .await;
    ctl_as(
        &server,
        "writer",
        &[
            "register", "orders", "-n", "team-a", "--ip", "10.0.0.2", "--port", "80",
        ],
    )
    .await
    .expect("the writer registers");
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match watch.next().await {
                Some(Ok(_)) => continue,
                Some(Err(status)) => return Some(status),
                None => return None,
            }
        }
    })
    .await
    .expect("the watch ends within 10 s")
    .expect("with a status");
    assert_eq!(ended.code(), tonic::Code::PermissionDenied, "{ended:?}");
    assert!(ended.message().contains("team-a:*:naming/*"), "{ended:?}");
    assert!(
        eventually(Duration::from_secs(10), || async { !subscribed().await }).await,
        "the revoked subscription is dropped"
    );
    while let Ok(push) = pushed.try_recv() {
        let hosts = understudy_tests::nacos_grpc::endpoints(&push.info);
        assert!(
            !hosts.contains(&"10.0.0.2:80".to_owned()),
            "no push after the revocation: {hosts:?}"
        );
    }
    server.stop().await
}

/// Opens a native session with `token`, registers one instance in
/// `service` and returns the answer to that registration.
async fn register_in_session(
    registry: &mut understudy_proto::native::registry_client::RegistryClient<
        tonic::transport::Channel,
    >,
    token: &str,
    service: understudy_proto::native::ServiceRef,
) -> anyhow::Result<Option<understudy_proto::native::session_response::Kind>> {
    use tokio_stream::StreamExt as _;
    use understudy_proto::native::{
        session_request::Kind, Hello, InstanceSpec, Register, SessionRequest,
    };
    let (to_session, outbound) = tokio::sync::mpsc::channel(4);
    to_session
        .send(SessionRequest {
            request_id: 1,
            kind: Some(Kind::Hello(Hello::default())),
        })
        .await?;
    to_session
        .send(SessionRequest {
            request_id: 2,
            kind: Some(Kind::Register(Register {
                service: Some(service),
                instances: vec![InstanceSpec {
                    ip: "10.0.0.9".to_owned(),
                    port: 90,
                    ..InstanceSpec::default()
                }],
            })),
        })
        .await?;
    let mut answers = registry
        .session(native(
            token,
            tokio_stream::wrappers::ReceiverStream::new(outbound),
        ))
        .await?
        .into_inner();
    loop {
        let answer = answers.next().await.expect("an answer")?;
        if answer.request_id == 2 {
            return Ok(answer.kind);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_user_management_and_credentials_sent_with_each_call() -> anyhow::Result<()> {
    let server = Server::start(secured()).await?;
    let admin = login(&server, "nacos", "nacos-pw").await;
    ok(
        &server,
        &admin,
        Method::POST,
        "/nacos/v3/admin/core/namespace",
        &[("namespaceId", "team-c"), ("namespaceName", "C")],
    )
    .await;

    // Users, roles and permissions at the v1 paths: an admin's.
    let created = ok(
        &server,
        &admin,
        Method::POST,
        "/nacos/v1/auth/users",
        &[("username", "cred"), ("password", "pw-1")],
    )
    .await;
    let created: Value = serde_json::from_str(&created)?;
    assert_eq!(
        created,
        json!({"code":200,"message":null,"data":"create user ok!"})
    );
    let (status, body) = call(
        &server,
        "not-a-token",
        Method::POST,
        "/nacos/v1/auth/users",
        &[("username", "x"), ("password", "y")],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = call(
        &server,
        &admin,
        Method::POST,
        "/nacos/v1/auth/users",
        &[("username", "x")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("'password'"), "{body}");
    ok(
        &server,
        &admin,
        Method::POST,
        "/nacos/v1/auth/roles",
        &[("role", "cred-role"), ("username", "cred")],
    )
    .await;
    let (status, body) = call(
        &server,
        &admin,
        Method::POST,
        "/nacos/v1/auth/roles",
        &[("role", "cred-role"), ("username", "nobody")],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let permission = [
        ("role", "cred-role"),
        ("resource", "team-c:*:*"),
        ("action", "rw"),
    ];
    ok(
        &server,
        &admin,
        Method::POST,
        "/nacos/v1/auth/permissions",
        &permission,
    )
    .await;
    let (status, body) = call(
        &server,
        &admin,
        Method::POST,
        "/nacos/v1/auth/permissions",
        &[("role", "cred-role"), ("resource", "x"), ("action", "x")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("action"), "{body}");
    let read = |path: &'static str, query: Vec<(&'static str, &'static str)>| {
        let server = &server;
        let admin = &admin;
        async move {
            let body = ok(server, admin, Method::GET, path, &query).await;
            serde_json::from_str::<Value>(&body).expect("JSON")
        }
    };
    let users = read(
        "/nacos/v1/auth/users",
        vec![("pageNo", "1"), ("pageSize", "10")],
    )
    .await;
    assert!(
        users["pageItems"]
            .as_array()
            .expect("a bare page")
            .iter()
            .any(|u| u["username"] == "cred"),
        "{users}"
    );
    let found = read("/nacos/v1/auth/users/search", vec![("username", "cr")]).await;
    assert_eq!(found, json!(["cred"]));
    let roles = read("/nacos/v1/auth/roles", vec![("username", "cred")]).await;
    assert_eq!(roles["pageItems"][0]["role"], "cred-role", "{roles}");
    let found = read("/nacos/v1/auth/roles/search", vec![("role", "cred")]).await;
    assert_eq!(found, json!(["cred-role"]));
    let held = read("/nacos/v1/auth/permissions", vec![("role", "cred-role")]).await;
    assert_eq!(held["pageItems"][0]["resource"], "team-c:*:*", "{held}");
    let exists = read("/nacos/v1/auth/permissions", permission.to_vec()).await;
    assert_eq!(exists["data"], true, "{exists}");

    // Credentials with each call instead of a token: headers, then
    // parameters; Nacos gRPC takes them as request headers.
    let client = reqwest::Client::new();
    let list = server.url("/nacos/v3/client/ns/instance/list");
    let in_c = [("serviceName", "orders"), ("namespaceId", "team-c")];
    let with_headers = |password: &str| {
        client
            .get(&list)
            .query(&in_c)
            .header("username", "cred")
            .header("password", password)
    };
    let reply = with_headers("pw-1").send().await?;
    assert_eq!(reply.status(), StatusCode::OK, "{}", reply.text().await?);
    let reply = with_headers("wrong").send().await?;
    assert_eq!(reply.status(), StatusCode::FORBIDDEN);
    assert!(reply.text().await?.contains("unknown user"));
    let with_params = |password: &'static str, namespace: &'static str| {
        client.get(&list).query(&[
            ("serviceName", "orders"),
            ("namespaceId", namespace),
            ("username", "cred"),
            ("password", password),
        ])
    };
    let reply = with_params("pw-1", "team-c").send().await?;
    assert_eq!(reply.status(), StatusCode::OK, "{}", reply.text().await?);
    let reply = with_params("pw-1", "public").send().await?;
    assert_eq!(reply.status(), StatusCode::FORBIDDEN);
    assert!(reply.text().await?.contains("may not read"));
    let grpc = understudy_tests::nacos_grpc::RawClient::connect(server.grpc, None).await?;
    let query = |password: &str| {
        json!({"headers":{"username":"cred","password":password},"namespace":"team-c",
            "serviceName":"orders","groupName":"DEFAULT_GROUP","cluster":"","healthyOnly":false})
    };
    let (_, answer) = grpc.call("ServiceQueryRequest", query("pw-1")).await?;
    assert_eq!(answer["resultCode"], 200, "{answer}");
    let (_, answer) = grpc.call("ServiceQueryRequest", query("wrong")).await?;
    assert_eq!(answer["errorCode"], 403, "{answer}");

    // A changed password: the old one, verified a moment ago, is refused.
    let token = login(&server, "cred", "pw-1").await;
    ok(
        &server,
        &token,
        Method::PUT,
        "/nacos/v1/auth/users",
        &[("username", "cred"), ("newPassword", "pw-2")],
    )
    .await;
    assert_eq!(
        with_params("pw-1", "team-c").send().await?.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        with_params("pw-2", "team-c").send().await?.status(),
        StatusCode::OK
    );

    // Taken apart again at the v1 paths; the user's credentials stop working.
    let call_v1 = |method: Method, path: &'static str, form: Vec<(&'static str, &'static str)>| {
        let server = &server;
        let admin = &admin;
        async move { ok(server, admin, method, path, &form).await }
    };
    call_v1(
        Method::DELETE,
        "/nacos/v1/auth/permissions",
        permission.to_vec(),
    )
    .await;
    let held = read("/nacos/v1/auth/permissions", vec![("role", "cred-role")]).await;
    assert_eq!(held["totalCount"], 0, "{held}");
    call_v1(
        Method::DELETE,
        "/nacos/v1/auth/roles",
        vec![("role", "cred-role"), ("username", "cred")],
    )
    .await;
    call_v1(
        Method::DELETE,
        "/nacos/v1/auth/users",
        vec![("username", "cred")],
    )
    .await;
    assert_eq!(
        with_params("pw-2", "team-c").send().await?.status(),
        StatusCode::FORBIDDEN
    );
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initial_admin_is_made_once_while_there_is_none() -> anyhow::Result<()> {
    // Auth needs a config-file user; this one is no admin.
    let server = Server::start(Settings {
        users: Some(vec![UserSetting {
            name: "app".to_owned(),
            password_hash: hash_password("app-pw", 4).expect("a hash"),
            admin: false,
        }]),
        ..secured()
    })
    .await?;
    let client = reqwest::Client::new();
    let made: Value = client
        .post(server.url("/nacos/v3/auth/user/admin"))
        .form(&[("password", "first-pw")])
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        made,
        json!({"code": 0, "message": "success", "data": {"username": "nacos", "password": "first-pw"}})
    );
    let again = client
        .post(server.url("/nacos/v3/auth/user/admin"))
        .form(&[("password", "second-pw")])
        .send()
        .await?;
    assert_eq!(again.status(), StatusCode::OK);
    let again: Value = again.json().await?;
    assert_eq!(again["code"], 409, "{again}");
    // The admin logs in at v3's login (the raw body, and the token as a
    // header too) and may manage users.
    let reply = client
        .post(server.url("/nacos/v3/auth/user/login"))
        .form(&[("username", "nacos"), ("password", "first-pw")])
        .send()
        .await?;
    assert_eq!(reply.status(), StatusCode::OK);
    let bearer = reply
        .headers()
        .get("Authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = reply.json().await?;
    assert_eq!(body["globalAdmin"], true, "{body}");
    let token = body["accessToken"].as_str().expect("a token").to_owned();
    assert_eq!(bearer, Some(format!("Bearer {token}")));
    ok(
        &server,
        &token,
        Method::POST,
        "/nacos/v3/auth/user",
        &[("username", "next"), ("password", "pw")],
    )
    .await;
    server.stop().await
}

/// Nacos 3's gRPC additions follow the same permissions: a fuzzy watch
/// needs read on its pattern (as a resource), an MCP or agent query read
/// and a release or endpoint write on the namespace; a lock needs only a
/// user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzy_watches_ai_registries_and_locks_follow_the_permissions() -> anyhow::Result<()> {
    use understudy_tests::nacos_grpc::RawClient;
    let team = team_a().await?;
    let client = RawClient::connect(team.server.grpc, None).await?;
    let as_user = |token: &str, mut body: Value| {
        body["headers"] = json!({ "accessToken": token });
        body
    };
    let watch = |pattern: &str| json!({"groupKeyPattern": pattern, "watchType": "WATCH", "initializing": true});
    let release = |ns: &str| {
        json!({"namespaceId": ns, "serverSpecification":
            {"name": "tool", "protocol": "stdio", "versionDetail": {"version": "1"}}})
    };
    let query = |ns: &str| json!({"namespaceId": ns, "mcpName": "tool"});
    let agent = |ns: &str| {
        json!({"namespaceId": ns, "agentCard": {"name": "helper", "version": "1",
            "protocolVersion": "0.3.0", "preferredTransport": "JSONRPC", "url": "http://h"}})
    };
    let agent_query = |ns: &str| json!({"namespaceId": ns, "agentName": "helper"});
    let agent_endpoint = |ns: &str| {
        json!({"namespaceId": ns, "agentName": "helper", "type": "registerEndpoint",
            "endpoint": {"address": "10.0.0.1", "port": 80, "version": "1"}})
    };
    let lock =
        json!({"lockOperationEnum": "ACQUIRE", "lockInstance": {"key": "k", "expiredTime": 1000}});
    let cases = [
        (
            "NamingFuzzyWatchRequest",
            as_user(&team.reader, watch("team-a>>*>>svc-*")),
            true,
        ),
        (
            "NamingFuzzyWatchRequest",
            as_user(&team.reader, watch("public>>*>>*")),
            false,
        ),
        (
            "ConfigFuzzyWatchRequest",
            as_user(&team.reader, watch("team-a>>*>>*")),
            true,
        ),
        (
            "ReleaseMcpServerRequest",
            as_user(&team.reader, release("team-a")),
            false,
        ),
        (
            "ReleaseMcpServerRequest",
            as_user(&team.writer, release("team-a")),
            true,
        ),
        (
            "ReleaseMcpServerRequest",
            as_user(&team.writer, release("public")),
            false,
        ),
        (
            "QueryMcpServerRequest",
            as_user(&team.reader, query("team-a")),
            true,
        ),
        (
            "QueryMcpServerRequest",
            as_user(&team.reader, query("public")),
            false,
        ),
        (
            "ReleaseAgentCardRequest",
            as_user(&team.reader, agent("team-a")),
            false,
        ),
        (
            "ReleaseAgentCardRequest",
            as_user(&team.writer, agent("team-a")),
            true,
        ),
        (
            "ReleaseAgentCardRequest",
            as_user(&team.writer, agent("public")),
            false,
        ),
        (
            "QueryAgentCardRequest",
            as_user(&team.reader, agent_query("team-a")),
            true,
        ),
        (
            "QueryAgentCardRequest",
            as_user(&team.reader, agent_query("public")),
            false,
        ),
        (
            "AgentEndpointRequest",
            as_user(&team.reader, agent_endpoint("team-a")),
            false,
        ),
        (
            "AgentEndpointRequest",
            as_user(&team.writer, agent_endpoint("team-a")),
            true,
        ),
        (
            "LockOperationRequest",
            as_user(&team.reader, lock.clone()),
            true,
        ),
        ("LockOperationRequest", lock, false),
    ];
    for (kind, body, allowed) in cases {
        let (_, answer) = client.call(kind, body.clone()).await?;
        if allowed {
            assert_eq!(answer["success"], true, "{kind} {body}: {answer}");
        } else {
            assert_eq!(answer["errorCode"], 403, "{kind} {body}: {answer}");
        }
    }
    // The admin may do all of it.
    let (_, admin) = client
        .call(
            "QueryMcpServerRequest",
            as_user(&team.admin, query("team-a")),
        )
        .await?;
    assert_eq!(admin["success"], true, "{admin}");
    Ok(())
}
