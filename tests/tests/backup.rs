//! Export and import (`/understudy/v1/export`, `/understudy/v1/import`,
//! `understudy ctl`): a document exported from one node and imported into
//! a fresh one exports the same; imports are idempotent merges; a bad
//! document is refused whole, naming the item, and changes nothing; the
//! cluster secret guards both endpoints. In-memory calls on a paused clock,
//! except the `ctl` test, which talks to served nodes over sockets.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_server::ctl::{self, CtlError, ExportArgs, ImportArgs, Target};
use understudy_tests::{App, Reply, Server};

const EXPORT: &str = "/understudy/v1/export";
const IMPORT: &str = "/understudy/v1/import";
const SECRET_HEADER: &str = "x-understudy-secret";

async fn export(app: &App) -> Value {
    let reply = app.get(EXPORT).await;
    reply.ok();
    reply.json()
}

async fn import(app: &App, document: &Value) -> Reply {
    import_raw(app, document.to_string(), None).await
}

async fn import_raw(app: &App, body: String, secret: Option<&str>) -> Reply {
    let mut request = Request::post(IMPORT).header("content-type", "application/json");
    if let Some(secret) = secret {
        request = request.header(SECRET_HEADER, secret);
    }
    app.raw(request.body(Body::from(body)).unwrap()).await
}

/// The document without its timestamp, which differs between exports.
fn timeless(mut document: Value) -> Value {
    document
        .as_object_mut()
        .expect("a document is an object")
        .remove("exportedAt")
        .expect("a document has exportedAt");
    document
}

async fn revision(app: &App) -> u64 {
    app.get("/ready").await.json()["appliedRevision"]
        .as_u64()
        .expect("a revision")
}

/// Two explicit namespaces, persistent instances in two of them and in
/// the default one, a service with its own metadata, an ephemeral
/// instance, and configs in two namespaces.
async fn populate(app: &App) {
    for form in [
        "namespaceId=dev&namespaceName=Development&namespaceDesc=the+dev+team",
        "namespaceId=ops&namespaceName=Operations",
    ] {
        app.send(
            axum::http::Method::POST,
            "/nacos/v2/console/namespace",
            Some(form),
        )
        .await
        .ok();
    }
    app.post("/nacos/v1/ns/service?serviceName=billing&groupName=pay&namespaceId=dev&protectThreshold=0.5&metadata=tier%3Dgold&selector=%7B%22type%22%3A%22label%22%2C%22expression%22%3A%22a%3Db%22%7D")
        .await
        .ok();
    for query in [
        "serviceName=billing&groupName=pay&namespaceId=dev&ip=10.0.0.1&port=8080&ephemeral=false&weight=2.5&clusterName=hz&metadata=%7B%22v%22%3A%221%22%7D",
        "serviceName=billing&groupName=pay&namespaceId=dev&ip=10.0.0.1&port=8081&ephemeral=false&clusterName=sh&healthy=false",
        "serviceName=orders&ip=10.0.0.2&port=9090&ephemeral=false&enabled=false",
        "serviceName=orders&ip=10.0.0.3&port=9090&ephemeral=false&namespaceId=ops",
        "serviceName=beats&ip=10.0.0.9&port=1",
    ] {
        app.post(&format!("/nacos/v1/ns/instance?{query}")).await.ok();
    }
    for form in [
        "dataId=app.yaml&group=DEFAULT_GROUP&content=a%3A+1&type=yaml&appName=orders&desc=main&config_tags=x%2Cy",
        "dataId=db.properties&group=infra&tenant=dev&content=url%3Djdbc",
    ] {
        app.send(axum::http::Method::POST, "/nacos/v1/cs/configs", Some(form))
            .await
            .ok();
    }
}

