"""The pytest plugin: the ``understudy``, ``understudy_fresh`` and
``understudy_sim`` fixtures. Registered through the ``pytest11`` entry point,
so installing the wheel is enough; no conftest is needed.

``understudy`` and ``understudy_sim`` are shared: the first test that asks
starts the node (or cluster), every later test of the run gets the same one,
and it is stopped when pytest exits. A fixture of a wider scope can get the
same shared objects with :func:`shared_node` and :func:`shared_sim`.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator

import pytest

from . import Node, Sim, binary_path, start_node, start_sim

_SHARED = pytest.StashKey[Dict[str, object]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "understudy_args",
        "more flags for the nodes of the understudy and understudy_fresh fixtures",
        type="args",
        default=[],
    )
    parser.addini(
        "understudy_sim_args",
        "the flags of the understudy_sim fixture's `understudy sim` "
        "(--base-port 0 is added)",
        type="args",
        default=["--dc", "hz=2", "--dc", "sh=1"],
    )
    parser.addini(
        "understudy_start_timeout",
        "seconds a node or sim may take to be ready",
        default="60",
    )


def pytest_report_header(config: pytest.Config) -> str:
    try:
        return f"understudy: {binary_path()}"
    except OSError as e:
        return f"understudy: {e}"


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED, {})
    for thing in reversed(list(shared.values())):
        if isinstance(thing, (Node, Sim)):
            thing.stop()
    shared.clear()


def _timeout(config: pytest.Config) -> float:
    return float(config.getini("understudy_start_timeout"))


def _shared(config: pytest.Config, name: str, start: Callable[[], object]):
    shared = config.stash.setdefault(_SHARED, {})
    thing = shared.get(name)
    if thing is None:
        try:
            thing = start()
        except Exception as e:  # every later test fails at once with the same error
            thing = e
        shared[name] = thing
    if isinstance(thing, Exception):
        raise thing
    if not thing.running():
        raise RuntimeError(
            f"the shared {name} exited with code {thing.returncode}; "
            f"its log:\n{thing.log()[-8000:]}"
        )
    return thing


def shared_node(config: pytest.Config) -> Node:
    """The node of the ``understudy`` fixture, started on first use."""
    return _shared(
        config,
        "understudy node",
        lambda: start_node(config.getini("understudy_args"), timeout=_timeout(config)),
    )


def shared_sim(config: pytest.Config) -> Sim:
    """The cluster of the ``understudy_sim`` fixture, started on first use."""
    return _shared(
        config,
        "understudy sim",
        lambda: start_sim(dcs=(), args=config.getini("understudy_sim_args"),
                          timeout=_timeout(config)),
    )


@pytest.fixture
def understudy(request: pytest.FixtureRequest) -> Node:
    """One understudy node shared by every test of the run: ``.http_port``,
    ``.grpc_port`` (``http_port + 1000``), ``.server_addr`` (``127.0.0.1:P``,
    for a Nacos client), ``.url`` (``http://127.0.0.1:P``)."""
    return shared_node(request.config)


@pytest.fixture
def understudy_fresh(request: pytest.FixtureRequest) -> Iterator[Node]:
    """A node of this test's own, started for it and stopped after it; the
    same attributes as ``understudy``."""
    with start_node(request.config.getini("understudy_args"),
                    timeout=_timeout(request.config)) as node:
        yield node


@pytest.fixture
def understudy_sim(request: pytest.FixtureRequest) -> Sim:
    """A multi-DC ``understudy sim`` cluster shared by every test of the run
    (by default three nodes: 1 and 2 in DC hz, 3 in DC sh). ``.nodes`` maps
    node id to a node (``.id``, ``.dc``, ``.http_port``, ``.grpc_port``,
    ``.raft_port``, ``.server_addr``, ``.url``), ``.dcs`` DC name to its
    nodes, ``.leader`` is the id elected at the start and ``.server_addrs``
    every node's address, comma-separated."""
    return shared_sim(request.config)
