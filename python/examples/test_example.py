"""nacos-sdk-python's gRPC client (its ``v2.nacos`` API) against the
``understudy`` fixture: register an instance and list it back, publish a
config and read it back; and the same data seen through the Nacos HTTP API
at ``understudy.url``."""

import asyncio
import json
import urllib.parse
import urllib.request

from v2.nacos import (
    ConfigParam,
    ListInstanceParam,
    NacosConfigService,
    NacosNamingService,
    RegisterInstanceParam,
)

from sdk_config import client_config


def http_get(url, path, **query):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}{path}?{urllib.parse.urlencode(query)}", timeout=10) as answer:
        return answer.read().decode()


def test_register_and_list_an_instance(understudy, tmp_path):
    async def scenario():
        naming = await NacosNamingService.create_naming_service(
            client_config(understudy.server_addr, tmp_path)
        )
        try:
            assert await naming.register_instance(
                RegisterInstanceParam(
                    service_name="orders", ip="10.0.0.7", port=8080, metadata={"zone": "a"}
                )
            )
            instances = await naming.list_instances(
                ListInstanceParam(service_name="orders", healthy_only=True)
            )
            assert [(i.ip, i.port, i.metadata) for i in instances] == [
                ("10.0.0.7", 8080, {"zone": "a"})
            ]
            # The Nacos HTTP API sees the same instance.
            listed = json.loads(
                http_get(understudy.url, "/nacos/v1/ns/instance/list", serviceName="orders")
            )
            assert [(h["ip"], h["port"]) for h in listed["hosts"]] == [("10.0.0.7", 8080)]
        finally:
            await naming.shutdown()

    asyncio.run(scenario())


def test_publish_and_get_a_config(understudy, tmp_path):
    async def scenario():
        config = await NacosConfigService.create_config_service(
            client_config(understudy.server_addr, tmp_path)
        )
        try:
            assert await config.publish_config(
                ConfigParam(data_id="orders.properties", group="DEFAULT_GROUP",
                            content="pool.size=8")
            )
            assert (
                await config.get_config(
                    ConfigParam(data_id="orders.properties", group="DEFAULT_GROUP")
                )
                == "pool.size=8"
            )
        finally:
            await config.shutdown()  # waits out the SDK's 5 s listen poll
        assert (
            http_get(understudy.url, "/nacos/v1/cs/configs",
                     dataId="orders.properties", group="DEFAULT_GROUP")
            == "pool.size=8"
        )

    asyncio.run(scenario())


def test_a_fresh_node_starts_empty(understudy, understudy_fresh):
    # understudy_fresh is this test's own node: nothing registered on the
    # shared node is there.
    assert understudy_fresh.server_addr != understudy.server_addr
    assert understudy_fresh.grpc_port == understudy_fresh.http_port + 1000
    listed = json.loads(
        http_get(understudy_fresh.url, "/nacos/v1/ns/instance/list", serviceName="orders")
    )
    assert listed["hosts"] == []
