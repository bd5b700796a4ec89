"""Nacos 3.1's A2A agent registry against the ``understudy`` fixture, with
the real clients and their own models: nacos-sdk-python's AI service over
gRPC releases an agent card in versions, reads it back and reaches the
agent at an endpoint it registers; nacos-maintainer-sdk-python's admin
client (``/nacos/v3/admin/ai/a2a``) registers, updates, lists, versions
and deletes one."""

import asyncio

import pytest
from a2a.types import AgentCapabilities, AgentCard, AgentSkill
from maintainer.ai.nacos_ai_maintainer_service import NacosAIMaintainerService
from v2.nacos.ai.model.ai_param import (
    DeregisterAgentEndpointParam,
    GetAgentCardParam,
    RegisterAgentEndpointParam,
    ReleaseAgentCardParam,
    SubscribeAgentCardParam,
)
from v2.nacos.ai.nacos_ai_service import NacosAIService
from v2.nacos.common.nacos_exception import NacosException

from sdk_config import client_config


def card(name, version):
    return AgentCard(
        name=name,
        description=f"plans, v{version}",
        url=f"http://{name}.example/a2a",
        version=version,
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="plan", name="plan", description="plans a trip", tags=["travel"])],
    )


def test_an_agent_card_is_released_in_versions_and_reached_at_its_endpoint(understudy, tmp_path):
    async def scenario():
        ai = await NacosAIService.create_ai_service(client_config(understudy.server_addr, tmp_path))
        try:
            # The first version is the latest; the second is not until a
            # third is released as the latest.
            await ai.release_agent_card(ReleaseAgentCardParam(agent_card=card("planner", "1.0.0")))
            await ai.release_agent_card(ReleaseAgentCardParam(agent_card=card("planner", "1.1.0")))
            await ai.release_agent_card(
                ReleaseAgentCardParam(agent_card=card("planner", "2.0.0"), set_as_latest=True)
            )

            latest = await ai.get_agent_card(GetAgentCardParam(agent_name="planner"))
            assert latest.version == "2.0.0"
            assert latest.latest_version
            assert latest.registration_type == "SERVICE"
            assert latest.skills[0].tags == ["travel"]
            assert latest.url == "http://planner.example/a2a", "no endpoint yet"

            # One version, by subscribing to it (the SDK's get_agent_card
            # hands its version over as the registration type).
            seen = []

            async def on_change(name, info):
                seen.append((name, info.version))

            subscription = SubscribeAgentCardParam(
                agent_name="planner", version="1.0.0", subscribe_callback=on_change
            )
            first = await ai.subscribe_agent_card(subscription)
            assert (first.version, first.description, first.latest_version) == (
                "1.0.0",
                "plans, v1.0.0",
                False,
            )
            await ai.unsubscribe_agent_card(subscription)

            # Registered as SERVICE, the agent is reached at the endpoint
            # this connection registers for the version, until it goes.
            await ai.register_agent_endpoint(
                RegisterAgentEndpointParam(
                    agent_name="planner", version="2.0.0", address="127.0.0.1", port=9100, path="/a2a"
                )
            )
            reached = await ai.get_agent_card(GetAgentCardParam(agent_name="planner"))
            assert reached.url == "http://127.0.0.1:9100/a2a"
            assert [(i.url, i.transport) for i in reached.additional_interfaces] == [
                ("http://127.0.0.1:9100/a2a", "JSONRPC")
            ]
            await ai.deregister_agent_endpoint(
                DeregisterAgentEndpointParam(
                    agent_name="planner", version="2.0.0", address="127.0.0.1", port=9100
                )
            )
            gone = await ai.get_agent_card(GetAgentCardParam(agent_name="planner"))
            assert gone.url == "http://planner.example/a2a"
        finally:
            await ai.shutdown()

    asyncio.run(scenario())


def test_the_admin_api_registers_updates_lists_and_deletes_an_agent(understudy, tmp_path):
    async def scenario():
        admin = await NacosAIMaintainerService.create_ai_service(client_config(understudy.server_addr, tmp_path))
        assert await admin.register_agent(card("scout", "1.0.0"), "public", "URL")
        # Registered once: a second register is refused (HTTP 409, as Nacos).
        with pytest.raises(NacosException, match="409"):
            await admin.register_agent(card("scout", "1.0.0"), "public", "URL")
        assert await admin.update_agent_card(card("scout", "1.1.0"), "public", False, "URL")
        assert await admin.update_agent_card(card("scout", "2.0.0"), "public", True, "URL")

        versions = await admin.list_all_version_of_agent("scout", "public")
        assert [(v.version, v.is_latest) for v in versions] == [
            ("1.0.0", False),
            ("1.1.0", False),
            ("2.0.0", True),
        ]
        assert all(v.create_at and v.update_at for v in versions)

        total, page, pages, agents = await admin.list_agent_cards_by_name("public", "scout", 1, 10)
        assert (total, page, pages) == (1, 1, 1)
        assert (agents[0].name, agents[0].latest_published_version) == ("scout", "2.0.0")
        total, _, _, _ = await admin.list_agent_cards_by_name("public", "sco", 1, 10)
        assert total == 0, "accurate search wants the whole name"
        total, _, _, found = await admin.search_agent_cards_by_name("public", "sco", 1, 10)
        assert total == 1 and found[0].name == "scout"

        middle = await admin.get_agent_card("scout", "1.1.0", "public", "URL")
        assert (middle.version, middle.description, middle.latest_version) == (
            "1.1.0",
            "plans, v1.1.0",
            False,
        )

        assert await admin.delete_agent("scout", "public", "1.0.0")
        versions = await admin.list_all_version_of_agent("scout", "public")
        assert [v.version for v in versions] == ["1.1.0", "2.0.0"]
        assert await admin.delete_agent("scout", "public", "")
        # No name lists every agent (the fixture's server is shared).
        _, _, _, left = await admin.list_agent_cards_by_name("public", "", 1, 100)
        assert "scout" not in [a.name for a in left]
        with pytest.raises(NacosException, match="404"):
            await admin.get_agent_card("scout", "", "public", "")

    asyncio.run(scenario())
