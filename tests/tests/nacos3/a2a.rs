//! Nacos 3.1's A2A agent registry at the wire (the Python SDK and the
//! maintainer SDK run against it in `python/examples`, where CI installs
//! them): cards released in versions over gRPC, read by name and
//! version, endpoints owned by the registering connection and put into a
//! `SERVICE` agent's card, the admin API's register, update, list,
//! versions and delete, and refusals that name the field.

use std::time::Duration;

use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

fn card(version: &str) -> Value {
    json!({"name":"planner","version":version,"protocolVersion":"0.3.0",
        "preferredTransport":"JSONRPC","url":"http://planner.example/a2a",
        "description":format!("plans, v{version}"),
        "capabilities":{"streaming":true},"defaultInputModes":["text"],
        "defaultOutputModes":["text"],
        "skills":[{"id":"plan","name":"plan","description":"plans a trip","tags":["travel"]}]})
}

fn release(version: &str, latest: bool) -> Value {
    json!({"headers":{},"module":"ai","namespaceId":"public","agentName":"planner",
        "agentCard":card(version),"registrationType":"SERVICE","setAsLatest":latest})
}

fn query(version: Option<&str>) -> Value {
    json!({"headers":{},"module":"ai","namespaceId":"public","agentName":"planner",
        "version":version})
}

