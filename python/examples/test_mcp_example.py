"""nacos-sdk-python's AI service (``NacosAIService``, Nacos 3's MCP registry
over gRPC) against the ``understudy`` fixture: an MCP server released in
two versions with its tools, read back by name and by version with the
SDK's own models, and an endpoint registered and resolved to a live
instance of the server's service."""

import asyncio

from v2.nacos.ai.model.ai_param import (
    GetMcpServerParam,
    RegisterMcpServerEndpointParam,
    ReleaseMcpServerParam,
)
from v2.nacos.ai.model.mcp.mcp import (
    McpEndpointSpec,
    McpServerBasicInfo,
    McpServerRemoteServiceConfig,
    McpTool,
    McpToolSpecification,
)
from v2.nacos.ai.model.mcp.registry import ServerVersionDetail
from v2.nacos.ai.nacos_ai_service import NacosAIService

from sdk_config import client_config


def spec(version, latest):
    return McpServerBasicInfo(
        name="weather",
        protocol="mcp-sse",
        frontProtocol="mcp-sse",
        description="forecasts",
        versionDetail=ServerVersionDetail(version=version, is_latest=latest),
        remoteServerConfig=McpServerRemoteServiceConfig(exportPath="/sse"),
    )


def tools(*names):
    return McpToolSpecification(
        tools=[
            McpTool(
                name=name,
                description=f"the {name} forecast",
                inputSchema={"type": "object", "properties": {"city": {"type": "string"}}},
            )
            for name in names
        ]
    )


def test_an_mcp_server_is_released_queried_and_resolved_to_its_endpoint(understudy, tmp_path):
    async def scenario():
        ai = await NacosAIService.create_ai_service(client_config(understudy.server_addr, tmp_path))
        try:
            endpoint = McpEndpointSpec(
                type="REF", data={"serviceName": "weather-sse", "groupName": "DEFAULT_GROUP"}
            )
            mcp_id = await ai.release_mcp_server(
                ReleaseMcpServerParam(
                    server_spec=spec("1.0.0", False),
                    tool_spec=tools("today"),
                    mcp_endpoint_spec=endpoint,
                )
            )
            assert mcp_id
            again = await ai.release_mcp_server(
                ReleaseMcpServerParam(
                    server_spec=spec("1.1.0", True),
                    tool_spec=tools("today", "tomorrow"),
                    mcp_endpoint_spec=endpoint,
                )
            )
            assert again == mcp_id

            # By name: the last released version, with every version listed.
            latest = await ai.get_mcp_server(GetMcpServerParam(mcp_name="weather"))
            assert latest.id == mcp_id
            assert latest.versionDetail.version == "1.1.0"
            assert latest.versionDetail.is_latest
            assert sorted(v.version for v in latest.allVersions) == ["1.0.0", "1.1.0"]
            assert [t.name for t in latest.toolSpec.tools] == ["today", "tomorrow"]
            assert latest.remoteServerConfig.serviceRef.serviceName == "weather-sse"
            assert latest.backendEndpoints == []

            # By version.
            first = await ai.get_mcp_server(GetMcpServerParam(mcp_name="weather", version="1.0.0"))
            assert first.versionDetail.version == "1.0.0"
            assert not first.versionDetail.is_latest
            assert [t.name for t in first.toolSpec.tools] == ["today"]

            # An endpoint registered over this connection is a live instance
            # of the server's service, and the query resolves it.
            await ai.register_mcp_server_endpoint(
                RegisterMcpServerEndpointParam(
                    mcp_name="weather", address="10.0.0.9", port=8931, version="1.1.0"
                )
            )
            resolved = await ai.get_mcp_server(GetMcpServerParam(mcp_name="weather"))
            assert [(e.address, e.port, e.path) for e in resolved.backendEndpoints] == [
                ("10.0.0.9", 8931, "/sse")
            ]
        finally:
            await ai.shutdown()

    asyncio.run(scenario())
