"""What every example's nacos-sdk-python client is configured with."""

from v2.nacos import ClientConfigBuilder


def client_config(server_addr, tmp_path):
    """A client of ``server_addr`` that keeps its logs and cache under
    ``tmp_path`` (the SDK writes them under the home directory unless
    told)."""
    return (
        ClientConfigBuilder()
        .server_address(server_addr)
        .log_dir(str(tmp_path / "logs"))
        .cache_dir(str(tmp_path / "cache"))
        .log_level("WARNING")
        .build()
    )
