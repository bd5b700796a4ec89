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