#[tokio::test(start_paused = true)]
async fn an_export_imported_into_a_fresh_node_exports_the_same() {
    let a = App::new().await;
    populate(&a).await;
    let document = export(&a).await;

    assert_eq!(document["format"], "understudy-export");
    assert_eq!(document["version"], 1);
    assert_eq!(document["exportedAt"], a.node.now());
    assert_eq!(
        document["namespaces"],
        json!([
            {"id": "dev", "name": "Development", "description": "the dev team"},
            {"id": "ops", "name": "Operations", "description": ""},
        ])
    );
    assert_eq!(
        document["ephemeralInstances"], 1,
        "the beat instance is counted, not exported"
    );
    let services = document["services"].as_array().unwrap();
    let names: Vec<String> = services
        .iter()
        .map(|s| {
            format!(
                "{}/{}@@{} {}",
                s["namespace"], s["group"], s["name"], s["kind"]
            )
            .replace('"', "")
        })
        .collect();
    assert_eq!(
        names,
        [
            "dev/pay@@billing persistent",
            "ops/DEFAULT_GROUP@@orders persistent",
            "public/DEFAULT_GROUP@@orders persistent",
        ],
        "the ephemeral service is not exported"
    );
    let billing = &services[0];
    assert_eq!(
        billing["meta"],
        json!({"protectThreshold": 0.5, "metadata": {"tier": "gold"}, "selector": {"type": "label", "expression": "a=b"}})
    );
    assert_eq!(
        billing["instances"],
        json!([
            {"instanceId": "10.0.0.1#8080#hz#pay@@billing", "ip": "10.0.0.1", "port": 8080, "cluster": "hz",
             "weight": 2.5, "enabled": true, "healthy": true, "metadata": {"v": "1"}},
            {"instanceId": "10.0.0.1#8081#sh#pay@@billing", "ip": "10.0.0.1", "port": 8081, "cluster": "sh",
             "weight": 1.0, "enabled": true, "healthy": false, "metadata": {}},
        ])
    );
    assert_eq!(services[2]["meta"], Value::Null, "created by its instance");
    assert_eq!(services[2]["instances"][0]["enabled"], false);
    assert_eq!(
        document["configs"],
        json!([
            {"namespace": "dev", "group": "infra", "dataId": "db.properties", "content": "url=jdbc",
             "type": "text", "appName": "", "desc": "", "tags": "", "encryptedDataKey": ""},
            {"namespace": "public", "group": "DEFAULT_GROUP", "dataId": "app.yaml", "content": "a: 1",
             "type": "yaml", "appName": "orders", "desc": "main", "tags": "x,y", "encryptedDataKey": ""},
        ])
    );

    let b = App::new().await;
    let reply = import(&b, &document).await;
    reply.ok();
    assert_eq!(
        reply.json(),
        json!({"namespaces": 2, "services": 3, "instances": 4, "configs": 2})
    );
    let mut again = timeless(export(&b).await);
    // B holds no ephemeral instance: the client registers it again there.
    again["ephemeralInstances"] = document["ephemeralInstances"].clone();
    assert_eq!(again, timeless(document));

    // And the Nacos APIs see what was imported.
    let hosts = b
        .hosts("serviceName=billing&groupName=pay&namespaceId=dev&clusters=hz")
        .await;
    assert_eq!(
        (hosts.len(), &hosts[0]["weight"], &hosts[0]["ephemeral"]),
        (1, &json!(2.5), &json!(false))
    );
    let config = b
        .get("/nacos/v1/cs/configs?dataId=db.properties&group=infra&tenant=dev")
        .await;
    config.ok();
    assert_eq!(config.body, "url=jdbc");
}

#[tokio::test(start_paused = true)]
async fn importing_the_same_document_twice_changes_nothing_the_second_time() {
    let a = App::new().await;
    populate(&a).await;
    let document = export(&a).await;
    let b = App::new().await;
    import(&b, &document).await.ok();
    let before = timeless(export(&b).await);
    let revision_before = revision(&b).await;

    let reply = import(&b, &document).await;
    reply.ok();
    assert_eq!(
        reply.json(),
        json!({"namespaces": 0, "services": 0, "instances": 0, "configs": 0})
    );
    assert_eq!(revision(&b).await, revision_before, "nothing was written");
    assert_eq!(timeless(export(&b).await), before);
}

