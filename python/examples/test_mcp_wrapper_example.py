"""nacos-mcp-wrapper-python as a real MCP registrant against the
``understudy`` fixture: an MCP server with one tool, run on SSE, registers
itself (its specification, its tool, its endpoint) as it does with Nacos
3, and nacos-sdk-python's AI service reads it back with the endpoint
resolved to the running server."""

import asyncio
import socket
import time

from nacos_mcp_wrapper.server.nacos_mcp import NacosMCP
from nacos_mcp_wrapper.server.nacos_settings import NacosSettings
from v2.nacos.ai.model.ai_param import GetMcpServerParam
from v2.nacos.ai.nacos_ai_service import NacosAIService
from v2.nacos.common.nacos_exception import NacosException

from sdk_config import client_config


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_wrapper_registers_its_server_tools_and_endpoint(understudy, tmp_path):
    port = free_port()
    settings = NacosSettings(SERVER_ADDR=understudy.server_addr, SERVICE_IP="127.0.0.1")
    server = NacosMCP("calculator", version="2.0.0", nacos_settings=settings, port=port,
                      log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    async def scenario():
        running = asyncio.create_task(server.run_sse_async())
        reader = await NacosAIService.create_ai_service(client_config(understudy.server_addr, tmp_path))
        try:
            deadline = time.monotonic() + 30
            detail = None
            while time.monotonic() < deadline:
                assert not running.done(), running
                try:
                    detail = await reader.get_mcp_server(GetMcpServerParam(mcp_name="calculator"))
                except NacosException:
                    detail = None
                if detail is not None and detail.backendEndpoints:
                    break
                await asyncio.sleep(0.2)
            assert detail is not None, "the wrapper released no server within 30 s"
            assert detail.protocol == "mcp-sse"
            assert detail.versionDetail.version == "2.0.0"
            assert [t.name for t in detail.toolSpec.tools] == ["add"]
            assert detail.toolSpec.tools[0].inputSchema["properties"].keys() == {"a", "b"}
            ref = detail.remoteServerConfig.serviceRef
            assert (ref.groupName, ref.serviceName) == ("DEFAULT_GROUP", "calculator::2.0.0")
            assert [(e.address, e.port, e.path) for e in detail.backendEndpoints] == [
                ("127.0.0.1", port, "/sse")
            ]
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await reader.shutdown()

    asyncio.run(scenario())
