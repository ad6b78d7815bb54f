"""Redis housekeeping for tests, demos and benchmarks: never needed in production.

:class:`PrivateRedis` is one ``redis-server`` on a free loopback port, for tests and the
soak that stop, restart or flush Redis (the shared one must never be disturbed).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from airflow_llm_router.engine.keys import RouterKeys

__all__ = ["LocalCluster", "LocalSentinel", "PrivateRedis", "drop_namespace", "private_redis"]


def drop_namespace(client: Any, namespace: str) -> int:
    """Delete every key of a router namespace (quotas, windows, leases, counters): what a
    Redis restart without persistence does to it. For a namespace a test, demo or benchmark
    made of its own. ``client`` is a ``redis.Redis`` or a Redis URL; returns how many keys
    there were."""
    own = isinstance(client, str)
    conn = redis.Redis.from_url(client) if own else client
    try:
        keys = list(conn.scan_iter(match=RouterKeys(namespace).prefix + "*", count=1000))
        return int(conn.delete(*keys)) if keys else 0
    finally:
        if own:
            conn.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(1000):
        port = _free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair (port, port + 10000) for a cluster node")


class PrivateRedis:
    """One ``redis-server`` process that a test may stop and start again on the same port.

    :param args: more ``redis-server`` arguments (``["--replicaof", host, port]``, cluster
        options); with ``config``, the text of a config file written for it (a sentinel's:
        Sentinel rewrites its file, so it must be its own).
    :param sentinel: run it as a sentinel (``--sentinel``).
    """

    def __init__(self, args: list[str] | None = None, config: str | None = None,
                 sentinel: bool = False) -> None:
        cluster = "--cluster-enabled" in (args or [])
        self.port = _free_cluster_port() if cluster else _free_port()
        self._dir = tempfile.mkdtemp(prefix="llmr-redis-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._args = list(args or [])
        self._config = config
        self._sentinel = sentinel

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        command = [binary]
        if self._config is not None:
            path = f"{self._dir}/redis.conf"
            with open(path, "w") as f:
                f.write(self._config)
            command.append(path)
        command += ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self._dir]
        if self._sentinel:
            command.append("--sentinel")
        else:
            command += ["--save", "", "--appendonly", "no"]
        self._proc = subprocess.Popen(command + self._args, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2,
                             retry_on_error=[])
        try:
            for _ in range(200):
                if self._proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} exited with "
                                       f"{self._proc.returncode}")
                try:
                    if client.ping():
                        return
                except redis.exceptions.ConnectionError:
                    time.sleep(0.025)
            raise RuntimeError(f"redis-server did not answer on port {self.port}")
        finally:
            client.close()

    def stop(self) -> None:
        """Kill the server: every key is gone, as after a crash without persistence."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _wait(check: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except redis.exceptions.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.05)


class LocalCluster:
    """A Redis Cluster of ``masters`` nodes (no replicas) on loopback ports, made with
    ``redis-cli --cluster create``; ``url`` is ``redis+cluster://`` to its first node."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [PrivateRedis(["--cluster-enabled", "yes", "--cluster-config-file",
                                    "nodes.conf", "--cluster-node-timeout", "2000"])
                      for _ in range(masters)]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> LocalCluster:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed (apt-get install redis-tools)")
        subprocess.run([cli, "--cluster", "create",
                        *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ok() -> bool:
            for node in self.nodes:
                with redis.Redis(port=node.port) as c:
                    if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
            return True

        _wait(ok, "the cluster's state ok")
        return self

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalSentinel:
    """A master, one replica and one sentinel watching them as ``master_name`` (quorum 1,
    down after 1 s), on loopback ports; ``url`` is ``redis+sentinel://`` to the sentinel."""

    def __init__(self, master_name: str = "llmr") -> None:
        self.master_name = master_name
        self.master = PrivateRedis()
        self.replica: PrivateRedis | None = None
        self.sentinel: PrivateRedis | None = None

    @property
    def url(self) -> str:
        assert self.sentinel is not None
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{self.master_name}"

    def start(self) -> LocalSentinel:
        self.master.start()
        self.replica = PrivateRedis(["--replicaof", "127.0.0.1", str(self.master.port)])
        self.replica.start()
        name = self.master_name
        self.sentinel = PrivateRedis(sentinel=True, config=(
            f"sentinel monitor {name} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {name} 1000\n"
            f"sentinel failover-timeout {name} 5000\n"))
        self.sentinel.start()
        with redis.Redis(port=self.replica.port) as replica:
            _wait(lambda: replica.info("replication").get("master_link_status") == "up",
                  "the replica's link to its master")
        with redis.Redis(port=self.sentinel.port) as sentinel:
            _wait(lambda: int(sentinel.sentinel_master(name)["num-slaves"]) >= 1,
                  "the sentinel's finding the replica")
        return self

    def master_port(self) -> int:
        """The port of the master the sentinel names now."""
        assert self.sentinel is not None
        with redis.Redis(port=self.sentinel.port) as sentinel:
            _, port = sentinel.sentinel_get_master_addr_by_name(self.master_name)
        return int(port)

    def failover(self) -> int:
        """Promote the replica (``SENTINEL FAILOVER``); returns the new master's port once
        the failover is complete: the sentinel names it, it accepts writes, and the old
        master follows it as a replica (until then the old master still takes writes from
        clients connected to it, which its demotion discards)."""
        assert self.sentinel is not None and self.replica is not None
        old = self.master_port()
        with redis.Redis(port=self.sentinel.port) as sentinel:
            sentinel.sentinel_failover(self.master_name)
        _wait(lambda: self.master_port() != old, "the failover")
        new = self.master_port()
        with redis.Redis(port=new) as promoted:
            _wait(lambda: promoted.info("replication").get("role") == "master",
                  "the promoted replica's taking writes")
        with redis.Redis(port=old) as demoted:
            _wait(lambda: demoted.info("replication").get("role") == "slave",
                  "the old master's demotion")
        return new

    def close(self) -> None:
        for server in (self.sentinel, self.replica, self.master):
            if server is not None:
                server.close()

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
