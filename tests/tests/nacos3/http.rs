//! The Nacos 3 HTTP API over real HTTP: the client plane
//! (`/nacos/v3/client/**`) and the admin plane's naming, config and core
//! endpoints, each with a success, a bad parameter named in the answer
//! and a missing resource, in Nacos 3's envelope.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_tests::Server;

/// One call: the status and the JSON body.
async fn call(
    server: &Server,
    method: Method,
    path: &str,
    form: &[(&str, &str)],
) -> (StatusCode, Value) {
    call_with(server, method, path, form, &[]).await
}

async fn call_with(
    server: &Server,
    method: Method,
    path: &str,
    form: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let mut request = client.request(method.clone(), server.url(path));
    request = if method == Method::GET || method == Method::DELETE {
        request.query(form)
    } else {
        request.form(form)
    };
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"));
    (status, body)
}

/// Asserts the success envelope and answers its `data`.
fn data(answer: (StatusCode, Value)) -> Value {
    let (status, body) = answer;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["code"], 0, "{body}");
    assert_eq!(body["message"], "success", "{body}");
    body["data"].clone()
}

/// Asserts an error answer: its status, its detail code, and that its
/// `data` names `names`.
fn refused(answer: (StatusCode, Value), status: StatusCode, code: u32, names: &str) {
    let (got, body) = answer;
    assert_eq!(got, status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(
        body["data"].as_str().is_some_and(|d| d.contains(names)),
        "the answer names {names}: {body}"
    );
}

const CLIENT: &str = "/nacos/v3/client/ns/instance";
const ADMIN: &str = "/nacos/v3/admin/ns";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_plane_registers_renews_lists_and_deregisters() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let instance = [
        ("serviceName", "orders"),
        ("groupName", "shop"),
        ("ip", "10.0.0.7"),
        ("port", "8080"),
        ("weight", "2"),
        ("metadata", r#"{"zone":"hz"}"#),
    ];
    assert_eq!(
        data(call(&server, Method::POST, CLIENT, &instance).await),
        "ok"
    );
    let list = data(
        call(
            &server,
            Method::GET,
            &format!("{CLIENT}/list"),
            &[("serviceName", "orders"), ("groupName", "shop")],
        )
        .await,
    );
    let hosts = list.as_array().expect("a list of instances");
    assert_eq!(hosts.len(), 1, "{list}");
    assert_eq!(hosts[0]["ip"], "10.0.0.7");
    assert_eq!(hosts[0]["port"], 8080);
    assert_eq!(hosts[0]["weight"], 2.0);
    assert_eq!(hosts[0]["metadata"]["zone"], "hz");
    assert_eq!(hosts[0]["serviceName"], "shop@@orders");

    // A heartbeat renews what is registered…
    let mut beat = instance.to_vec();
    beat.push(("heartBeat", "true"));
    assert_eq!(data(call(&server, Method::POST, CLIENT, &beat).await), "ok");
    // …and asks for a registration of what is not (21003, HTTP 200 and
    // `data` null, as Nacos answers).
    let mut stranger = beat.clone();
    stranger[2] = ("ip", "10.0.0.99");
    let (status, body) = call(&server, Method::POST, CLIENT, &stranger).await;
    assert_eq!(
        (status, body["code"].as_u64(), body["data"].is_null()),
        (StatusCode::OK, Some(21003), true),
        "{body}"
    );

    // Bad parameters are named.
    refused(
        call(
            &server,
            Method::POST,
            CLIENT,
            &[("ip", "10.0.0.7"), ("port", "80")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        10000,
        "serviceName",
    );
    // A port out of range is refused by Nacos' parameter check, before
    // any handler: 400 with its bare words, as Nacos' filter writes them.
    let refused_port = reqwest::Client::new()
        .post(server.url(CLIENT))
        .form(&[
            ("serviceName", "orders"),
            ("ip", "10.0.0.7"),
            ("port", "70000"),
        ])
        .send()
        .await
        .expect("the server answers");
    assert_eq!(refused_port.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        refused_port.text().await.expect("a body"),
        "Param 'port' is illegal, the value should be between 0 and 65535.\r\n"
    );

    assert_eq!(
        data(call(&server, Method::DELETE, CLIENT, &instance[..4]).await),
        "ok"
    );
    let list = data(
        call(
            &server,
            Method::GET,
            &format!("{CLIENT}/list"),
            &[("serviceName", "orders"), ("groupName", "shop")],
        )
        .await,
    );
    assert_eq!(list, json!([]));
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_plane_manages_instances() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let one = [
        ("serviceName", "pay"),
        ("ip", "10.0.1.1"),
        ("port", "9000"),
        ("ephemeral", "false"),
    ];
    let other = [
        ("serviceName", "pay"),
        ("ip", "10.0.1.2"),
        ("port", "9000"),
        ("ephemeral", "false"),
    ];
    let instance = format!("{ADMIN}/instance");
    data(call(&server, Method::POST, &instance, &one).await);
    data(call(&server, Method::POST, &instance, &other).await);

    let detail = data(call(&server, Method::GET, &instance, &one[..3]).await);
    assert_eq!(detail["ip"], "10.0.1.1");
    assert_eq!(detail["ephemeral"], false);
    assert_eq!(detail["clusterName"], "DEFAULT");
    refused(
        call(
            &server,
            Method::GET,
            &instance,
            &[("serviceName", "pay"), ("ip", "10.9.9.9"), ("port", "1")],
        )
        .await,
        StatusCode::NOT_FOUND,
        20004,
        "10.9.9.9",
    );

    // PUT overlays, PUT /partial changes only what exists.
    let mut weighted = one.to_vec();
    weighted.push(("weight", "5"));
    data(call(&server, Method::PUT, &instance, &weighted).await);
    let detail = data(call(&server, Method::GET, &instance, &one[..3]).await);
    assert_eq!(detail["weight"], 5.0);
    refused(
        call(
            &server,
            Method::PUT,
            &format!("{instance}/partial"),
            &[
                ("serviceName", "pay"),
                ("ip", "10.9.9.9"),
                ("port", "1"),
                ("weight", "3"),
            ],
        )
        .await,
        StatusCode::NOT_FOUND,
        20004,
        "10.9.9.9",
    );
    refused(
        call(
            &server,
            Method::PUT,
            &format!("{instance}/partial"),
            &[
                ("serviceName", "pay"),
                ("ip", "10.0.1.1"),
                ("port", "9000"),
                ("weight", "-1"),
            ],
        )
        .await,
        StatusCode::BAD_REQUEST,
        21001,
        "weight",
    );

    // Metadata in a batch: set on the one named, then removed again.
    let batch = format!("{instance}/metadata/batch");
    let set = data(
        call(
            &server,
            Method::PUT,
            &batch,
            &[
                ("serviceName", "pay"),
                (
                    "instances",
                    r#"[{"ip":"10.0.1.2","port":9000,"clusterName":"DEFAULT"}]"#,
                ),
                ("metadata", r#"{"canary":"yes"}"#),
            ],
        )
        .await,
    );
    assert_eq!(
        set["updated"],
        json!(["10.0.1.2:9000:unknown:DEFAULT:persist"])
    );
    let list = data(
        call(
            &server,
            Method::GET,
            &format!("{instance}/list"),
            &[("serviceName", "pay")],
        )
        .await,
    );
    let canary: Vec<&Value> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["metadata"]["canary"] == "yes")
        .collect();
    assert_eq!(canary.len(), 1, "{list}");
    assert_eq!(canary[0]["ip"], "10.0.1.2");
    let removed = data(
        call(
            &server,
            Method::DELETE,
            &batch,
            &[("serviceName", "pay"), ("metadata", r#"{"canary":""}"#)],
        )
        .await,
    );
    assert_eq!(
        removed["updated"].as_array().map(Vec::len),
        Some(2),
        "{removed}"
    );
    let list = data(
        call(
            &server,
            Method::GET,
            &format!("{instance}/list"),
            &[("serviceName", "pay")],
        )
        .await,
    );
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|h| h["metadata"].get("canary").is_none()),
        "{list}"
    );
    refused(
        call(
            &server,
            Method::PUT,
            &batch,
            &[
                ("serviceName", "pay"),
                ("instances", "not json"),
                ("metadata", "{}"),
            ],
        )
        .await,
        StatusCode::BAD_REQUEST,
        20002,
        "instances",
    );

    // Health of a persistent instance is set by the operator.
    data(
        call(
            &server,
            Method::PUT,
            &format!("{ADMIN}/health/instance"),
            &[
                ("serviceName", "pay"),
                ("ip", "10.0.1.1"),
                ("port", "9000"),
                ("healthy", "false"),
            ],
        )
        .await,
    );
    let detail = data(call(&server, Method::GET, &instance, &one[..3]).await);
    assert_eq!(detail["healthy"], false);
    let checkers = data(
        call(
            &server,
            Method::GET,
            &format!("{ADMIN}/health/checkers"),
            &[],
        )
        .await,
    );
    assert!(checkers.get("TCP").is_some(), "{checkers}");

    data(call(&server, Method::DELETE, &instance, &one).await);
    refused(
        call(&server, Method::GET, &instance, &one[..3]).await,
        StatusCode::NOT_FOUND,
        20004,
        "10.0.1.1",
    );
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_plane_manages_services() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let service = format!("{ADMIN}/service");
    data(
        call(
            &server,
            Method::POST,
            &service,
            &[
                ("serviceName", "ledger"),
                ("groupName", "fin"),
                ("protectThreshold", "0.5"),
            ],
        )
        .await,
    );
    refused(
        call(
            &server,
            Method::POST,
            &service,
            &[("serviceName", "ledger"), ("groupName", "fin")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        21007,
        "ledger",
    );
    let detail = data(
        call(
            &server,
            Method::GET,
            &service,
            &[("serviceName", "ledger"), ("groupName", "fin")],
        )
        .await,
    );
    assert_eq!(detail["serviceName"], "ledger");
    assert_eq!(detail["groupName"], "fin");
    assert_eq!(detail["protectThreshold"], 0.5);
    data(
        call(
            &server,
            Method::PUT,
            &service,
            &[
                ("serviceName", "ledger"),
                ("groupName", "fin"),
                ("protectThreshold", "0.2"),
            ],
        )
        .await,
    );
    refused(
        call(
            &server,
            Method::PUT,
            &service,
            &[
                ("serviceName", "ledger"),
                ("groupName", "fin"),
                ("protectThreshold", "2"),
            ],
        )
        .await,
        StatusCode::BAD_REQUEST,
        20002,
        "protectThreshold",
    );
    refused(
        call(
            &server,
            Method::GET,
            &service,
            &[("serviceName", "nowhere")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        21008,
        "nowhere",
    );

    data(
        call(
            &server,
            Method::POST,
            &format!("{ADMIN}/instance"),
            &[
                ("serviceName", "ledger"),
                ("groupName", "fin"),
                ("ip", "10.0.2.1"),
                ("port", "1"),
                ("ephemeral", "false"),
            ],
        )
        .await,
    );
    let list = data(
        call(
            &server,
            Method::GET,
            &format!("{service}/list"),
            &[
                ("groupNameParam", "fi"),
                ("pageNo", "1"),
                ("pageSize", "10"),
            ],
        )
        .await,
    );
    assert_eq!(list["totalCount"], 1, "{list}");
    assert_eq!(list["pagesAvailable"], 1);
    let view = &list["pageItems"][0];
    assert_eq!(view["name"], "ledger");
    assert_eq!(view["groupName"], "fin");
    assert_eq!(view["ipCount"], 1);
    assert_eq!(view["healthyInstanceCount"], 1);
    assert_eq!(view["clusterCount"], 1);
    let with = data(
        call(
            &server,
            Method::GET,
            &format!("{service}/list"),
            &[("withInstances", "true")],
        )
        .await,
    );
    assert_eq!(with["pageItems"][0]["serviceName"], "ledger", "{with}");
    refused(
        call(
            &server,
            Method::GET,
            &format!("{service}/list"),
            &[("pageSize", "0")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        20002,
        "pageSize",
    );
    let types = data(
        call(
            &server,
            Method::GET,
            &format!("{service}/selector/types"),
            &[],
        )
        .await,
    );
    assert_eq!(types, json!(["label", "none"]), "in Nacos' order");

    refused(
        call(
            &server,
            Method::DELETE,
            &service,
            &[("serviceName", "ledger"), ("groupName", "fin")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        21009,
        "ledger",
    );
    data(
        call(
            &server,
            Method::DELETE,
            &format!("{ADMIN}/instance"),
            &[
                ("serviceName", "ledger"),
                ("groupName", "fin"),
                ("ip", "10.0.2.1"),
                ("port", "1"),
                ("ephemeral", "false"),
            ],
        )
        .await,
    );
    data(
        call(
            &server,
            Method::DELETE,
            &service,
            &[("serviceName", "ledger"), ("groupName", "fin")],
        )
        .await,
    );
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_plane_reads_publishes_lists_and_removes_configs() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let config = "/nacos/v3/admin/cs/config";
    let key = [("dataId", "app.yaml"), ("groupName", "shop")];
    // Not found: HTTP 200, code 20004 and no data, as Nacos 3 answers.
    let (status, absent) = call(&server, Method::GET, "/nacos/v3/client/cs/config", &key).await;
    assert_eq!(
        (status, absent),
        (
            StatusCode::OK,
            json!({"code":20004,"message":"resource not found","data":null})
        )
    );
    let mut publish = key.to_vec();
    publish.extend([
        ("content", "port: 80"),
        ("type", "yaml"),
        ("appName", "shop-web"),
        ("configTags", "web,edge"),
        ("desc", "the web tier"),
    ]);
    assert_eq!(
        data(call(&server, Method::POST, config, &publish).await),
        true
    );
    let mut other = vec![
        ("dataId", "db.properties"),
        ("groupName", "shop"),
        ("content", "url=x"),
    ];
    other.push(("type", "properties"));
    data(call(&server, Method::POST, config, &other).await);

    let client = data(call(&server, Method::GET, "/nacos/v3/client/cs/config", &key).await);
    assert_eq!(client["content"], "port: 80");
    assert_eq!(client["contentType"], "yaml");
    assert_eq!(client["md5"].as_str().map(str::len), Some(32));
    // Nacos 3 hands back its gRPC response, response fields and all.
    assert_eq!(
        (&client["resultCode"], &client["success"], &client["tag"]),
        (&json!(200), &json!(true), &Value::Null),
        "{client}"
    );
    let detail = data(call(&server, Method::GET, config, &key).await);
    assert_eq!(detail["content"], "port: 80");
    assert_eq!(detail["namespaceId"], "public");
    assert_eq!(detail["groupName"], "shop");
    assert_eq!(detail["appName"], "shop-web");
    assert_eq!(detail["configTags"], "web,edge");
    assert_eq!(detail["desc"], "the web tier");

    // Compare-and-set: a stale md5 is refused, the current one publishes.
    let md5 = detail["md5"].as_str().unwrap().to_owned();
    let mut next = key.to_vec();
    next.extend([("content", "port: 81"), ("configTags", "web,edge")]);
    let (status, _) = call_with(&server, Method::POST, config, &next, &[("casMd5", "0000")]).await;
    assert_eq!(status, StatusCode::CONFLICT);
    data(call_with(&server, Method::POST, config, &next, &[("casMd5", &md5)]).await);

    let list = |query: Vec<(&'static str, &'static str)>| {
        let server = &server;
        async move {
            let page = data(call(server, Method::GET, &format!("{config}/list"), &query).await);
            page["pageItems"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["dataId"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(vec![("dataId", "*.yaml")]).await, ["app.yaml"]);
    assert!(
        list(vec![("dataId", "app")]).await.is_empty(),
        "blur adds no wildcard of its own"
    );
    assert_eq!(list(vec![("dataId", "app*")]).await, ["app.yaml"]);
    assert!(list(vec![("dataId", "app"), ("search", "accurate")])
        .await
        .is_empty());
    assert_eq!(list(vec![("groupName", "shop")]).await.len(), 2);
    assert_eq!(list(vec![("configTags", "edge")]).await, ["app.yaml"]);
    assert_eq!(list(vec![("type", "properties")]).await, ["db.properties"]);
    refused(
        call(
            &server,
            Method::GET,
            &format!("{config}/list"),
            &[("search", "fuzzy")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        20002,
        "search",
    );

    refused(
        call(
            &server,
            Method::POST,
            config,
            &[("dataId", "x"), ("content", "y")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        10000,
        "groupName",
    );
    refused(
        call(
            &server,
            Method::POST,
            config,
            &[
                ("dataId", "x"),
                ("groupName", "bad group"),
                ("content", "y"),
            ],
        )
        .await,
        StatusCode::BAD_REQUEST,
        20002,
        "groupName",
    );
    assert_eq!(
        data(call(&server, Method::DELETE, config, &key).await),
        true
    );
    refused(
        call(&server, Method::GET, config, &key).await,
        StatusCode::NOT_FOUND,
        20004,
        "Config not exist, please publish Config first.",
    );
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_plane_reports_the_server_and_manages_namespaces() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let core = "/nacos/v3/admin/core";
    let state = data(call(&server, Method::GET, &format!("{core}/state"), &[]).await);
    assert_eq!(state["startup_mode"], "standalone");
    assert_eq!(state["auth_enabled"], "false");
    for probe in ["liveness", "readiness"] {
        assert_eq!(
            data(call(&server, Method::GET, &format!("{core}/state/{probe}"), &[]).await),
            "ok"
        );
    }
    let me = data(
        call(
            &server,
            Method::GET,
            &format!("{core}/cluster/node/self"),
            &[],
        )
        .await,
    );
    assert_eq!(me["state"], "UP");
    assert_eq!(me["address"], server.http.to_string());
    let nodes = data(
        call(
            &server,
            Method::GET,
            &format!("{core}/cluster/node/list"),
            &[],
        )
        .await,
    );
    assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");

    let namespace = format!("{core}/namespace");
    data(
        call(
            &server,
            Method::POST,
            &namespace,
            &[
                ("namespaceId", "team-a"),
                ("namespaceName", "Team A"),
                ("namespaceDesc", "a"),
            ],
        )
        .await,
    );
    refused(
        call(
            &server,
            Method::POST,
            &namespace,
            &[("namespaceId", "team-a"), ("namespaceName", "again")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        22002,
        "team-a",
    );
    refused(
        call(
            &server,
            Method::POST,
            &namespace,
            &[("namespaceId", "team b"), ("namespaceName", "B")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        22000,
        "namespaceId",
    );
    assert_eq!(
        data(
            call(
                &server,
                Method::GET,
                &format!("{namespace}/check"),
                &[("namespaceId", "team-a")]
            )
            .await
        ),
        1
    );
    assert_eq!(
        data(
            call(
                &server,
                Method::GET,
                &format!("{namespace}/check"),
                &[("namespaceId", "team-z")]
            )
            .await
        ),
        0
    );
    data(
        call(
            &server,
            Method::PUT,
            &namespace,
            &[("namespaceId", "team-a"), ("namespaceName", "Team A2")],
        )
        .await,
    );
    let one = data(
        call(
            &server,
            Method::GET,
            &namespace,
            &[("namespaceId", "team-a")],
        )
        .await,
    );
    assert_eq!(one["namespaceShowName"], "Team A2");
    assert_eq!(one["type"], 1);
    let all = data(call(&server, Method::GET, &format!("{namespace}/list"), &[]).await);
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["public", "team-a"]);
    refused(
        call(
            &server,
            Method::GET,
            &namespace,
            &[("namespaceId", "team-z")],
        )
        .await,
        StatusCode::NOT_FOUND,
        22001,
        "team-z",
    );
    data(
        call(
            &server,
            Method::DELETE,
            &namespace,
            &[("namespaceId", "team-a")],
        )
        .await,
    );
    assert_eq!(
        data(
            call(
                &server,
                Method::GET,
                &format!("{namespace}/check"),
                &[("namespaceId", "team-a")]
            )
            .await
        ),
        0
    );
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_endpoints_answer_501_naming_what_understudy_does_instead() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    for (method, path) in [
        (Method::GET, "/nacos/v3/admin/cs/ops/derby"),
        (Method::POST, "/nacos/v3/admin/cs/capacity"),
        (Method::GET, "/nacos/v3/admin/core/loader/current"),
        (Method::PUT, "/nacos/v3/admin/core/cluster/node/list"),
        (Method::GET, "/nacos/v3/admin/ns/client/distro"),
    ] {
        let (status, body) = call(&server, method.clone(), path, &[]).await;
        assert_eq!(
            status,
            StatusCode::NOT_IMPLEMENTED,
            "{method} {path}: {body}"
        );
        assert!(
            body["data"]
                .as_str()
                .is_some_and(|d| d.contains("understudy")),
            "{method} {path} says what understudy does instead: {body}"
        );
    }
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_history_is_kept_listed_read_and_rolled_back() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let config = "/nacos/v3/admin/cs/config";
    let history = "/nacos/v3/admin/cs/history";
    let key = [("dataId", "app.yaml"), ("groupName", "shop")];
    for content in ["v: 1", "v: 2", "v: 3"] {
        let mut form = key.to_vec();
        form.extend([("content", content), ("srcUser", "alice")]);
        data(call(&server, Method::POST, config, &form).await);
    }
    let current = data(call(&server, Method::GET, config, &key).await);
    let config_id = current["id"].as_str().expect("a string id").to_owned();
    assert_eq!(current["createUser"], "alice");
    assert_eq!(current["createIp"], "127.0.0.1");

    // Newest first; an update keeps what it replaced, as Nacos does.
    let page = data(call(&server, Method::GET, &format!("{history}/list"), &key).await);
    assert_eq!(page["totalCount"], 3, "{page}");
    let items = page["pageItems"].as_array().unwrap();
    let ops: Vec<&str> = items
        .iter()
        .map(|e| e["opType"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["U", "U", "I"]);
    // As Nacos' list query reads an entry: no source user, md5 or type.
    assert_eq!(
        (&items[0]["srcUser"], &items[0]["md5"], &items[0]["type"]),
        (&Value::Null, &Value::Null, &Value::Null),
        "{page}"
    );
    assert_eq!(items[0]["srcIp"], "127.0.0.1");
    assert_eq!(items[0]["publishType"], "formal");
    assert!(
        items[0].get("content").is_none(),
        "a list carries no content"
    );
    let first_update = items[1]["id"].as_str().unwrap().to_owned();

    let mut ask = key.to_vec();
    ask.push(("nid", &first_update));
    let entry = data(call(&server, Method::GET, history, &ask).await);
    assert_eq!(entry["content"], "v: 1", "{entry}");
    assert_eq!(entry["opType"], "U");
    assert_eq!(entry["srcUser"], "alice", "{entry}");

    // Rolling back is publishing what an entry holds.
    let mut rollback = key.to_vec();
    let old = entry["content"].as_str().unwrap().to_owned();
    rollback.push(("content", &old));
    data(call(&server, Method::POST, config, &rollback).await);
    let now = data(call(&server, Method::GET, config, &key).await);
    assert_eq!(now["content"], "v: 1");
    assert_eq!(now["id"], config_id.as_str(), "the config keeps its id");

    // The newest entry of the config by its id: what the rollback replaced.
    let mut previous = key.to_vec();
    previous.push(("id", &config_id));
    let newest = data(
        call(
            &server,
            Method::GET,
            &format!("{history}/previous"),
            &previous,
        )
        .await,
    );
    assert_eq!(newest["content"], "v: 3", "{newest}");

    // An entry asked under another key, one that does not exist, a
    // missing key.
    let mut elsewhere = vec![("dataId", "other.yaml"), ("groupName", "shop")];
    elsewhere.push(("nid", &first_update));
    refused(
        call(&server, Method::GET, history, &elsewhere).await,
        StatusCode::FORBIDDEN,
        10001,
        "dataId",
    );
    let mut missing = key.to_vec();
    missing.push(("nid", "999999"));
    refused(
        call(&server, Method::GET, history, &missing).await,
        StatusCode::NOT_FOUND,
        20004,
        "999999",
    );
    refused(
        call(
            &server,
            Method::GET,
            &format!("{history}/list"),
            &[("groupName", "shop")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        10000,
        "dataId",
    );
    let configs = data(
        call(
            &server,
            Method::GET,
            &format!("{history}/configs"),
            &[("namespaceId", "public")],
        )
        .await,
    );
    assert_eq!(configs[0]["dataId"], "app.yaml", "{configs}");

    // The same history through Nacos 2.x's v1 endpoints.
    let v1: Value = reqwest::get(server.url(
        "/nacos/v1/cs/history?search=accurate&dataId=app.yaml&group=shop&pageNo=1&pageSize=10",
    ))
    .await?
    .json()
    .await?;
    assert_eq!(v1["totalCount"], 4, "{v1}");
    // As Nacos 2 lists them: the operation padded to its column, no
    // content, the type in `extInfo`.
    assert_eq!(v1["pageItems"][0]["opType"], "U         ");
    assert_eq!(v1["pageItems"][0]["content"], Value::Null);
    assert_eq!(v1["pageItems"][0]["publishType"], "formal");
    assert_eq!(
        v1["pageItems"][0]["extInfo"],
        r#"{"type":"text","src_user":"alice"}"#
    );
    let one: Value = reqwest::get(server.url(&format!(
        "/nacos/v1/cs/history?nid={first_update}&dataId=app.yaml&group=shop"
    )))
    .await?
    .json()
    .await?;
    assert_eq!(one["content"], "v: 1");

    // Removing by id keeps the removal in the history.
    refused(
        call(
            &server,
            Method::DELETE,
            &format!("{config}/batch"),
            &[("ids", "1,x")],
        )
        .await,
        StatusCode::BAD_REQUEST,
        20002,
        "ids",
    );
    let ids = format!("{config_id},424242");
    data(
        call(
            &server,
            Method::DELETE,
            &format!("{config}/batch"),
            &[("ids", &ids)],
        )
        .await,
    );
    refused(
        call(&server, Method::GET, config, &key).await,
        StatusCode::NOT_FOUND,
        20004,
        "Config not exist, please publish Config first.",
    );
    let page = data(call(&server, Method::GET, &format!("{history}/list"), &key).await);
    assert_eq!(page["pageItems"][0]["opType"], "D", "{page}");
    assert_eq!(page["pageItems"][0]["srcIp"], "127.0.0.1");
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_nacos3_the_retired_endpoints_answer_410_and_the_client_ones_stay() -> anyhow::Result<()>
{
    let server = Server::start(Settings {
        nacos_api_compat: Some("nacos3".to_owned()),
        ..Settings::default()
    })
    .await?;
    let http = reqwest::Client::new();
    for (method, path) in [
        (Method::GET, "/nacos/v2/ns/instance/list?serviceName=a"),
        (Method::POST, "/nacos/v2/cs/config"),
        (Method::GET, "/nacos/v1/ns/service?serviceName=a"),
        (Method::GET, "/nacos/v1/console/namespaces"),
        (
            Method::GET,
            "/nacos/v1/cs/configs?search=blur&dataId=&group=",
        ),
    ] {
        let reply = http
            .request(method.clone(), server.url(path))
            .send()
            .await?;
        assert_eq!(reply.status(), StatusCode::GONE, "{method} {path}");
        let body: Value = reply.json().await?;
        assert_eq!(body["code"], 40000, "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("/nacos/v3/"),
            "{body}"
        );
    }
    let registered = http
        .post(server.url("/nacos/v1/ns/instance"))
        .form(&[("serviceName", "a"), ("ip", "10.0.0.1"), ("port", "80")])
        .send()
        .await?;
    assert_eq!(registered.status(), StatusCode::OK);
    let list = server.instance_list("serviceName=a").await;
    assert_eq!(list["hosts"][0]["ip"], "10.0.0.1", "{list}");
    let v3 = data(
        call(
            &server,
            Method::GET,
            "/nacos/v3/client/ns/instance/list",
            &[("serviceName", "a")],
        )
        .await,
    );
    assert_eq!(v3[0]["ip"], "10.0.0.1");
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_plane_reports_clients_what_they_publish_subscribe_and_listen_to(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let grpc = understudy_tests::nacos_grpc::RawClient::connect(server.grpc, None).await?;
    let id = grpc.connection_id.clone();
    grpc.register("orders", "10.0.3.1", 8080).await?;
    grpc.subscribe("orders").await?;
    let (kind, _) = grpc
        .call(
            "ConfigBatchListenRequest",
            json!({"headers":{},"listen":true,"configListenContexts":[
                {"dataId":"app.yaml","group":"shop","tenant":"","md5":"abc"}]}),
        )
        .await?;
    assert_eq!(kind, "ConfigChangeBatchListenResponse");
    // An HTTP registration is a client too.
    data(
        call(
            &server,
            Method::POST,
            "/nacos/v3/admin/ns/instance",
            &[
                ("serviceName", "orders"),
                ("ip", "10.0.3.2"),
                ("port", "9090"),
            ],
        )
        .await,
    );

    let ns = "/nacos/v3/admin/ns";
    let ids = data(call(&server, Method::GET, &format!("{ns}/client/list"), &[]).await);
    let ids: Vec<&str> = ids
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(ids.contains(&id.as_str()), "{ids:?}");
    assert!(ids.contains(&"10.0.3.2:9090#true"), "{ids:?}");

    let one = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/client"),
            &[("clientId", &id)],
        )
        .await,
    );
    assert_eq!(one["clientType"], "connection");
    assert_eq!(one["connectType"], "GRPC");
    assert_eq!(one["appName"], "tests-app");
    assert_eq!(one["version"], "understudy-tests");
    assert_eq!(one["clientIp"], "127.0.0.1");
    let http = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/client"),
            &[("clientId", "10.0.3.2:9090#true")],
        )
        .await,
    );
    assert_eq!(http["clientType"], "ipPort");
    assert_eq!(http["ephemeral"], true);
    refused(
        call(
            &server,
            Method::GET,
            &format!("{ns}/client"),
            &[("clientId", "nobody")],
        )
        .await,
        StatusCode::NOT_FOUND,
        20004,
        "nobody",
    );
    refused(
        call(&server, Method::GET, &format!("{ns}/client"), &[]).await,
        StatusCode::BAD_REQUEST,
        10000,
        "clientId",
    );

    let published = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/client/publish/list"),
            &[("clientId", &id)],
        )
        .await,
    );
    assert_eq!(published[0]["serviceName"], "orders", "{published}");
    assert_eq!(published[0]["publisherInfo"]["ip"], "10.0.3.1");
    let subscribed = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/client/subscribe/list"),
            &[("clientId", &id)],
        )
        .await,
    );
    assert_eq!(subscribed[0]["serviceName"], "orders", "{subscribed}");
    assert_eq!(subscribed[0]["subscriberInfo"]["appName"], "tests-app");

    let publishers = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/client/service/publisher/list"),
            &[("serviceName", "orders")],
        )
        .await,
    );
    let mut owners: Vec<&str> = publishers
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["clientId"].as_str().unwrap())
        .collect();
    owners.sort_unstable();
    let mut expected = vec![id.as_str(), "10.0.3.2:9090#true"];
    expected.sort_unstable();
    assert_eq!(owners, expected);
    let subscribers = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/client/service/subscriber/list"),
            &[("serviceName", "orders")],
        )
        .await,
    );
    assert_eq!(subscribers[0]["clientId"], id.as_str(), "{subscribers}");
    let page = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/service/subscribers"),
            &[("serviceName", "orders")],
        )
        .await,
    );
    assert_eq!(page["totalCount"], 1, "{page}");
    assert_eq!(page["pageItems"][0]["ip"], "127.0.0.1");
    assert_eq!(page["pageItems"][0]["agent"], "understudy-tests");

    let metrics = data(
        call(
            &server,
            Method::GET,
            &format!("{ns}/ops/metrics"),
            &[("onlyStatus", "false")],
        )
        .await,
    );
    assert_eq!(metrics["status"], "UP");
    assert_eq!(metrics["instanceCount"], 2);
    assert_eq!(metrics["subscribeCount"], 1);
    assert_eq!(metrics["connectionBasedClientCount"], 1);
    assert_eq!(metrics["ephemeralIpPortClientCount"], 1);
    let switches = data(call(&server, Method::GET, &format!("{ns}/ops/switches"), &[]).await);
    assert!(switches["clientBeatInterval"].is_u64(), "{switches}");
    data(
        call(
            &server,
            Method::PUT,
            &format!("{ns}/ops/switches"),
            &[("entry", "checkTimes"), ("value", "5")],
        )
        .await,
    );
    let switches = data(call(&server, Method::GET, &format!("{ns}/ops/switches"), &[]).await);
    assert_eq!(switches["checkTimes"], 5, "{switches}");

    let listeners = data(
        call(
            &server,
            Method::GET,
            "/nacos/v3/admin/cs/config/listener",
            &[("dataId", "app.yaml"), ("groupName", "shop")],
        )
        .await,
    );
    assert_eq!(listeners["queryType"], "config");
    assert_eq!(
        listeners["listenersStatus"]["127.0.0.1"], "abc",
        "{listeners}"
    );
    let by_ip = data(
        call(
            &server,
            Method::GET,
            "/nacos/v3/admin/cs/listener",
            &[("ip", "127.0.0.1")],
        )
        .await,
    );
    assert_eq!(
        by_ip["listenersStatus"]["app.yaml+shop+public"], "abc",
        "{by_ip}"
    );
    server.stop().await
}

/// `POST /cs/config/import` with `file` as a multipart part.
async fn import(server: &Server, query: &str, file: &[u8]) -> (StatusCode, Value) {
    let boundary = "understudy-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"configs.zip\"\r\nContent-Type: application/zip\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let reply = reqwest::Client::new()
        .post(server.url(&format!("/nacos/v3/admin/cs/config/import?{query}")))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .expect("the server answers");
    let status = reply.status();
    (status, reply.json().await.expect("JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_export_to_a_zip_import_under_each_policy_and_clone() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let config = "/nacos/v3/admin/cs/config";
    for (data_id, content, kind) in [
        ("a.yaml", "a: 1", "yaml"),
        ("b.properties", "b=1", "properties"),
    ] {
        data(
            call(
                &server,
                Method::POST,
                config,
                &[
                    ("dataId", data_id),
                    ("groupName", "shop"),
                    ("content", content),
                    ("type", kind),
                    ("desc", "d"),
                ],
            )
            .await,
        );
    }
    let export =
        reqwest::get(server.url(&format!("{config}/export?namespaceId=public&ids="))).await?;
    assert_eq!(export.status(), StatusCode::OK);
    let disposition = export.headers()["content-disposition"].to_str()?.to_owned();
    assert!(
        disposition.starts_with("attachment;filename=nacos_config_export_"),
        "{disposition}"
    );
    let zip = export.bytes().await?;
    let archive =
        understudy_proto::config_zip::read(&zip, 1 << 20, 1 << 24).expect("a readable export");
    let names: Vec<String> = archive
        .configs
        .iter()
        .map(|c| format!("{}/{}", c.group, c.data_id))
        .collect();
    assert_eq!(names, ["shop/a.yaml", "shop/b.properties"]);
    assert_eq!(archive.configs[0].kind, "yaml");
    assert_eq!(archive.configs[0].desc, "d");

    // Into a new namespace: everything is written.
    data(
        call(
            &server,
            Method::POST,
            "/nacos/v3/admin/core/namespace",
            &[("namespaceId", "copy"), ("namespaceName", "copy")],
        )
        .await,
    );
    let outcome = data(import(&server, "namespaceId=copy", &zip).await);
    assert_eq!(outcome["succCount"], 2, "{outcome}");
    assert_eq!(outcome["skipCount"], 0);
    let copied = data(
        call(
            &server,
            Method::GET,
            config,
            &[
                ("dataId", "a.yaml"),
                ("groupName", "shop"),
                ("namespaceId", "copy"),
            ],
        )
        .await,
    );
    assert_eq!(copied["content"], "a: 1");
    assert_eq!(copied["type"], "yaml");

    // Back into public, where both exist: ABORT stops at the first and
    // names the rest as skipped; SKIP skips both; OVERWRITE writes both.
    data(
        call(
            &server,
            Method::POST,
            config,
            &[
                ("dataId", "a.yaml"),
                ("groupName", "shop"),
                ("content", "a: 2"),
            ],
        )
        .await,
    );
    let aborted = data(import(&server, "policy=ABORT", &zip).await);
    assert_eq!(aborted["succCount"], 0, "{aborted}");
    assert_eq!(
        aborted["failData"],
        json!([{"dataId": "a.yaml", "group": "shop"}])
    );
    assert_eq!(
        aborted["skipData"],
        json!([{"dataId": "b.properties", "group": "shop"}])
    );
    let skipped = data(import(&server, "policy=SKIP", &zip).await);
    assert_eq!(skipped["skipCount"], 2, "{skipped}");
    let current = data(
        call(
            &server,
            Method::GET,
            config,
            &[("dataId", "a.yaml"), ("groupName", "shop")],
        )
        .await,
    );
    assert_eq!(current["content"], "a: 2", "nothing was overwritten");
    let overwritten = data(import(&server, "policy=OVERWRITE", &zip).await);
    assert_eq!(overwritten["succCount"], 2, "{overwritten}");
    let current = data(
        call(
            &server,
            Method::GET,
            config,
            &[("dataId", "a.yaml"), ("groupName", "shop")],
        )
        .await,
    );
    assert_eq!(current["content"], "a: 1");

    // Bad imports: a policy named wrong, a file that is no ZIP (HTTP 200
    // with Nacos' code, as Nacos), a namespace that does not exist.
    refused(
        import(&server, "policy=MERGE", &zip).await,
        StatusCode::BAD_REQUEST,
        20002,
        "policy",
    );
    let (status, body) = import(&server, "", b"not a zip").await;
    assert_eq!(
        (status, body["code"].clone()),
        (StatusCode::OK, json!(100_004)),
        "{body}"
    );
    let (status, body) = import(&server, "namespaceId=nowhere", &zip).await;
    assert_eq!(
        (status, body["code"].clone()),
        (StatusCode::OK, json!(22001)),
        "{body}"
    );

    // Clone a by id into copy under a new name.
    let id = current["id"].as_str().unwrap().to_owned();
    let cloned = reqwest::Client::new()
        .post(server.url(&format!("{config}/clone?namespaceId=copy&policy=ABORT")))
        .json(&json!([{"configId": id, "targetGroupName": "shop2", "targetDataId": "a2.yaml"}]))
        .send()
        .await?;
    let cloned: Value = cloned.json().await?;
    assert_eq!(cloned["data"]["succCount"], 1, "{cloned}");
    let copy = data(
        call(
            &server,
            Method::GET,
            config,
            &[
                ("dataId", "a2.yaml"),
                ("groupName", "shop2"),
                ("namespaceId", "copy"),
            ],
        )
        .await,
    );
    assert_eq!(copy["content"], "a: 1");
    let (status, body) = call(
        &server,
        Method::POST,
        &format!("{config}/clone?policy=ABORT"),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["data"].as_str().unwrap().contains("namespaceId"),
        "{body}"
    );
    server.stop().await
}
