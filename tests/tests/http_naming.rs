//! The Nacos naming HTTP API, v1 and v2, through in-memory calls on a
//! paused clock.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::Value;
use understudy_server::config::Settings;
use understudy_tests::{eventually, App};

const V1: &str = "/nacos/v1/ns";
const V2: &str = "/nacos/v2/ns";

fn ips(hosts: &[Value]) -> Vec<String> {
    hosts
        .iter()
        .map(|h| format!("{}:{}", h["ip"].as_str().unwrap(), h["port"]))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_v1_registration_is_listed_as_nacos_renders_it() {
    let app = App::new().await;
    let reply = app
        .post(&format!(
            "{V1}/instance?serviceName=orders&ip=10.0.0.5&port=8080&weight=2&metadata=%7B%22version%22%3A%221.0%22%7D"
        ))
        .await;
    reply.ok();
    assert_eq!(reply.body, "ok");
    let list = app
        .get(&format!("{V1}/instance/list?serviceName=orders"))
        .await;
    let info = list.ok().json();
    assert_eq!(
        info["name"], "DEFAULT_GROUP@@orders",
        "HTTP lists carry the grouped name"
    );
    assert_eq!(info["groupName"], "DEFAULT_GROUP");
    assert_eq!(info["clusters"], "");
    assert_eq!(info["cacheMillis"], 10000);
    assert_eq!(info["checksum"], "");
    assert_eq!(info["reachProtectionThreshold"], false);
    let host = &info["hosts"][0];
    assert_eq!(
        host["instanceId"],
        "10.0.0.5#8080#DEFAULT#DEFAULT_GROUP@@orders"
    );
    assert_eq!(host["weight"], 2.0);
    assert_eq!(host["healthy"], true);
    assert_eq!(host["ephemeral"], true);
    assert_eq!(host["clusterName"], "DEFAULT");
    assert_eq!(host["serviceName"], "DEFAULT_GROUP@@orders");
    assert_eq!(host["metadata"]["version"], "1.0");
    assert!(!list.body.contains("null"), "no JSON nulls: {}", list.body);
}

#[tokio::test(start_paused = true)]
async fn parameters_may_come_from_the_query_the_form_or_both() {
    let app = App::new().await;
    app.send(
        Method::POST,
        &format!("{V1}/instance?serviceName=mixed"),
        Some("ip=10.0.0.1&port=80&groupName=g"),
    )
    .await
    .ok();
    assert_eq!(app.hosts("serviceName=g@@mixed").await.len(), 1);
    assert_eq!(app.hosts("serviceName=mixed&groupName=g").await.len(), 1);
    assert_eq!(app.hosts("serviceName=mixed").await.len(), 0, "other group");
}

#[tokio::test(start_paused = true)]
async fn missing_services_list_empty_and_namespaces_blank_or_public_are_one() {
    let app = App::new().await;
    let reply = app
        .get(&format!(
            "{V1}/instance/list?serviceName=DEFAULT_GROUP@@Dubbo-Nacos-Test"
        ))
        .await;
    assert_eq!(reply.ok().json()["hosts"], serde_json::json!([]));
    app.post(&format!(
        "{V1}/instance?serviceName=s&ip=10.0.0.1&port=1&namespaceId=public"
    ))
    .await
    .ok();
    assert_eq!(app.hosts("serviceName=s&namespaceId=").await.len(), 1);
    assert_eq!(app.hosts("serviceName=s").await.len(), 1);
    assert_eq!(app.hosts("serviceName=s&namespaceId=dev").await.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn cluster_filters_healthy_only_and_disabled_instances() {
    let app = App::new().await;
    app.post(&format!(
        "{V1}/instance?serviceName=c&ip=10.0.0.1&port=1&clusterName=A"
    ))
    .await
    .ok();
    app.post(&format!(
        "{V1}/instance?serviceName=c&ip=10.0.0.2&port=1&clusterName=B&healthy=false"
    ))
    .await
    .ok();
    app.post(&format!(
        "{V1}/instance?serviceName=c&ip=10.0.0.3&port=1&clusterName=B&enabled=false"
    ))
    .await
    .ok();
    assert_eq!(
        ips(&app.hosts("serviceName=c").await),
        vec!["10.0.0.1:1", "10.0.0.2:1"]
    );
    assert_eq!(
        ips(&app.hosts("serviceName=c&clusters=B").await),
        vec!["10.0.0.2:1"]
    );
    assert_eq!(
        ips(&app.hosts("serviceName=c&healthyOnly=TRUE").await),
        vec!["10.0.0.1:1"]
    );
    let info = app
        .get(&format!("{V1}/instance/list?serviceName=c&clusters=A,B"))
        .await;
    assert_eq!(info.json()["clusters"], "A,B", "the filter is echoed");
    let v2 = app
        .get(&format!("{V2}/instance/list?serviceName=c&clusterName=A"))
        .await;
    let v2 = v2.ok().json();
    assert_eq!(v2["code"], 0);
    assert_eq!(
        ips(v2["data"]["hosts"].as_array().unwrap()),
        vec!["10.0.0.1:1"]
    );
}

#[tokio::test(start_paused = true)]
async fn deregister_update_patch_and_detail() {
    let app = App::new().await;
    let base = "serviceName=d&ip=10.0.0.1&port=80";
    app.post(&format!("{V1}/instance?{base}")).await.ok();

    let detail = app.get(&format!("{V1}/instance?{base}")).await;
    let detail = detail.ok().json();
    assert_eq!(detail["service"], "DEFAULT_GROUP@@d");
    assert_eq!(detail["clusterName"], "DEFAULT");

    app.put(&format!("{V1}/instance?{base}&weight=5&metadata=k%3Dv"))
        .await
        .ok();
    let host = &app.hosts("serviceName=d").await[0];
    assert_eq!(
        (host["weight"].as_f64(), host["metadata"]["k"].as_str()),
        (Some(5.0), Some("v"))
    );

    app.send(
        Method::PATCH,
        &format!("{V1}/instance?{base}&enabled=false"),
        None,
    )
    .await
    .ok();
    assert!(app.hosts("serviceName=d").await.is_empty(), "disabled");
    let missing = app
        .send(
            Method::PATCH,
            &format!("{V1}/instance?serviceName=d&ip=10.9.9.9&port=1&weight=1"),
            None,
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    app.delete(&format!("{V1}/instance?{base}")).await.ok();
    let gone = app.get(&format!("{V1}/instance?{base}")).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    // Deregistering what is not there is still ok, as in Nacos.
    assert_eq!(
        app.delete(&format!("{V1}/instance?{base}")).await.ok().body,
        "ok"
    );
    // Updating an instance of a missing service is a 400 naming the service.
    let reply = app
        .put(&format!(
            "{V1}/instance?serviceName=nope&ip=10.0.0.1&port=80&weight=1"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("DEFAULT_GROUP@@nope"), "{}", reply.body);
}

#[tokio::test(start_paused = true)]
async fn v2_instances_use_the_result_envelope() {
    let app = App::new().await;
    let reply = app
        .send(
            Method::POST,
            &format!("{V2}/instance"),
            Some("serviceName=v2&groupName=g&ip=10.0.0.1&port=81"),
        )
        .await;
    assert_eq!(
        reply.ok().json(),
        serde_json::json!({"code":0,"message":"success","data":"ok"})
    );
    let detail = app
        .get(&format!(
            "{V2}/instance?serviceName=v2&groupName=g&ip=10.0.0.1&port=81"
        ))
        .await;
    let detail = detail.ok().json();
    assert_eq!(detail["data"]["serviceName"], "g@@v2");
    app.send(
        Method::PUT,
        &format!("{V2}/instance"),
        Some("serviceName=v2&groupName=g&ip=10.0.0.1&port=81&weight=3"),
    )
    .await
    .ok();
    assert_eq!(app.hosts("serviceName=g@@v2").await[0]["weight"], 3.0);
    let missing = app
        .get(&format!(
            "{V2}/instance?serviceName=v2&groupName=g&ip=10.0.0.2&port=81"
        ))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["code"], 21003);
    let grouped = app
        .post(&format!(
            "{V2}/instance?serviceName=g@@v2&ip=10.0.0.3&port=1"
        ))
        .await;
    assert_eq!(grouped.status, StatusCode::BAD_REQUEST);
    assert_eq!(grouped.json()["code"], 21000);
    app.send(
        Method::DELETE,
        &format!("{V2}/instance"),
        Some("serviceName=v2&groupName=g&ip=10.0.0.1&port=81"),
    )
    .await
    .ok();
    assert!(app.hosts("serviceName=g@@v2").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_beat_driven_instance_turns_unhealthy_at_15s_and_is_removed_at_30s() {
    let app = App::new().await;
    app.post(&format!(
        "{V1}/instance?serviceName=beat&ip=10.0.0.1&port=80"
    ))
    .await
    .ok();
    let state = |hosts: Vec<Value>| hosts.first().map(|h| h["healthy"].as_bool().unwrap());

    // Beats every 5 s keep it healthy well past 15 s.
    for t in [5_000, 10_000, 15_000, 20_000] {
        app.advance_to(t).await;
        let beat = app
            .put(&format!(
                "{V1}/instance/beat?serviceName=beat&ip=10.0.0.1&port=80"
            ))
            .await;
        let beat = beat.ok().json();
        assert_eq!(
            (beat["code"].as_u64(), beat["clientBeatInterval"].as_u64()),
            (Some(10200), Some(5000))
        );
        assert_eq!(beat["lightBeatEnabled"], true);
    }
    // Last beat at 20 s: healthy until 35 s, unhealthy from 35 s, gone at 50 s.
    app.advance_to(34_900).await;
    assert_eq!(state(app.hosts("serviceName=beat").await), Some(true));
    assert!(
        eventually(Duration::from_millis(200), || async {
            state(app.hosts("serviceName=beat").await) == Some(false)
        })
        .await
    );
    assert!(app.elapsed() >= 35_000);
    app.advance_to(49_900).await;
    assert_eq!(state(app.hosts("serviceName=beat").await), Some(false));
    assert!(
        eventually(Duration::from_millis(200), || async {
            app.hosts("serviceName=beat").await.is_empty()
        })
        .await
    );
    assert!(app.elapsed() >= 50_000);
    // Gone: a light beat now asks the client to register again.
    let beat = app
        .put(&format!(
            "{V1}/instance/beat?serviceName=beat&ip=10.0.0.1&port=80"
        ))
        .await;
    assert_eq!(beat.ok().json()["code"], 20404);
}

#[tokio::test(start_paused = true)]
async fn a_beat_revives_an_unhealthy_instance() {
    let app = App::new().await;
    app.post(&format!(
        "{V1}/instance?serviceName=rev&ip=10.0.0.1&port=80"
    ))
    .await
    .ok();
    app.advance_to(16_000).await;
    assert_eq!(app.hosts("serviceName=rev").await[0]["healthy"], false);
    app.put(&format!(
        "{V1}/instance/beat?serviceName=rev&ip=10.0.0.1&port=80"
    ))
    .await
    .ok();
    assert_eq!(app.hosts("serviceName=rev").await[0]["healthy"], true);
}

#[tokio::test(start_paused = true)]
async fn a_full_beat_registers_an_unknown_instance_with_its_cluster() {
    let app = App::new().await;
    let beat = r#"{"ip":"10.0.0.7","port":9000,"cluster":"hz","weight":2.0,"metadata":{"preserved.heart.beat.interval":"1000","preserved.heart.beat.timeout":"3000","preserved.ip.delete.timeout":"6000"},"scheduled":true}"#;
    let form = format!(
        "serviceName=fullbeat&beat={}",
        understudy_tests::url_encode(beat)
    );
    let reply = app
        .send(Method::PUT, &format!("{V1}/instance/beat"), Some(&form))
        .await;
    let reply = reply.ok().json();
    assert_eq!(reply["code"], 10200);
    assert_eq!(
        reply["clientBeatInterval"], 1000,
        "the instance's own interval"
    );
    let hosts = app.hosts("serviceName=fullbeat").await;
    assert_eq!(
        hosts[0]["clusterName"], "hz",
        "the beat's cluster, not DEFAULT"
    );
    assert_eq!(hosts[0]["weight"], 2.0);
    // Its own timeouts: unhealthy at 3 s, removed at 6 s.
    app.advance_to(2_900).await;
    assert_eq!(app.hosts("serviceName=fullbeat").await[0]["healthy"], true);
    assert!(
        eventually(Duration::from_millis(300), || async {
            app.hosts("serviceName=fullbeat")
                .await
                .first()
                .map(|h| h["healthy"] == false)
                == Some(true)
        })
        .await
    );
    assert!(
        eventually(Duration::from_millis(3_200), || async {
            app.hosts("serviceName=fullbeat").await.is_empty()
        })
        .await
    );
}

#[tokio::test(start_paused = true)]
async fn v2_beats_answer_the_bare_beat_json() {
    let app = App::new().await;
    app.post(&format!("{V2}/instance?serviceName=b2&ip=10.0.0.1&port=80"))
        .await
        .ok();
    let reply = app
        .put(&format!(
            "{V2}/instance/beat?serviceName=DEFAULT_GROUP@@b2&ip=10.0.0.1&port=80"
        ))
        .await;
    assert_eq!(reply.ok().json()["code"], 10200);
}

#[tokio::test(start_paused = true)]
async fn persistent_instances_do_not_expire_and_take_an_operators_health() {
    let app = App::new().await;
    app.post(&format!(
        "{V1}/instance?serviceName=p&ip=10.0.0.1&port=80&ephemeral=false"
    ))
    .await
    .ok();
    app.advance_to(120_000).await;
    let hosts = app.hosts("serviceName=p").await;
    assert_eq!(
        (hosts.len(), hosts[0]["ephemeral"].as_bool()),
        (1, Some(false))
    );
    app.put(&format!(
        "{V1}/health/instance?serviceName=p&ip=10.0.0.1&port=80&healthy=false"
    ))
    .await
    .ok();
    assert_eq!(app.hosts("serviceName=p").await[0]["healthy"], false);
    app.send(
        Method::PUT,
        &format!("{V2}/health/instance"),
        Some("serviceName=p&ip=10.0.0.1&port=80&healthy=true"),
    )
    .await
    .ok();
    assert_eq!(app.hosts("serviceName=p").await[0]["healthy"], true);
    // Ephemeral instances follow their beats, not an operator.
    app.post(&format!("{V1}/instance?serviceName=e&ip=10.0.0.1&port=80"))
        .await
        .ok();
    let refused = app
        .put(&format!(
            "{V1}/health?serviceName=e&ip=10.0.0.1&port=80&healthy=false"
        ))
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    // And the two kinds never mix in one service.
    let mixed = app
        .post(&format!("{V1}/instance?serviceName=p&ip=10.0.0.2&port=80"))
        .await;
    assert_eq!(mixed.status, StatusCode::BAD_REQUEST);
    assert!(mixed.body.contains("persistent service"), "{}", mixed.body);
}

#[tokio::test(start_paused = true)]
async fn empty_implicit_services_are_removed_after_60s() {
    let app = App::new().await;
    app.post(&format!(
        "{V1}/instance?serviceName=tmp&ip=10.0.0.1&port=80"
    ))
    .await
    .ok();
    app.delete(&format!(
        "{V1}/instance?serviceName=tmp&ip=10.0.0.1&port=80"
    ))
    .await
    .ok();
    assert_eq!(listed(&app).await, Some(1));
    app.advance_to(59_000).await;
    assert_eq!(listed(&app).await, Some(1));
    assert!(
        eventually(Duration::from_millis(1_500), || async {
            listed(&app).await == Some(0)
        })
        .await
    );
}

#[tokio::test(start_paused = true)]
async fn v1_services_create_update_detail_list_delete() {
    let app = App::new().await;
    app.post(&format!(
        "{V1}/service?serviceName=svc&protectThreshold=0.5&metadata=%7B%22a%22%3A%22b%22%7D"
    ))
    .await
    .ok();
    let again = app.post(&format!("{V1}/service?serviceName=svc")).await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    assert!(again.body.contains("already exists"), "{}", again.body);

    let detail = app.get(&format!("{V1}/service?serviceName=svc")).await;
    let detail = detail.ok().json();
    assert_eq!(detail["protectThreshold"], 0.5);
    assert_eq!(detail["metadata"]["a"], "b");
    assert_eq!(detail["selector"]["type"], "none");
    assert_eq!(detail["namespaceId"], "public");

    let no_threshold = app.put(&format!("{V1}/service?serviceName=svc")).await;
    assert_eq!(no_threshold.status, StatusCode::BAD_REQUEST);
    assert!(
        no_threshold.body.contains("protectThreshold"),
        "{}",
        no_threshold.body
    );
    app.put(&format!(
        "{V1}/service?serviceName=svc&protectThreshold=0.8"
    ))
    .await
    .ok();
    assert_eq!(
        app.get(&format!("{V1}/service?serviceName=svc"))
            .await
            .json()["protectThreshold"],
        0.8
    );

    // Services created through the API are persistent, as in Nacos 2.x.
    app.post(&format!(
        "{V1}/instance?serviceName=svc&ip=10.0.0.1&port=1&ephemeral=false&healthy=false"
    ))
    .await
    .ok();
    let info = app
        .get(&format!("{V1}/instance/list?serviceName=svc"))
        .await
        .json();
    assert_eq!(info["reachProtectionThreshold"], true);
    assert_eq!(
        info["hosts"][0]["healthy"], true,
        "served as healthy under protection"
    );

    let busy = app.delete(&format!("{V1}/service?serviceName=svc")).await;
    assert_eq!(busy.status, StatusCode::BAD_REQUEST);
    assert!(busy.body.contains("not empty"), "{}", busy.body);
    app.delete(&format!(
        "{V1}/instance?serviceName=svc&ip=10.0.0.1&port=1&ephemeral=false"
    ))
    .await
    .ok();
    app.delete(&format!("{V1}/service?serviceName=svc"))
        .await
        .ok();
    let missing = app.get(&format!("{V1}/service?serviceName=svc")).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
}

#[tokio::test(start_paused = true)]
async fn service_lists_page_per_group() {
    let app = App::new().await;
    for i in 0..5 {
        app.post(&format!(
            "{V1}/instance?serviceName=s{i}&ip=10.0.0.1&port=1"
        ))
        .await
        .ok();
    }
    app.post(&format!(
        "{V1}/instance?serviceName=other&groupName=g&ip=10.0.0.1&port=1"
    ))
    .await
    .ok();
    let page = app
        .get(&format!("{V1}/service/list?pageNo=2&pageSize=2"))
        .await
        .json();
    assert_eq!(page, serde_json::json!({"count":5,"doms":["s2","s3"]}));
    let g = app
        .get(&format!(
            "{V1}/service/list?pageNo=1&pageSize=2147483647&groupName=g"
        ))
        .await
        .json();
    assert_eq!(g, serde_json::json!({"count":1,"doms":["other"]}));
    let missing = app.get(&format!("{V1}/service/list?pageNo=1")).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert!(missing.body.contains("pageSize"));
    let v2 = app.get(&format!("{V2}/service/list")).await.json();
    assert_eq!(v2["data"]["count"], 5);
    assert_eq!(v2["data"]["services"].as_array().unwrap().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn v2_services_create_update_detail_delete() {
    let app = App::new().await;
    app.send(
        Method::POST,
        &format!("{V2}/service"),
        Some("serviceName=s2&groupName=g&ephemeral=true&protectThreshold=0.2"),
    )
    .await
    .ok();
    let detail = app
        .get(&format!("{V2}/service?serviceName=s2&groupName=g"))
        .await
        .json();
    assert_eq!(detail["data"]["ephemeral"], true);
    assert_eq!(detail["data"]["serviceName"], "s2");
    assert_eq!(detail["data"]["namespace"], "public");
    app.send(
        Method::PUT,
        &format!("{V2}/service"),
        Some("serviceName=s2&groupName=g&metadata=x%3Dy"),
    )
    .await
    .ok();
    let detail = app
        .get(&format!("{V2}/service?serviceName=s2&groupName=g"))
        .await
        .json();
    assert_eq!(detail["data"]["metadata"]["x"], "y");
    // An ephemeral service made through v2 takes ephemeral registrations.
    app.post(&format!(
        "{V1}/instance?serviceName=g@@s2&ip=10.0.0.1&port=1"
    ))
    .await
    .ok();
    let refused = app
        .send(
            Method::DELETE,
            &format!("{V2}/service"),
            Some("serviceName=s2&groupName=g"),
        )
        .await;
    assert_eq!(refused.json()["code"], 21009);
    app.delete(&format!(
        "{V1}/instance?serviceName=g@@s2&ip=10.0.0.1&port=1"
    ))
    .await
    .ok();
    app.send(
        Method::DELETE,
        &format!("{V2}/service"),
        Some("serviceName=s2&groupName=g"),
    )
    .await
    .ok();
    let missing = app
        .get(&format!("{V2}/service?serviceName=s2&groupName=g"))
        .await;
    assert_eq!(missing.json()["code"], 21008);
}

#[tokio::test(start_paused = true)]
async fn operator_endpoints_answer_what_clients_check() {
    let app = App::new().await;
    for path in [
        format!("{V1}/operator/metrics"),
        format!("{V1}/ops/metrics"),
    ] {
        assert_eq!(
            app.get(&path).await.ok().json(),
            serde_json::json!({"status":"UP"})
        );
    }
    app.post(&format!("{V1}/instance?serviceName=m&ip=10.0.0.1&port=1"))
        .await
        .ok();
    let full = app
        .get(&format!("{V1}/operator/metrics?onlyStatus=false"))
        .await
        .json();
    assert_eq!(
        (
            full["serviceCount"].as_u64(),
            full["instanceCount"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(
        app.get(&format!("{V2}/operator/metrics")).await.json()["data"]["status"],
        "UP"
    );

    let switches = app.get(&format!("{V1}/operator/switches")).await.json();
    assert_eq!(switches["clientBeatInterval"], 5000);
    assert_eq!(switches["lightBeatEnabled"], true);
    app.put(&format!(
        "{V1}/operator/switches?entry=pushEnabled&value=false"
    ))
    .await
    .ok();
    assert_eq!(
        app.get(&format!("{V1}/ops/switches")).await.json()["pushEnabled"],
        false
    );
    let bad = app
        .put(&format!(
            "{V1}/operator/switches?entry=pushEnabled&value=maybe"
        ))
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let unknown = app
        .put(&format!("{V1}/operator/switches?entry=nope&value=1"))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        app.get(&format!("{V2}/operator/switches")).await.json()["data"]["pushEnabled"],
        false
    );
    app.put(&format!("{V2}/operator/switches?entry=checkTimes&value=5"))
        .await
        .ok();
    assert_eq!(
        app.get(&format!("{V1}/operator/switches")).await.json()["checkTimes"],
        5
    );

    let health = app.get(&format!("{V1}/health/server")).await.json();
    assert!(health["msg"]
        .as_str()
        .unwrap()
        .contains("total services: 1"));
}

#[tokio::test(start_paused = true)]
async fn login_succeeds_on_every_path_with_auth_disabled() {
    let app = App::new().await;
    for path in [
        "/nacos/v1/auth/login",
        "/nacos/v1/auth/users/login",
        "/nacos/v3/auth/user/login",
    ] {
        let reply = app
            .send(
                Method::POST,
                &format!("{path}?username=nacos"),
                Some("password=whatever"),
            )
            .await;
        let body = reply.ok().json();
        assert!(!body["accessToken"].as_str().unwrap().is_empty(), "{path}");
        assert_eq!(body["tokenTtl"], 18000);
        assert_eq!(body["username"], "nacos");
    }
}

#[tokio::test(start_paused = true)]
async fn console_namespaces_are_created_listed_updated_and_deleted() {
    let app = App::new().await;
    const NS: &str = "/nacos/v1/console/namespaces";
    let list = app.get(NS).await.json();
    assert_eq!(
        list["data"][0]["namespace"], "",
        "the default namespace is listed as \"\""
    );
    assert_eq!(list["data"][0]["namespaceShowName"], "public");
    assert_eq!(
        app.post(&format!(
            "{NS}?customNamespaceId=dev&namespaceName=Dev&namespaceDesc=d"
        ))
        .await
        .ok()
        .body,
        "true"
    );
    let dup = app
        .post(&format!("{NS}?customNamespaceId=dev&namespaceName=Dev"))
        .await;
    assert_eq!(
        (dup.status, dup.body.as_str()),
        (StatusCode::OK, "false"),
        "Nacos' v1 console answers a namespace that exists with false"
    );
    assert_eq!(
        app.get(&format!(
            "{NS}?checkNamespaceIdExist=true&customNamespaceId=dev"
        ))
        .await
        .body,
        "true"
    );
    assert_eq!(
        app.get(&format!(
            "{NS}?checkNamespaceIdExist=true&customNamespaceId=qa"
        ))
        .await
        .body,
        "false"
    );
    app.put(&format!(
        "{NS}?namespace=dev&namespaceShowName=Development&namespaceDesc=x"
    ))
    .await
    .ok();
    let one = app
        .get(&format!("{NS}?show=all&namespaceId=dev"))
        .await
        .json();
    assert_eq!(one["namespaceShowName"], "Development");
    assert_eq!(one["type"], 2);
    // A generated id when none is given.
    app.post(&format!("{NS}?namespaceName=Generated"))
        .await
        .ok();
    assert_eq!(
        app.get(NS).await.json()["data"].as_array().unwrap().len(),
        3
    );
    // Refused while it holds services; then deleted.
    app.post(&format!(
        "{V1}/instance?serviceName=s&ip=10.0.0.1&port=1&namespaceId=dev"
    ))
    .await
    .ok();
    assert_eq!(
        app.delete(&format!("{NS}?namespaceId=dev")).await.status,
        StatusCode::BAD_REQUEST
    );
    app.delete(&format!(
        "{V1}/instance?serviceName=s&ip=10.0.0.1&port=1&namespaceId=dev"
    ))
    .await
    .ok();
    // The empty implicit service is purged after 60 s; then the namespace goes.
    app.advance_to(61_000).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            app.delete(&format!("{NS}?namespaceId=dev")).await.status == StatusCode::OK
        })
        .await
    );
    assert_eq!(
        app.get(&format!(
            "{NS}?checkNamespaceIdExist=true&customNamespaceId=dev"
        ))
        .await
        .body,
        "false"
    );
}

#[tokio::test(start_paused = true)]
async fn v2_console_namespaces() {
    let app = App::new().await;
    const NS: &str = "/nacos/v2/console/namespace";
    let created = app
        .send(Method::POST, NS, Some("namespaceId=qa&namespaceName=QA"))
        .await;
    assert_eq!(created.ok().json()["data"], true);
    assert_eq!(
        app.get(&format!("{NS}?namespaceId=qa")).await.json()["data"]["namespaceShowName"],
        "QA"
    );
    app.send(Method::PUT, NS, Some("namespaceId=qa&namespaceName=Q"))
        .await
        .ok();
    assert_eq!(
        app.get(&format!("{NS}/list")).await.json()["data"][1]["namespaceShowName"],
        "Q"
    );
    app.send(Method::DELETE, NS, Some("namespaceId=qa"))
        .await
        .ok();
    assert_eq!(
        app.get(&format!("{NS}?namespaceId=qa")).await.json()["code"],
        22001
    );
}

#[tokio::test(start_paused = true)]
async fn server_state_probes_and_cluster_endpoints() {
    let app = App::new().await;
    let state = app.get("/nacos/v1/console/server/state").await.json();
    assert_eq!(state["standalone_mode"], "standalone");
    assert_eq!(state["startup_mode"], "standalone");
    assert!(
        state.as_object().unwrap().values().all(Value::is_string),
        "every value a string"
    );
    assert_eq!(
        app.get("/nacos/v1/console/health/liveness").await.ok().body,
        "OK"
    );
    assert_eq!(
        app.get("/nacos/v1/console/health/readiness")
            .await
            .ok()
            .body,
        "OK"
    );
    assert_eq!(
        app.get("/nacos/v1/core/cluster/nodes").await.json()["data"][0]["state"],
        "UP"
    );
    assert_eq!(
        app.get("/nacos/v1/core/cluster/health").await.json()["data"],
        "UP"
    );
    assert_eq!(app.get("/health").await.json()["status"], "UP");
    assert_eq!(app.get("/ready").await.json()["status"], "UP");
}

#[tokio::test(start_paused = true)]
async fn metrics_expose_request_counts_latencies_and_registry_sizes() {
    let app = App::new().await;
    app.post(&format!("{V1}/instance?serviceName=met&ip=10.0.0.1&port=1"))
        .await
        .ok();
    let text = app.get("/metrics").await;
    let text = &text.ok().body;
    for needle in [
        "understudy_http_requests_total{route=\"/nacos/v1/ns/instance\",method=\"POST\",status=\"200\"}",
        "understudy_http_request_seconds_bucket",
        "understudy_instances{namespace=\"public\"} 1",
        "understudy_services{namespace=\"public\"} 1",
        "understudy_revision ",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn short_configured_timeouts_apply_to_http_instances() {
    let app = App::with(Settings {
        beat_interval_ms: Some(100),
        unhealthy_timeout_ms: Some(300),
        delete_timeout_ms: Some(600),
        ..Settings::default()
    })
    .await;
    app.post(&format!(
        "{V1}/instance?serviceName=fast&ip=10.0.0.1&port=1"
    ))
    .await
    .ok();
    let beat = app
        .put(&format!(
            "{V1}/instance/beat?serviceName=fast&ip=10.0.0.1&port=1"
        ))
        .await
        .json();
    assert_eq!(beat["clientBeatInterval"], 100);
    assert!(
        eventually(Duration::from_secs(1), || async {
            app.hosts("serviceName=fast").await.is_empty()
        })
        .await
    );
    assert!(app.elapsed() >= 600);
}

async fn listed(app: &App) -> Option<u64> {
    app.get(&format!("{V1}/service/list?pageNo=1&pageSize=10"))
        .await
        .json()["count"]
        .as_u64()
}
