//! A table of malformed requests: each gets a 4xx whose body names the
//! offending field; none causes a 5xx, a panic or a partial write.

use axum::body::Body;
use axum::http::{Method, Request};
use understudy_server::config::Settings;
use understudy_tests::App;

const V1: &str = "/nacos/v1/ns";
const V2: &str = "/nacos/v2/ns";

struct Case {
    name: &'static str,
    method: Method,
    uri: String,
    form: Option<String>,
    /// Expected status.
    status: u16,
    /// Text the body must contain (the field's name, mostly).
    mentions: &'static str,
}

fn case(
    name: &'static str,
    method: Method,
    uri: impl Into<String>,
    status: u16,
    mentions: &'static str,
) -> Case {
    Case {
        name,
        method,
        uri: uri.into(),
        form: None,
        status,
        mentions,
    }
}

fn with_form(mut c: Case, form: impl Into<String>) -> Case {
    c.form = Some(form.into());
    c
}

fn register(query: &str) -> String {
    format!("{V1}/instance?{query}")
}

fn cases() -> Vec<Case> {
    let ok = "serviceName=t&ip=10.0.0.9&port=80";
    let long_value = "x".repeat(300);
    let many_entries: Vec<String> = (0..70).map(|i| format!("k{i}=v")).collect();
    let post = Method::POST;
    vec![
        case("missing serviceName", post.clone(), register("ip=10.0.0.9&port=80"), 400, "serviceName"),
        case("blank serviceName", post.clone(), register("serviceName=&ip=10.0.0.9&port=80"), 400, "serviceName"),
        case("missing ip", post.clone(), register("serviceName=t&port=80"), 400, "'ip'"),
        case("missing port", post.clone(), register("serviceName=t&ip=10.0.0.9"), 400, "'port'"),
        case("port 70000", post.clone(), register("serviceName=t&ip=10.0.0.9&port=70000"), 400, "port"),
        case("port -1", post.clone(), register("serviceName=t&ip=10.0.0.9&port=-1"), 400, "port"),
        case("port abc", post.clone(), register("serviceName=t&ip=10.0.0.9&port=abc"), 400, "port"),
        case("weight abc", post.clone(), register(&format!("{ok}&weight=abc")), 400, "weight"),
        case("weight -1", post.clone(), register(&format!("{ok}&weight=-1")), 400, "weight"),
        case("weight NaN", post.clone(), register(&format!("{ok}&weight=NaN")), 400, "weight"),
        case("weight above 10000", post.clone(), register(&format!("{ok}&weight=10000.5")), 400, "weight"),
        case("weight overflowing to infinity", post.clone(), register(&format!("{ok}&weight=1e999")), 400, "weight"),
        case("serviceName not UTF-8", post.clone(), register("serviceName=%FF%FE&ip=10.0.0.9&port=80"), 400, "serviceName"),
        case("parameter name not UTF-8", post.clone(), register(&format!("{ok}&%C3%28=1")), 400, "parameter"),
        case("serviceName starting with @", post.clone(), register("serviceName=%40x&ip=10.0.0.9&port=80"), 400, "serviceName"),
        case("serviceName with whitespace", post.clone(), register("serviceName=a%20b&ip=10.0.0.9&port=80"), 400, "serviceName"),
        case("grouped name without a service", post.clone(), register("serviceName=grp%40%40&ip=10.0.0.9&port=80"), 400, "serviceName"),
        case("bad groupName", post.clone(), register(&format!("{ok}&groupName=a%2Fb")), 400, "groupName"),
        case("bad namespaceId", post.clone(), register(&format!("{ok}&namespaceId=a%2Fb")), 400, "namespaceId"),
        case("bad clusterName", post.clone(), register(&format!("{ok}&clusterName=a.b")), 400, "'cluster' is illegal"),
        case("ip with whitespace", post.clone(), register("serviceName=t&ip=10.0.0.9%20x&port=80"), 400, "ip"),
        case("garbage JSON metadata", post.clone(), register(&format!("{ok}&metadata=%7Bnope")), 400, "metadata"),
        case("nested JSON metadata", post.clone(), register(&format!("{ok}&metadata=%7B%22a%22%3A%7B%7D%7D")), 400, "metadata"),
        case("metadata pair without =", post.clone(), register(&format!("{ok}&metadata=novalue")), 400, "metadata"),
        case("metadata value over the limit", post.clone(), register(&format!("{ok}&metadata=k%3D{long_value}")), 400, "metadata"),
        case("too many metadata entries", post.clone(), register(&format!("{ok}&metadata={}", many_entries.join("%2C"))), 400, "metadata"),
        case("malformed beat timeout", post.clone(), register(&format!("{ok}&metadata=preserved.heart.beat.timeout%3Dsoon")), 400, "metadata"),
        case("beat timeout below interval", post.clone(), register(&format!("{ok}&metadata=preserved.heart.beat.timeout%3D10")), 400, "metadata"),
        case("garbage beat JSON", Method::PUT, format!("{V1}/instance/beat?serviceName=t&beat=%7Bgarbage"), 400, "beat"),
        case("beat JSON with port 70000", Method::PUT, format!("{V1}/instance/beat?serviceName=t&beat=%7B%22ip%22%3A%221.2.3.4%22%2C%22port%22%3A70000%7D"), 400, "port"),
        case("light beat without ip", Method::PUT, format!("{V1}/instance/beat?serviceName=t&port=80"), 400, "'ip'"),
        case("wrong method on list", Method::PATCH, format!("{V1}/instance/list?serviceName=t"), 405, "PATCH"),
        case("unknown endpoint", Method::GET, "/nacos/v1/ns/nothing", 404, "/nacos/v1/ns/nothing"),
        case("protectThreshold abc", post.clone(), format!("{V1}/service?serviceName=s&protectThreshold=abc"), 400, "protectThreshold"),
        case("protectThreshold 2", post.clone(), format!("{V1}/service?serviceName=s&protectThreshold=2"), 400, "protectThreshold"),
        case("garbage selector", post.clone(), format!("{V1}/service?serviceName=s&selector=%7B"), 400, "selector"),
        case("unknown selector type", post.clone(), format!("{V1}/service?serviceName=s&selector=%7B%22type%22%3A%22x%22%7D"), 400, "selector"),
        case("negative pageNo", Method::GET, format!("{V1}/service/list?pageNo=-1&pageSize=10"), 400, "pageNo"),
        case("pageSize abc", Method::GET, format!("{V2}/service/list?pageSize=abc"), 400, "pageSize"),
        case("health without healthy", Method::PUT, format!("{V1}/health/instance?serviceName=t&ip=10.0.0.9&port=80"), 400, "healthy"),
        case("switch without entry", Method::PUT, format!("{V1}/operator/switches?value=1"), 400, "entry"),
        case("bad namespace id", post.clone(), "/nacos/v1/console/namespaces?customNamespaceId=a%2Fb&namespaceName=x", 400, "customNamespaceId"),
        case("namespace name with @", post.clone(), "/nacos/v1/console/namespaces?customNamespaceId=ok&namespaceName=a%40b", 400, "namespaceName"),
        case("list with a bad cluster filter", Method::GET, format!("{V1}/instance/list?serviceName=t&clusters=a.b"), 400, "clusters"),
        case("v2 register without ip", post.clone(), format!("{V2}/instance?serviceName=t&port=80"), 400, "\"code\":10000"),
        case("v2 bad weight", post.clone(), format!("{V2}/instance?serviceName=t&ip=10.0.0.9&port=80&weight=x"), 400, "\"code\":21001"),
        case("persistent into ephemeral", post.clone(), register("serviceName=kept&ip=10.0.0.2&port=80&ephemeral=false"), 400, "ephemeral service"),
        with_form(
            case("garbage JSON body is ignored, fields still missing", post.clone(), format!("{V1}/instance"), 400, "serviceName"),
            "{\"serviceName\":",
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn malformed_requests_are_refused_by_field_and_change_nothing() {
    let app = App::with(Settings {
        max_metadata_value_bytes: Some(256),
        max_body_bytes: Some(4096),
        ..Settings::default()
    })
    .await;
    app.post(&format!(
        "{V1}/instance?serviceName=kept&ip=10.0.0.1&port=80&metadata=a%3Db"
    ))
    .await
    .ok();
    let before = app
        .get(&format!("{V1}/instance/list?serviceName=kept"))
        .await
        .json()["hosts"]
        .clone();
    let revision = app.node.registry().revision();

    let table = cases();
    assert!(table.len() >= 30);
    for c in &table {
        let reply = app.send(c.method.clone(), &c.uri, c.form.as_deref()).await;
        assert_eq!(
            reply.status.as_u16(),
            c.status,
            "{}: {}",
            c.name,
            reply.body
        );
        assert!(
            reply.body.contains(c.mentions),
            "{}: body does not mention {:?}: {}",
            c.name,
            c.mentions,
            reply.body
        );
    }

    // A body over the limit is refused before it is read whole.
    let big = format!(
        "serviceName=t&ip=10.0.0.9&port=80&metadata=k%3D{}",
        "x".repeat(8192)
    );
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("{V1}/instance"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(big))
        .unwrap();
    let reply = app.raw(request).await;
    assert_eq!(reply.status.as_u16(), 413, "{}", reply.body);
    assert!(reply.body.contains("body"), "{}", reply.body);

    // Nothing was written, and the server still answers with the old data.
    assert_eq!(
        app.node.registry().revision(),
        revision,
        "a refused request wrote something"
    );
    let after = app
        .get(&format!("{V1}/instance/list?serviceName=kept"))
        .await;
    assert_eq!(after.ok().json()["hosts"], before);
    app.post(&format!("{V1}/instance?serviceName=t&ip=10.0.0.9&port=80"))
        .await
        .ok();
}
