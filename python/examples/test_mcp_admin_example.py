"""nacos-maintainer-sdk-python's AI admin client (Nacos 3's
``/nacos/v3/admin/ai/mcp`` over HTTP) against the ``understudy`` fixture:
create an MCP server, add a version that becomes the latest, list and
search it, read each version, delete it; every answer parsed with the
SDK's own models."""

import asyncio

import pytest

from maintainer.ai.nacos_ai_maintainer_service import NacosAIMaintainerService
from v2.nacos.ai.model.mcp.mcp import (
    McpServerBasicInfo,
    McpServerRemoteServiceConfig,
    McpTool,
    McpToolSpecification,
)
from v2.nacos.ai.model.mcp.registry import ServerVersionDetail
from v2.nacos.common.nacos_exception import NacosException

from sdk_config import client_config


def spec(version):
    return McpServerBasicInfo(
        name="search",
        protocol="mcp-streamable",
        frontProtocol="mcp-streamable",
        description=f"search {version}",
        versionDetail=ServerVersionDetail(version=version),
        remoteServerConfig=McpServerRemoteServiceConfig(exportPath="/mcp"),
    )


def tools(*names):
    return McpToolSpecification(
        tools=[McpTool(name=n, description=n, inputSchema={"type": "object"}) for n in names]
    )


def test_the_admin_api_creates_updates_lists_and_deletes_a_server(understudy, tmp_path):
    async def scenario():
        admin = await NacosAIMaintainerService.create_ai_service(client_config(understudy.server_addr, tmp_path))
        assert await admin.create_mcp_server("public", "search", spec("1.0.0"), tools("find"), None)
        # Created once: a second create is refused (HTTP 409, as Nacos).
        with pytest.raises(NacosException, match="409"):
            await admin.create_mcp_server("public", "search", spec("1.0.0"), None, None)
        assert await admin.update_mcp_server(
            "public", "search", True, spec("2.0.0"), tools("find", "rank"), None
        )

        total, page, pages, servers = await admin.list_mcp_servers("public", "search", 1, 10)
        assert (total, page, pages) == (1, 1, 1)
        assert servers[0].name == "search"
        assert servers[0].versionDetail.version == "2.0.0"
        assert servers[0].versionDetail.is_latest
        total, _, _, found = await admin.search_mcp_server("public", "ear", 1, 10)
        assert total == 1 and found[0].name == "search"
        total, _, _, _ = await admin.list_mcp_servers("public", "ear", 1, 10)
        assert total == 0, "accurate search wants the whole name"

        latest = await admin.get_mcp_server_detail("public", "search", "")
        assert latest.versionDetail.version == "2.0.0"
        assert [t.name for t in latest.toolSpec.tools] == ["find", "rank"]
        assert sorted(v.version for v in latest.allVersions) == ["1.0.0", "2.0.0"]
        first = await admin.get_mcp_server_detail("public", "search", "1.0.0")
        assert first.description == "search 1.0.0"
        assert not first.versionDetail.is_latest

        assert await admin.delete_mcp_server("public", "search")
        total, _, _, _ = await admin.list_mcp_servers("public", "", 1, 10)
        assert total == 0

    asyncio.run(scenario())
