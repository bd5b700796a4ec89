"""understudy, a stand-in for Nacos, for Python tests.

The wheel carries the ``understudy`` binary (``understudy_fixture/bin/understudy``);
:func:`binary_path` finds it, or the binary named by the ``UNDERSTUDY_BINARY``
environment variable. :func:`start_node` and :func:`start_sim` start a node or a
multi-DC cluster on free ports and stop it again; the pytest plugin
(``understudy_fixture.plugin``, registered through the ``pytest11`` entry point)
wraps them as the ``understudy``, ``understudy_fresh`` and ``understudy_sim``
fixtures.
"""

from importlib.metadata import PackageNotFoundError, version as _version

from ._binary import BINARY_ENV, binary_path
from ._process import Node, Sim, SimNode, StartError, start_node, start_sim

try:
    __version__ = _version("understudy-fixture")
except PackageNotFoundError:  # imported from a source checkout
    __version__ = "0+unknown"

__all__ = [
    "BINARY_ENV",
    "Node",
    "Sim",
    "SimNode",
    "StartError",
    "binary_path",
    "start_node",
    "start_sim",
    "__version__",
]
