"""Starting and stopping ``understudy`` processes: one node, or a sim cluster."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from ._binary import binary_path

#: Nacos clients reach the gRPC API on the HTTP port plus this.
GRPC_OFFSET = 1000

_HOST = "127.0.0.1"
# Requests to the node bypass any HTTP proxy set in the environment.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# The node's own bind failure, which a retry on other ports may avoid.
_PORT_TAKEN = re.compile(r"address already in use|os error 98|os error 48", re.I)
# Every process started here, stopped at interpreter exit if still running.
_RUNNING: "set[_Process]" = set()


class StartError(RuntimeError):
    """An ``understudy`` process exited, or was not ready in time; the message
    ends with its stderr, which is also in ``.stderr``."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


class _Process:
    """A started ``understudy`` process, its output in files of a scratch dir."""

    def __init__(self, argv: Sequence[str], env: Optional[Dict[str, str]]):
        self.argv = list(argv)
        self.dir = Path(tempfile.mkdtemp(prefix="understudy-"))
        self.stdout_path = self.dir / "stdout"
        self.stderr_path = self.dir / "stderr"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=_child_env(env),
                preexec_fn=_die_with_parent_hook(),
            )
        _RUNNING.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def stdout(self) -> str:
        return _read(self.stdout_path)

    def stderr(self) -> str:
        return _read(self.stderr_path)

    def failure(self, what: str) -> StartError:
        """A :class:`StartError` saying ``what``, with the command, its stdout
        and the end of its stderr (read now: :meth:`stop` deletes them)."""
        stderr = self.stderr()
        tail = "\n".join(stderr.splitlines()[-60:])
        return StartError(
            f"{what}\ncommand: {' '.join(self.argv)}\n"
            f"stdout:\n{self.stdout().rstrip()}\n"
            f"stderr (last 60 lines):\n{tail}",
            stderr,
        )

    def stop(self, grace: float = 10.0) -> Optional[int]:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code."""
        _RUNNING.discard(self)
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.popen.returncode


@atexit.register
def _stop_leftovers() -> None:
    for process in list(_RUNNING):
        process.stop(grace=2.0)


def _pdeathsig():
    """libc's prctl, looked up now: the child calls it between fork and exec,
    where it must not import anything (another thread may hold a lock)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _pdeathsig()
_PR_SET_PDEATHSIG = 1
_SIGTERM = int(signal.SIGTERM)


def _die_with_parent_hook():
    # The child gets SIGTERM if the test process dies without stopping it, so
    # a killed test run leaks no node. Only for a start from the main thread:
    # the signal follows the thread that forked, and a worker thread may end
    # long before the node should.
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return None

    def hook() -> None:
        _PRCTL(_PR_SET_PDEATHSIG, _SIGTERM)

    return hook


def _child_env(extra: Optional[Dict[str, str]]) -> Dict[str, str]:
    # The node starts from understudy's defaults: UNDERSTUDY_* settings of the
    # calling environment (a config file, a member list, ...) are not passed on.
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERSTUDY_")}
    env.update(extra or {})
    return env


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _free_port_pair(host: str) -> int:
    """A free port P whose P + 1000 is free too (a race until the node binds
    them; a start that loses it is retried)."""
    for _ in range(200):
        with socket.socket() as http:
            http.bind((host, 0))
            port = http.getsockname()[1]
            if port + GRPC_OFFSET > 65535:
                continue
            with socket.socket() as grpc:
                try:
                    grpc.bind((host, port + GRPC_OFFSET))
                except OSError:
                    continue
            return port
    raise StartError("no free port pair P, P + 1000 found in 200 tries")


def _http_ok(url: str) -> bool:
    try:
        with _HTTP.open(url, timeout=2) as answer:
            return answer.status == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


def _tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _wait(process: _Process, ready, what: str, deadline: float, timeout: float):
    """Polls ``ready()`` until it returns something truthy; raises a
    :class:`StartError` if the process exits first or ``deadline`` passes
    (``timeout`` seconds after the start)."""
    while True:
        if not process.running():
            raise process.failure(
                f"understudy exited with code {process.popen.returncode} before it was "
                f"ready (waiting for: {what})"
            )
        result = ready()
        if result:
            return result
        if time.monotonic() > deadline:
            failure = process.failure(
                f"understudy was not ready within {timeout:g} s (waiting for: {what})"
            )
            process.stop(grace=2.0)
            raise failure
        time.sleep(0.05)


class _Running:
    """What a started process offers: its pid and state, its log, and a
    stop, also as a context manager."""

    _process: _Process

    @property
    def pid(self) -> int:
        return self._process.pid

    def running(self) -> bool:
        return self._process.running()

    @property
    def returncode(self) -> Optional[int]:
        """The exit code once the process has exited, else None."""
        return self._process.popen.poll()

    def log(self) -> str:
        """What the process has written to stderr (the log of each node it
        runs) so far."""
        return self._process.stderr()

    def stop(self, grace: float = 10.0) -> Optional[int]:
        """SIGTERM, SIGKILL after ``grace`` seconds; returns the exit code."""
        return self._process.stop(grace)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _Addresses:
    host: str
    http_port: int
    grpc_port: int

    @property
    def server_addr(self) -> str:
        """``host:http_port``: a Nacos client's server address."""
        return f"{self.host}:{self.http_port}"

    @property
    def url(self) -> str:
        """``http://host:http_port``; the Nacos HTTP API is under ``/nacos``."""
        return f"http://{self.host}:{self.http_port}"


