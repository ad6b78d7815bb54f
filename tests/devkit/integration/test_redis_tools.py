"""The private ``redis-server`` of the tests and benchmarks, off the happy path: a port
taken between its pick and the server's bind, a server that cannot start, a signal
arriving while it starts, a cluster whose last node fails."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from llm_router_devkit.redis_tools import LocalCluster, PrivateRedis, _free_cluster_port, _free_port
from tests.devkit.integration.interrupting_child import interrupting_child, running

pytestmark = pytest.mark.timeout(60)

CLUSTER = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]


def _listener(port: int = 0) -> socket.socket:
    """A socket listening on ``port`` of 127.0.0.1 (0: one the kernel picks), that never
    answers: a stranger holding the port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


class Picks:
    """A port picker that gives ``first`` once, then what ``rest`` picks; counts its picks."""

    def __init__(self, first: int, rest: Callable[[], int]) -> None:
        self.first: int | None = first
        self.rest = rest
        self.count = 0

    def __call__(self) -> int:
        self.count += 1
        port, self.first = self.first, None
        return port if port is not None else self.rest()


def _pid_on(port: int) -> int:
    with redis.Redis(port=port) as client:
        return int(client.info("server")["process_id"])


@pytest.fixture
def server_dir() -> Iterator[list[PrivateRedis]]:
    """Servers a test makes, closed after it."""
    servers: list[PrivateRedis] = []
    yield servers
    for server in servers:
        server.close()


def test_a_port_taken_before_the_server_binds_it_is_left_for_another(
        server_dir: list[PrivateRedis]) -> None:
    with _listener() as stranger:
        taken = stranger.getsockname()[1]
        picks = Picks(taken, _free_port)
        server = PrivateRedis(pick_port=picks)
        server_dir.append(server)
        server.start()
        assert server.port != taken
        assert picks.count == 2
        assert _pid_on(server.port) == server._proc.pid  # type: ignore[union-attr]
        with redis.Redis.from_url(server.url) as client:
            assert client.set("k", "v") and client.get("k") == b"v"


def test_a_cluster_nodes_bus_port_taken_is_left_for_another(
        server_dir: list[PrivateRedis]) -> None:
    # a port whose bus port (port + 10000) a stranger holds
    for _ in range(100):
        port = _free_port()
        if port + 10000 > 65535:
            continue
        try:
            stranger = _listener(port + 10000)
        except OSError:
            continue
        break
    else:
        pytest.fail("no port with a bus port to take")
    with stranger:
        picks = Picks(port, _free_cluster_port)
        node = PrivateRedis(CLUSTER, pick_port=picks)
        server_dir.append(node)
        node.start()
        assert node.port != port
        assert picks.count == 2
        with redis.Redis(port=node.port) as client:
            assert client.execute_command("CLUSTER", "MYID")


def test_a_port_another_server_answers_on_is_not_taken_for_this_ones(
        server_dir: list[PrivateRedis]) -> None:
    other = PrivateRedis()
    server_dir.append(other)
    other.start()
    picks = Picks(other.port, _free_port)
    server = PrivateRedis(pick_port=picks)
    server_dir.append(server)
    server.start()
    assert server.port != other.port
    assert _pid_on(server.port) == server._proc.pid  # type: ignore[union-attr]


def test_a_config_error_raises_at_once_with_the_servers_words(
        server_dir: list[PrivateRedis]) -> None:
    picks = Picks(_free_port(), _free_port)
    server = PrivateRedis(["--no-such-directive", "yes"], pick_port=picks)
    server_dir.append(server)
    with pytest.raises(RuntimeError, match=r"(?s)exited with 1; its log ends:\n.*Bad directive.*"):
        server.start()
    assert picks.count == 1
    assert server.port == 0


def test_a_restart_keeps_its_port_and_says_why_it_cannot(
        server_dir: list[PrivateRedis]) -> None:
    server = PrivateRedis()
    server_dir.append(server)
    server.start()
    port = server.port
    server.stop()
    with _listener(port), pytest.raises(RuntimeError, match="Address already in use"):
        server.start()
    assert server.port == port


def test_an_interrupt_while_the_server_starts_leaves_it_not_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        server_dir: list[PrivateRedis]) -> None:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with interrupting_child(tmp_path / "bin" / "redis-server") as pid_file:
        server = PrivateRedis()
        server_dir.append(server)
        with pytest.raises(KeyboardInterrupt):
            server.start()
        assert not running(int(pid_file.read_text()))


def test_a_cluster_whose_node_fails_to_start_stops_the_nodes_it_started() -> None:
    cluster = LocalCluster(3)
    cluster.nodes[2] = PrivateRedis([*CLUSTER, "--no-such-directive", "yes"])
    started = cluster.nodes[:2]
    with pytest.raises(RuntimeError, match="no-such-directive"):
        cluster.start()
    for node in started:
        assert node.port and node._proc is None
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", node.port)).close()


def test_a_cluster_with_replicas_gives_each_master_a_linked_replica() -> None:
    with LocalCluster(3, replicas=1) as cluster:
        roles: dict[str, list[int]] = {"master": [], "slave": []}
        for node in cluster.nodes:
            with redis.Redis(port=node.port) as c:
                info = c.info("replication")
                roles[info["role"]].append(int(info.get("master_port", node.port)))
        assert len(roles["master"]) == 3
        assert sorted(roles["slave"]) == sorted(roles["master"])  # one replica each
        owner = cluster.owner("llmr:{ns}:")
        with redis.Redis(port=owner.port) as c:
            assert c.info("replication")["role"] == "master"
            slot = c.execute_command("CLUSTER", "KEYSLOT", "llmr:{ns}:")
            assert c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
            c.set("llmr:{ns}:probe", 1)  # the owner takes its slot's writes: no MOVED
