"""The ``understudy_sim`` fixture: a three-node cluster in two DCs (1 and 2
in hz, 3 in sh). A nacos-sdk-python client on the sh node registers an
instance and publishes a config; a client on an hz node sees both once the
cluster has replicated them."""

import asyncio
import time

from v2.nacos import (
    ConfigParam,
    ListInstanceParam,
    NacosConfigService,
    NacosNamingService,
    RegisterInstanceParam,
)

from sdk_config import client_config


async def eventually(probe, within=10.0):
    """Awaits ``probe()`` until it returns something truthy, or fails."""
    deadline = time.monotonic() + within
    while True:
        result = await probe()
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.1)


def test_the_sim_has_two_dcs(understudy_sim):
    assert sorted(understudy_sim.nodes) == [1, 2, 3]
    assert [n.id for n in understudy_sim.dcs["hz"]] == [1, 2]
    assert [n.id for n in understudy_sim.dcs["sh"]] == [3]
    assert understudy_sim.leader in understudy_sim.nodes
    for node in understudy_sim.nodes.values():
        assert node.grpc_port == node.http_port + 1000
        assert node.server_addr == f"127.0.0.1:{node.http_port}"


def test_a_write_in_sh_is_seen_in_hz(understudy_sim, tmp_path):
    sh = understudy_sim.dcs["sh"][0]
    hz = understudy_sim.dcs["hz"][0]

    async def scenario():
        sh_naming = await NacosNamingService.create_naming_service(
            client_config(sh.server_addr, tmp_path / "sh")
        )
        hz_naming = await NacosNamingService.create_naming_service(
            client_config(hz.server_addr, tmp_path / "hz")
        )
        sh_config = await NacosConfigService.create_config_service(
            client_config(sh.server_addr, tmp_path / "sh")
        )
        hz_config = await NacosConfigService.create_config_service(
            client_config(hz.server_addr, tmp_path / "hz")
        )
        try:
            assert await sh_naming.register_instance(
                RegisterInstanceParam(service_name="payments", ip="10.0.3.1", port=9000)
            )

            async def listed_in_hz():
                instances = await hz_naming.list_instances(
                    ListInstanceParam(service_name="payments", healthy_only=True,
                                      subscribe=False)
                )
                return [(i.ip, i.port) for i in instances]

            assert await eventually(listed_in_hz) == [("10.0.3.1", 9000)]

            assert await sh_config.publish_config(
                ConfigParam(data_id="payments.yaml", group="DEFAULT_GROUP", content="retries: 3")
            )

            async def read_in_hz():
                return await hz_config.get_config(
                    ConfigParam(data_id="payments.yaml", group="DEFAULT_GROUP")
                )

            assert await eventually(read_in_hz) == "retries: 3"
        finally:
            # A config client's shutdown waits out its listen loop's 5 s poll.
            await asyncio.gather(
                *(c.shutdown() for c in (sh_naming, hz_naming, sh_config, hz_config))
            )

    asyncio.run(scenario())