class Node(_Running, _Addresses):
    """One running ``understudy`` node: a context manager that stops it."""

    def __init__(self, process: _Process, http_port: int, grpc_port: int, host: str = _HOST):
        self._process = process
        #: The HTTP port (Nacos Open API, admin, metrics).
        self.http_port = http_port
        #: The gRPC port (Nacos 2.x/3.x API): ``http_port + 1000``.
        self.grpc_port = grpc_port
        #: The address the node listens on.
        self.host = host

    def __repr__(self) -> str:
        return f"Node(server_addr={self.server_addr!r}, grpc_port={self.grpc_port}, pid={self.pid})"


def start_node(
    args: Iterable[str] = (),
    *,
    timeout: float = 60.0,
    binary: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
) -> Node:
    """Starts one node on free ports, HTTP port P and gRPC port P + 1000, and
    returns it once ``GET /ready`` answers 200 and the gRPC port accepts.

    ``args`` are more ``understudy`` flags (``--log warn``, ...); ``binary``
    defaults to :func:`binary_path`; ``env`` is added to the environment (from
    which ``UNDERSTUDY_*`` variables are removed). Raises :class:`StartError`,
    with the node's stderr, if it exits or is not ready within ``timeout``
    seconds.
    """
    binary = binary or binary_path()
    args = list(args)
    deadline = time.monotonic() + timeout
    for attempt in range(3):
        http_port = _free_port_pair(_HOST)
        grpc_port = http_port + GRPC_OFFSET
        argv = [binary, "--bind", _HOST, "--http-port", str(http_port),
                "--grpc-port", str(grpc_port), *args]
        process = _Process(argv, env)
        node = Node(process, http_port, grpc_port)
        try:
            _wait(
                process,
                lambda: _http_ok(f"{node.url}/ready") and _tcp_open(_HOST, grpc_port),
                f"GET {node.url}/ready answered 200 and gRPC port {grpc_port} open",
                deadline,
                timeout,
            )
            return node
        except StartError as e:
            process.stop(grace=2.0)
            if not _PORT_TAKEN.search(e.stderr) or attempt == 2:
                raise
        except BaseException:
            process.stop(grace=2.0)
            raise
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class SimNode(_Addresses):
    """One node of a sim cluster."""

    id: int
    dc: str
    host: str
    http_port: int
    grpc_port: int
    raft_port: int


_TABLE_ROW = re.compile(
    r"^(\d+)\s+(\S+)\s+(\S+):(\d+)\s+\S+:(\d+)\s+\S+:(\d+)\s*$"
)
_LEADER = re.compile(r"^leader: node (\d+)\s*$", re.M)


class Sim(_Running):
    """A running ``understudy sim`` cluster: a context manager that stops it."""

    def __init__(self, process: _Process, nodes: List[SimNode], leader: int):
        self._process = process
        #: The nodes by id.
        self.nodes: Dict[int, SimNode] = {n.id: n for n in nodes}
        #: The nodes of each DC, in id order.
        self.dcs: Dict[str, List[SimNode]] = {}
        for n in nodes:
            self.dcs.setdefault(n.dc, []).append(n)
        #: The node the cluster had elected when it started.
        self.leader: int = leader

    def __repr__(self) -> str:
        return f"Sim(nodes={list(self.nodes.values())!r}, leader={self.leader})"

    def node(self, node_id: int) -> SimNode:
        return self.nodes[node_id]

    def in_dc(self, dc: str) -> List[SimNode]:
        return list(self.dcs[dc])

    @property
    def server_addrs(self) -> str:
        """Every node's ``host:http_port``, comma-separated, for a Nacos client."""
        return ",".join(n.server_addr for n in self.nodes.values())


def start_sim(
    dcs: Sequence[str] = ("hz=2", "sh=1"),
    links: Sequence[str] = (),
    args: Iterable[str] = (),
    *,
    timeout: float = 60.0,
    binary: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
) -> Sim:
    """Starts ``understudy sim --dc D ... --link L ... --base-port 0`` (every
    node on free ports, gRPC = HTTP + 1000) and returns it once it has printed
    its node table and leader and every node answers ``GET /ready`` with 200.

    ``dcs`` are ``NAME=COUNT`` (node ids in order, the first DC's first);
    ``links`` are link fault specs such as ``hz-sh=40ms~10ms,loss=1%``;
    ``args`` are more ``understudy sim`` flags (``--seed 7``, ...).
    """
    argv = [binary or binary_path(), "sim", "--base-port", "0"]
    for dc in dcs:
        argv += ["--dc", dc]
    for link in links:
        argv += ["--link", link]
    argv += list(args)
    deadline = time.monotonic() + timeout
    process = _Process(argv, env)
    try:
        leader = int(
            _wait(process, lambda: _LEADER.search(process.stdout()),
                  "'leader: node N' printed", deadline, timeout).group(1)
        )
        nodes = []
        for line in process.stdout().splitlines():
            row = _TABLE_ROW.match(line)
            if row:
                node_id, dc, host, http, grpc, raft = row.groups()
                nodes.append(SimNode(http_port=int(http), grpc_port=int(grpc), host=host,
                                     id=int(node_id), dc=dc, raft_port=int(raft)))
        if not nodes:
            raise process.failure("understudy sim printed no node table")
        for n in nodes:
            _wait(process, lambda: _http_ok(f"{n.url}/ready"),
                  f"GET {n.url}/ready (node {n.id}) answered 200", deadline, timeout)
    except BaseException:
        process.stop(grace=2.0)
        raise
    return Sim(process, nodes, leader)


__all__ = ["GRPC_OFFSET", "Node", "Sim", "SimNode", "StartError",
           "start_node", "start_sim"]
