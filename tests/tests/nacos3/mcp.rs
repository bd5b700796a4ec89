//! Nacos 3's MCP registry over gRPC at the wire (the Python SDK and the MCP
//! wrapper run against it in `python/examples`, where CI installs them):
//! release in versions with tools, query by name and version, endpoints
//! owned by the registering connection, the items it is stored as, and
//! refusals that name the field.

use std::time::Duration;

use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

fn release(version: &str, latest: bool, tools: &[&str]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t, "description": "d", "inputSchema": {"type": "object"}}))
        .collect();
    json!({"headers":{},"module":"ai","namespaceId":"public","mcpName":"weather",
        "serverSpecification":{"name":"weather","protocol":"mcp-sse","frontProtocol":"mcp-sse",
            "description":"forecasts","versionDetail":{"version":version,"is_latest":latest},
            "remoteServerConfig":{"exportPath":"/sse"}},
        "toolSpecification":{"tools":tools},
        "endpointSpecification":{"type":"REF","data":{"serviceName":"weather-sse","groupName":"DEFAULT_GROUP"}}})
}

fn query(version: Option<&str>) -> Value {
    json!({"headers":{},"module":"ai","namespaceId":"public","mcpName":"weather","version":version})
}

fn endpoint(kind: &str, port: u16) -> Value {
    json!({"headers":{},"module":"ai","namespaceId":"public","mcpName":"weather",
        "address":"10.0.0.9","port":port,"version":"1.1.0","type":kind})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_is_released_in_versions_queried_and_resolved() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let client = RawClient::connect(server.grpc, None).await?;
    assert_eq!(client.abilities()["mcp"], true, "{}", client.abilities());

    let (kind, first) = client
        .call(
            "ReleaseMcpServerRequest",
            release("1.0.0", false, &["today"]),
        )
        .await?;
    assert_eq!(kind, "ReleaseMcpServerResponse");
    assert_eq!(first["success"], true, "{first}");
    let id = first["mcpId"].as_str().unwrap_or_default().to_owned();
    assert_eq!(id.len(), 36, "a UUID: {first}");
    let (_, second) = client
        .call(
            "ReleaseMcpServerRequest",
            release("1.1.0", true, &["today", "tomorrow"]),
        )
        .await?;
    assert_eq!(second["mcpId"], id.as_str(), "{second}");
    let (_, twice) = client
        .call("ReleaseMcpServerRequest", release("1.1.0", true, &[]))
        .await?;
    assert_eq!(
        (twice["success"].clone(), twice["errorCode"].clone()),
        (json!(false), json!(409)),
        "{twice}"
    );

    let (kind, latest) = client.call("QueryMcpServerRequest", query(None)).await?;
    assert_eq!(kind, "QueryMcpServerResponse");
    let detail = &latest["mcpServerDetailInfo"];
    assert_eq!(detail["id"], id.as_str());
    assert_eq!(detail["version"], "1.1.0");
    assert_eq!(detail["versionDetail"]["is_latest"], true);
    assert_eq!(detail["allVersions"].as_array().map(Vec::len), Some(2));
    assert_eq!(detail["toolSpec"]["tools"][1]["name"], "tomorrow");
    assert_eq!(detail["backendEndpoints"], json!([]));
    let (_, old) = client
        .call("QueryMcpServerRequest", query(Some("1.0.0")))
        .await?;
    assert_eq!(
        old["mcpServerDetailInfo"]["versionDetail"]["is_latest"], false,
        "{old}"
    );
    assert_eq!(
        old["mcpServerDetailInfo"]["toolSpec"]["tools"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    // Stored as Nacos stores it: config items of its namespace.
    let versions = reqwest::get(server.url(&format!(
        "/nacos/v1/cs/configs?dataId={id}-mcp-versions.json&group=mcp-server-versions"
    )))
    .await?
    .text()
    .await?;
    assert!(
        versions.contains("\"latestPublishedVersion\":\"1.1.0\""),
        "{versions}"
    );

    // An endpoint is an instance of the REF service owned by the
    // connection that registered it: it goes when that connection does.
    let registrant = RawClient::connect(server.grpc, None).await?;
    let (kind, registered) = registrant
        .call(
            "McpServerEndpointRequest",
            endpoint("registerEndpoint", 8931),
        )
        .await?;
    assert_eq!(kind, "McpServerEndpointResponse");
    assert_eq!(registered["type"], "registerEndpoint", "{registered}");
    let (_, resolved) = client.call("QueryMcpServerRequest", query(None)).await?;
    let endpoints = &resolved["mcpServerDetailInfo"]["backendEndpoints"];
    assert_eq!(
        (
            endpoints[0]["address"].clone(),
            endpoints[0]["port"].clone(),
            endpoints[0]["path"].clone()
        ),
        (json!("10.0.0.9"), json!(8931), json!("/sse")),
        "{resolved}"
    );
    drop(registrant);
    assert!(
        eventually(Duration::from_secs(10), || async {
            let Ok((_, now)) = client.call("QueryMcpServerRequest", query(None)).await else {
                return false;
            };
            now["mcpServerDetailInfo"]["backendEndpoints"] == json!([])
        })
        .await,
        "the endpoint left with its connection"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mcp_requests_are_refused_naming_the_field() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let client = RawClient::connect(server.grpc, None).await?;
    let (_, missing) = client
        .call(
            "QueryMcpServerRequest",
            json!({"namespaceId":"public","mcpName":"nope"}),
        )
        .await?;
    assert_eq!(missing["errorCode"], 404, "{missing}");
    let (_, nameless) = client
        .call("QueryMcpServerRequest", json!({"namespaceId":"public"}))
        .await?;
    assert!(
        nameless["message"]
            .as_str()
            .unwrap_or("")
            .contains("mcpName"),
        "{nameless}"
    );
    let (_, versionless) = client
        .call(
            "ReleaseMcpServerRequest",
            json!({"serverSpecification":{"name":"x","protocol":"stdio"}}),
        )
        .await?;
    assert!(
        versionless["message"]
            .as_str()
            .unwrap_or("")
            .contains("versionDetail.version"),
        "{versionless}"
    );
    let (_, no_spec) = client.call("ReleaseMcpServerRequest", json!({})).await?;
    assert!(
        no_spec["message"]
            .as_str()
            .unwrap_or("")
            .contains("serverSpecification"),
        "{no_spec}"
    );
    let (_, unknown) = client
        .call(
            "McpServerEndpointRequest",
            json!({"mcpName":"nope","type":"registerEndpoint"}),
        )
        .await?;
    assert_eq!(unknown["errorCode"], 404, "{unknown}");
    Ok(())
}

/// The admin plane, form-encoded as nacos-maintainer-sdk-python sends it
/// (the SDK itself runs against it in `python/examples`): create with a
/// direct endpoint, update to a new latest version, list exact and blur,
/// read each version, delete one version, then the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_creates_updates_lists_and_deletes_a_server() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let http = reqwest::Client::new();
    let url = server.url("/nacos/v3/admin/ai/mcp");
    let spec = |version: &str| {
        json!({"name":"search","protocol":"mcp-streamable","description":format!("search {version}"),
            "versionDetail":{"version":version},"remoteServerConfig":{"exportPath":"/mcp"}})
        .to_string()
    };
    let direct = json!({"type":"DIRECT","data":{"address":"10.0.0.5","port":"9000"}}).to_string();
    let created: Value = http
        .post(&url)
        .form(&[
            ("mcpName", "search"),
            ("serverSpecification", &spec("1.0.0")),
            ("endpointSpecification", &direct),
            ("toolSpecification", r#"{"tools":[{"name":"find"}]}"#),
        ])
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(created["code"], 0, "{created}");
    let id = created["data"].as_str().unwrap_or_default().to_owned();
    let again = http
        .post(&url)
        .form(&[("serverSpecification", spec("1.0.0"))])
        .send()
        .await?;
    assert_eq!(again.status(), reqwest::StatusCode::CONFLICT);

    let updated: Value = http
        .put(&url)
        .form(&[
            ("serverSpecification", spec("2.0.0")),
            ("latest", "true".to_owned()),
        ])
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(updated["data"], "ok", "{updated}");

    let list = |query: &'static str| {
        let http = http.clone();
        let url = server.url(&format!("/nacos/v3/admin/ai/mcp/list?{query}"));
        async move { http.get(url).send().await?.json::<Value>().await }
    };
    let exact = list("mcpName=search").await?;
    assert_eq!(exact["data"]["totalCount"], 1, "{exact}");
    let item = &exact["data"]["pageItems"][0];
    assert_eq!(
        (item["id"].clone(), item["version"].clone()),
        (json!(id), json!("2.0.0")),
        "{exact}"
    );
    assert_eq!(item["versionDetail"]["is_latest"], true, "{exact}");
    assert_eq!(list("mcpName=ear").await?["data"]["totalCount"], 0);
    assert_eq!(
        list("mcpName=ear&search=blur").await?["data"]["totalCount"],
        1
    );

    let get = |query: String| {
        let http = http.clone();
        let url = server.url(&format!("/nacos/v3/admin/ai/mcp?{query}"));
        async move { http.get(url).send().await?.json::<Value>().await }
    };
    let first = get("mcpName=search&version=1.0.0".to_owned()).await?;
    let detail = &first["data"];
    assert_eq!(detail["description"], "search 1.0.0", "{first}");
    assert_eq!(detail["capabilities"], json!(["TOOL"]), "{first}");
    assert_eq!(
        (
            detail["backendEndpoints"][0]["address"].clone(),
            detail["backendEndpoints"][0]["port"].clone()
        ),
        (json!("10.0.0.5"), json!(9000)),
        "the direct endpoint, as an instance of mcp-endpoints/search::1.0.0: {first}"
    );
    let by_id = get(format!("mcpId={id}")).await?;
    assert_eq!(by_id["data"]["version"], "2.0.0", "{by_id}");

    // One version goes, with its direct endpoint; then the rest.
    let deleted: Value = http
        .delete(server.url("/nacos/v3/admin/ai/mcp?mcpName=search&version=1.0.0"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(deleted["data"], "ok", "{deleted}");
    let endpoints = server
        .instance_list("serviceName=search::1.0.0&groupName=mcp-endpoints")
        .await;
    assert_eq!(endpoints["hosts"], json!([]), "{endpoints}");
    let left = get("mcpName=search".to_owned()).await?;
    assert_eq!(
        left["data"]["allVersions"].as_array().map(Vec::len),
        Some(1),
        "{left}"
    );
    let all: Value = http
        .delete(server.url("/nacos/v3/admin/ai/mcp?mcpName=search"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(all["data"], "ok", "{all}");
    assert_eq!(list("").await?["data"]["totalCount"], 0);
    Ok(())
}