fn endpoint(kind: &str, port: u16) -> Value {
    json!({"headers":{},"module":"ai","namespaceId":"public","agentName":"planner","type":kind,
        "endpoint":{"transport":"JSONRPC","address":"10.0.0.8","port":port,"path":"/a2a",
            "supportTls":false,"version":"2.0.0"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_card_is_released_in_versions_queried_and_reached_at_its_endpoint(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let client = RawClient::connect(server.grpc, None).await?;
    assert_eq!(client.abilities()["agent"], true, "{}", client.abilities());

    for (version, latest) in [("1.0.0", false), ("1.1.0", false), ("2.0.0", true)] {
        let (kind, released) = client
            .call("ReleaseAgentCardRequest", release(version, latest))
            .await?;
        assert_eq!(kind, "ReleaseAgentCardResponse");
        assert_eq!(released["success"], true, "{version}: {released}");
    }
    // Released again: left as it was, and not an error (as in Nacos).
    let mut changed = release("1.0.0", true);
    changed["agentCard"]["description"] = json!("changed");
    let (_, again) = client.call("ReleaseAgentCardRequest", changed).await?;
    assert_eq!(again["success"], true, "{again}");

    let (kind, latest) = client.call("QueryAgentCardRequest", query(None)).await?;
    assert_eq!(kind, "QueryAgentCardResponse");
    let info = &latest["agentCardDetailInfo"];
    assert_eq!(
        (
            info["version"].clone(),
            info["latestVersion"].clone(),
            info["registrationType"].clone()
        ),
        (json!("2.0.0"), json!(true), json!("SERVICE")),
        "{latest}"
    );
    assert_eq!(info["skills"][0]["tags"], json!(["travel"]), "{latest}");
    assert_eq!(info["url"], "http://planner.example/a2a", "no endpoint yet");
    let (_, first) = client
        .call("QueryAgentCardRequest", query(Some("1.0.0")))
        .await?;
    let first = &first["agentCardDetailInfo"];
    assert_eq!(
        (first["description"].clone(), first["latestVersion"].clone()),
        (json!("plans, v1.0.0"), json!(false)),
        "{first}"
    );

    // Stored as Nacos stores it: config items of its namespace.
    let versions = reqwest::get(server.url("/nacos/v1/cs/configs?dataId=planner&group=agent"))
        .await?
        .text()
        .await?;
    assert!(
        versions.contains("\"latestPublishedVersion\":\"2.0.0\""),
        "{versions}"
    );

    // An endpoint is an instance of agent-endpoints/planner::2.0.0 owned
    // by the connection that registered it; the card is reached at it
    // until that connection goes.
    let registrant = RawClient::connect(server.grpc, None).await?;
    let (kind, registered) = registrant
        .call("AgentEndpointRequest", endpoint("registerEndpoint", 9100))
        .await?;
    assert_eq!(kind, "AgentEndpointResponse");
    assert_eq!(registered["type"], "registerEndpoint", "{registered}");
    let (_, reached) = client.call("QueryAgentCardRequest", query(None)).await?;
    let reached = &reached["agentCardDetailInfo"];
    assert_eq!(reached["url"], "http://10.0.0.8:9100/a2a", "{reached}");
    assert_eq!(
        reached["additionalInterfaces"],
        json!([{"url":"http://10.0.0.8:9100/a2a","transport":"JSONRPC"}]),
        "{reached}"
    );
    drop(registrant);
    assert!(
        eventually(Duration::from_secs(10), || async {
            let Ok((_, now)) = client.call("QueryAgentCardRequest", query(None)).await else {
                return false;
            };
            now["agentCardDetailInfo"]["url"] == "http://planner.example/a2a"
        })
        .await,
        "the endpoint left with its connection"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agent_requests_are_refused_naming_the_field() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let client = RawClient::connect(server.grpc, None).await?;
    let says = |reply: &Value, text: &str| {
        reply["success"] == false && reply["message"].as_str().unwrap_or("").contains(text)
    };
    let (_, missing) = client
        .call("QueryAgentCardRequest", json!({"agentName":"nope"}))
        .await?;
    assert_eq!(missing["errorCode"], 404, "{missing}");
    let (_, nameless) = client.call("QueryAgentCardRequest", json!({})).await?;
    assert!(says(&nameless, "agentName"), "{nameless}");
    let (_, no_card) = client.call("ReleaseAgentCardRequest", json!({})).await?;
    assert!(says(&no_card, "agentCard"), "{no_card}");
    let mut urlless = card("1");
    urlless.as_object_mut().map(|c| c.remove("url"));
    let (_, no_url) = client
        .call("ReleaseAgentCardRequest", json!({"agentCard":urlless}))
        .await?;
    assert!(says(&no_url, "agentCard.url"), "{no_url}");
    let (_, bad_type) = client
        .call(
            "ReleaseAgentCardRequest",
            json!({"agentCard":card("1"),"registrationType":"DNS"}),
        )
        .await?;
    assert!(says(&bad_type, "registrationType"), "{bad_type}");
    let mut versionless = endpoint("registerEndpoint", 9100);
    versionless["endpoint"]["version"] = Value::Null;
    let (_, no_version) = client.call("AgentEndpointRequest", versionless).await?;
    assert!(says(&no_version, "endpoint.version"), "{no_version}");
    let (_, bad_port) = client
        .call("AgentEndpointRequest", endpoint("registerEndpoint", 0))
        .await?;
    assert!(says(&bad_port, "endpoint.port"), "{bad_port}");
    let (_, bad_kind) = client
        .call("AgentEndpointRequest", endpoint("moveEndpoint", 9100))
        .await?;
    assert!(says(&bad_kind, "type"), "{bad_kind}");
    Ok(())
}

/// The admin plane, with parameters in the query string as
/// nacos-maintainer-sdk-python sends them (the SDK itself runs against it
/// in `python/examples`): register, refuse a second register, update to
/// a new version without and with `setAsLatest`, list exact and blur, the
/// versions, read each version, delete one version, then the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_registers_updates_lists_and_deletes_an_agent() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, query: Vec<(&str, String)>| {
        let request = http.request(method, server.url(path)).query(&query);
        async move { request.send().await?.json::<Value>().await }
    };
    let a2a = "/nacos/v3/admin/ai/a2a";
    let card_of = |v: &str| ("agentCard", card(v).to_string());
    let registered = call(
        reqwest::Method::POST,
        a2a,
        vec![card_of("1.0.0"), ("agentName", "planner".to_owned())],
    )
    .await?;
    assert_eq!(registered["data"], "ok", "{registered}");
    let twice = call(reqwest::Method::POST, a2a, vec![card_of("1.0.0")]).await?;
    assert_eq!(twice["code"], 20005, "{twice}");
    for (version, latest) in [("1.1.0", "false"), ("2.0.0", "true")] {
        let updated = call(
            reqwest::Method::PUT,
            a2a,
            vec![card_of(version), ("setAsLatest", latest.to_owned())],
        )
        .await?;
        assert_eq!(updated["data"], "ok", "{version}: {updated}");
    }

    let versions = call(
        reqwest::Method::GET,
        "/nacos/v3/admin/ai/a2a/version/list",
        vec![("agentName", "planner".to_owned())],
    )
    .await?;
    let summary: Vec<(Value, Value)> = versions["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["version"].clone(), v["isLatest"].clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (json!("1.0.0"), json!(false)),
            (json!("1.1.0"), json!(false)),
            (json!("2.0.0"), json!(true))
        ],
        "{versions}"
    );

    let list = |query: Vec<(&str, String)>| {
        call(reqwest::Method::GET, "/nacos/v3/admin/ai/a2a/list", query)
    };
    let exact = list(vec![("agentName", "planner".to_owned())]).await?;
    assert_eq!(exact["data"]["totalCount"], 1, "{exact}");
    let item = &exact["data"]["pageItems"][0];
    assert_eq!(
        (
            item["version"].clone(),
            item["latestPublishedVersion"].clone(),
            item["registrationType"].clone()
        ),
        (json!("2.0.0"), json!("2.0.0"), json!("URL")),
        "{exact}"
    );
    let partial = || vec![("agentName", "plan".to_owned())];
    assert_eq!(list(partial()).await?["data"]["totalCount"], 0);
    let mut blur = partial();
    blur.push(("search", "blur".to_owned()));
    assert_eq!(list(blur).await?["data"]["totalCount"], 1);

    let get = |version: &str| {
        let mut query = vec![("agentName", "planner".to_owned())];
        if !version.is_empty() {
            query.push(("version", version.to_owned()));
        }
        call(reqwest::Method::GET, a2a, query)
    };
    let middle = get("1.1.0").await?;
    assert_eq!(
        (
            middle["data"]["description"].clone(),
            middle["data"]["latestVersion"].clone()
        ),
        (json!("plans, v1.1.0"), json!(false)),
        "{middle}"
    );
    let missing = get("9.9.9").await?;
    assert_eq!(missing["code"], 50101, "{missing}");

    // The latest goes: the agent has none until another is set.
    let deleted = call(
        reqwest::Method::DELETE,
        a2a,
        vec![
            ("agentName", "planner".to_owned()),
            ("version", "2.0.0".to_owned()),
        ],
    )
    .await?;
    assert_eq!(deleted["data"], "ok", "{deleted}");
    assert_eq!(get("").await?["code"], 50101);
    assert_eq!(get("1.0.0").await?["data"]["version"], "1.0.0");
    let all = call(
        reqwest::Method::DELETE,
        a2a,
        vec![("agentName", "planner".to_owned())],
    )
    .await?;
    assert_eq!(all["data"], "ok", "{all}");
    assert_eq!(list(Vec::new()).await?["data"]["totalCount"], 0);
    assert_eq!(get("1.0.0").await?["code"], 50100);
    Ok(())
}