#[tokio::test(start_paused = true)]
async fn an_import_merges_and_leaves_what_the_document_does_not_name() {
    let b = App::new().await;
    // Already on B: the owner 10.0.0.2:9090 in another cluster, an
    // instance the document has with another weight, and a config.
    for query in [
        "serviceName=orders&ip=10.0.0.2&port=9090&ephemeral=false&clusterName=bj",
        "serviceName=stock&ip=10.0.0.5&port=1&ephemeral=false&weight=7",
    ] {
        b.post(&format!("/nacos/v1/ns/instance?{query}")).await.ok();
    }
    b.send(
        axum::http::Method::POST,
        "/nacos/v1/cs/configs",
        Some("dataId=keep.me&group=g&content=kept"),
    )
    .await
    .ok();
    let document = json!({
        "format": "understudy-export",
        "version": 1,
        "services": [
            {"name": "orders", "kind": "persistent", "instances": [
                {"ip": "10.0.0.2", "port": 9090, "weight": 3.0},
            ]},
            {"name": "stock", "kind": "persistent", "instances": [
                {"ip": "10.0.0.5", "port": 1, "weight": 3.0},
            ]},
        ],
        "configs": [{"group": "g", "dataId": "new.one", "content": "fresh"}],
    });
    let reply = import(&b, &document).await;
    reply.ok();
    assert_eq!(
        reply.json(),
        json!({"namespaces": 0, "services": 0, "instances": 2, "configs": 1})
    );
    let weights: Vec<(String, f64)> = b
        .hosts("serviceName=orders")
        .await
        .iter()
        .map(|h| {
            (
                h["clusterName"].as_str().unwrap().to_owned(),
                h["weight"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        weights,
        [("DEFAULT".to_owned(), 3.0), ("bj".to_owned(), 1.0)],
        "the document's instance is added; the owner's other cluster stays"
    );
    let stock = b.hosts("serviceName=stock").await;
    assert_eq!(
        (stock.len(), stock[0]["weight"].as_f64()),
        (1, Some(3.0)),
        "the document wins for an instance it names"
    );
    assert_eq!(
        b.get("/nacos/v1/cs/configs?dataId=keep.me&group=g")
            .await
            .body,
        "kept"
    );
    assert_eq!(
        b.get("/nacos/v1/cs/configs?dataId=new.one&group=g")
            .await
            .body,
        "fresh"
    );
}

#[tokio::test(start_paused = true)]
async fn a_bad_document_is_refused_whole_naming_the_field_and_changes_nothing() {
    let a = App::new().await;
    populate(&a).await;
    let good = export(&a).await;
    let b = App::new().await;
    b.post("/nacos/v1/ns/instance?serviceName=kept&ip=10.9.9.9&port=1&ephemeral=false")
        .await
        .ok();
    let before = timeless(export(&b).await);
    let revision_before = revision(&b).await;

    // Each case breaks the document at its end, after items that are fine,
    // so a partial write would show. Messages read `invalid FIELD: why`.
    type Break = fn(&mut Value);
    let cases: Vec<(&str, Break, StatusCode, &str)> = vec![
        (
            "newer version",
            |d| d["version"] = json!(2),
            StatusCode::BAD_REQUEST,
            "invalid version:",
        ),
        (
            "another format",
            |d| d["format"] = json!("nacos"),
            StatusCode::BAD_REQUEST,
            "invalid format:",
        ),
        (
            "no version",
            |d| {
                d.as_object_mut().unwrap().remove("version");
            },
            StatusCode::BAD_REQUEST,
            "'version'",
        ),
        (
            "unknown key",
            |d| d["extra"] = json!(1),
            StatusCode::BAD_REQUEST,
            "invalid extra:",
        ),
        (
            "port out of range",
            |d| d["services"][2]["instances"][0]["port"] = json!(70000),
            StatusCode::BAD_REQUEST,
            "services[2].instances[0].port:",
        ),
        (
            "negative port",
            |d| d["services"][2]["instances"][0]["port"] = json!(-1),
            StatusCode::BAD_REQUEST,
            "services[2].instances[0].port:",
        ),
        (
            "negative weight",
            |d| d["services"][2]["instances"][0]["weight"] = json!(-1),
            StatusCode::BAD_REQUEST,
            "services[2].instances[0].weight:",
        ),
        (
            "misspelt key",
            |d| d["services"][2]["instances"][0]["wieght"] = json!(1),
            StatusCode::BAD_REQUEST,
            "wieght",
        ),
        (
            "bad cluster",
            |d| d["services"][2]["instances"][0]["cluster"] = json!("a b"),
            StatusCode::BAD_REQUEST,
            "services[2].instances[0].cluster:",
        ),
        (
            "bad threshold",
            |d| d["services"][0]["meta"]["protectThreshold"] = json!(2),
            StatusCode::BAD_REQUEST,
            "services[0].meta.protectThreshold:",
        ),
        (
            "blank config",
            |d| d["configs"][1]["content"] = json!(" "),
            StatusCode::BAD_REQUEST,
            "configs[1].content:",
        ),
        (
            "bad data id",
            |d| d["configs"][1]["dataId"] = json!("a/b"),
            StatusCode::BAD_REQUEST,
            "configs[1].dataId:",
        ),
        (
            "duplicate config",
            |d| {
                let c = d["configs"][0].clone();
                d["configs"].as_array_mut().unwrap().push(c);
            },
            StatusCode::BAD_REQUEST,
            "configs[2]:",
        ),
        (
            "not an object",
            |d| *d = json!(["{"]),
            StatusCode::BAD_REQUEST,
            "body",
        ),
    ];
    for (name, break_it, status, names) in cases {
        let mut document = good.clone();
        break_it(&mut document);
        let reply = import(&b, &document).await;
        assert_eq!(reply.status, status, "{name}: {}", reply.body);
        let message = reply.json()["data"].as_str().unwrap_or_default().to_owned();
        assert!(
            message.contains(names),
            "{name}: the message does not name {names}: {message}"
        );
        assert_eq!(
            revision(&b).await,
            revision_before,
            "{name}: something was written"
        );
        assert_eq!(timeless(export(&b).await), before, "{name}");
    }
    let reply = import_raw(&b, "{\"format\":".to_owned(), None).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
    assert!(reply.json()["data"]
        .as_str()
        .unwrap()
        .contains("invalid body"));
    assert_eq!(revision(&b).await, revision_before);
}

/// An import is written in log entries of up to 256 writes, not one entry
/// per write: 300 configs take two entries, and all of them land.
#[tokio::test(start_paused = true)]
async fn an_import_is_written_in_entries_of_many_writes() {
    let b = App::new().await;
    let configs: Vec<Value> = (0..300)
        .map(|i| json!({"group": "DEFAULT_GROUP", "dataId": format!("app-{i}.yaml"), "content": format!("n: {i}")}))
        .collect();
    let document = json!({"format": "understudy-export", "version": 1, "configs": configs});
    let entries_before = b.node.cluster_status().last_log;
    let reply = import(&b, &document).await;
    reply.ok();
    assert_eq!(reply.json()["configs"], 300, "{}", reply.body);
    assert_eq!(
        export(&b).await["configs"].as_array().map(Vec::len),
        Some(300)
    );
    assert_eq!(
        b.node.cluster_status().last_log - entries_before,
        2,
        "300 writes in entries of at most 256"
    );
}

#[tokio::test(start_paused = true)]
async fn a_service_of_the_other_kind_is_a_conflict_that_names_it_and_changes_nothing() {
    let a = App::new().await;
    populate(&a).await;
    let document = export(&a).await;
    let b = App::new().await;
    // B holds `ops/DEFAULT_GROUP@@orders`, services[1] of the document, as
    // an ephemeral service; the namespaces and services[0] before it are
    // fine.
    b.post("/nacos/v1/ns/instance?serviceName=orders&namespaceId=ops&ip=10.0.0.1&port=1")
        .await
        .ok();
    let before = timeless(export(&b).await);
    let revision_before = revision(&b).await;

    let reply = import(&b, &document).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.body);
    let message = reply.json()["data"].as_str().unwrap().to_owned();
    assert!(
        message.contains("services[1]")
            && message.contains("ops/DEFAULT_GROUP@@orders")
            && message.contains("ephemeral"),
        "{message}"
    );
    assert_eq!(revision(&b).await, revision_before);
    assert_eq!(timeless(export(&b).await), before);
    assert_eq!(b.hosts("serviceName=orders&namespaceId=ops").await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn with_a_cluster_secret_both_endpoints_want_it() {
    let b = App::with(Settings {
        cluster_secret: Some("s3cret".into()),
        ..Settings::default()
    })
    .await;
    let document = json!({
        "format": "understudy-export",
        "version": 1,
        "configs": [{"group": "g", "dataId": "d", "content": "c"}],
    });
    let denied = b.get(EXPORT).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.body);
    assert!(denied.body.contains(SECRET_HEADER), "{}", denied.body);
    let exported = b
        .raw(
            Request::get(EXPORT)
                .header(SECRET_HEADER, "wrong")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(exported.status, StatusCode::FORBIDDEN);
    for secret in [None, Some("wrong")] {
        let reply = import_raw(&b, document.to_string(), secret).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{secret:?}: {}",
            reply.body
        );
    }
    assert_eq!(
        b.get("/nacos/v1/cs/configs?dataId=d&group=g").await.status,
        StatusCode::NOT_FOUND
    );

    let reply = import_raw(&b, document.to_string(), Some("s3cret")).await;
    reply.ok();
    assert_eq!(reply.json()["configs"], 1);
    let exported = b
        .raw(
            Request::get(EXPORT)
                .header(SECRET_HEADER, "s3cret")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    exported.ok();
    assert_eq!(exported.json()["configs"][0]["content"], "c");
}

#[tokio::test(start_paused = true)]
async fn an_import_larger_than_the_body_limit_is_a_413_that_says_so() {
    let b = App::with(Settings {
        max_body_bytes: Some(1024),
        ..Settings::default()
    })
    .await;
    let document = json!({
        "format": "understudy-export",
        "version": 1,
        "configs": [{"group": "g", "dataId": "big", "content": "x".repeat(2000)}],
    });
    let reply = import(&b, &document).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.body
    );
    assert!(reply.body.contains("max_body_bytes"), "{}", reply.body);
    assert_eq!(export(&b).await["configs"], json!([]));
}

#[tokio::test]
async fn ctl_exports_to_a_file_and_imports_it_into_another_node() -> anyhow::Result<()> {
    let secret = Settings {
        cluster_secret: Some("s3cret".into()),
        ..Settings::default()
    };
    let a = Server::start(secret.clone()).await?;
    let b = Server::start(secret).await?;
    let http = reqwest::Client::new();
    http.post(
        a.url("/nacos/v1/ns/instance?serviceName=orders&ip=10.0.0.1&port=80&ephemeral=false"),
    )
    .send()
    .await?
    .error_for_status()?;
    let target = |server: &Server, secret: &str| Target {
        server: server.http.to_string(),
        secret: Some(secret.to_owned()),
        username: None,
        password: None,
        grpc: None,
        ca: None,
    };
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("a.json");

    let summary = ctl::export(&ExportArgs {
        target: target(&a, "s3cret"),
        output: Some(file.clone()),
    })
    .await?;
    assert!(
        summary.contains("1 services with 1 persistent instances"),
        "{summary}"
    );
    let saved: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
    assert_eq!(saved["services"][0]["instances"][0]["ip"], "10.0.0.1");

    let counts = ctl::import(&ImportArgs {
        file: file.clone(),
        target: target(&b, "s3cret"),
    })
    .await?;
    let counts: Value = serde_json::from_str(&counts)?;
    assert_eq!(
        counts,
        json!({"namespaces": 0, "services": 1, "instances": 1, "configs": 0})
    );
    let listed: Value = http
        .get(b.url("/nacos/v1/ns/instance/list?serviceName=orders"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(listed["hosts"][0]["ip"], "10.0.0.1");

    // A refusal carries the server's own message.
    match ctl::import(&ImportArgs {
        file,
        target: target(&b, "wrong"),
    })
    .await
    {
        Err(CtlError::Refused {
            status, message, ..
        }) => {
            assert_eq!(status, 403);
            assert!(message.contains(SECRET_HEADER), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    a.stop().await?;
    b.stop().await?;
    Ok(())
}
