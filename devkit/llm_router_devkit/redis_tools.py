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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from airflow_llm_router.engine import RouterKeys
from llm_router_devkit.processes import ChildExited, start_child

__all__ = ["LocalCluster", "LocalSentinel", "PrivateRedis", "drop_namespace", "private_redis",
           "wait_until"]


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


#: what redis-server logs when a port it was given is in use: its own or a cluster node's
#: bus port. Not "Could not create server TCP listening socket", which also opens
#: "Cannot assign requested address", a fault another port does not cure.
PORT_IN_USE = "Address already in use"
#: how many ports a first start tries, each picked free, before it gives up
START_ATTEMPTS = 5
#: how long a start waits for the server to answer
START_TIMEOUT_S = 10.0


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
    :param pick_port: gives a port free right now (for a cluster node, one whose bus port,
        port + 10000, is free too); the default asks the kernel.
    """

    def __init__(self, args: list[str] | None = None, config: str | None = None,
                 sentinel: bool = False, pick_port: Callable[[], int] | None = None) -> None:
        self._args = list(args or [])
        cluster = "--cluster-enabled" in self._args
        self._pick_port = pick_port or (_free_cluster_port if cluster else _free_port)
        #: 0 until the first start: the port is picked when the server is about to bind it
        #: (picked earlier, the three ports of a cluster could be one another's bus ports)
        self.port = 0
        self._dir = tempfile.mkdtemp(prefix="llmr-redis-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._config = config
        self._sentinel = sentinel

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (a benchmark reads its CPU), else None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> None:
        """Start the server; return once it answers, itself and not another server that
        holds its port.

        A port picked free is only taken when redis-server binds it, and in between another
        process may take it or, for a cluster node, its bus port (another server, or an
        outgoing connection or its TIME_WAIT using it as its local port); the server then
        exits saying "Address already in use". The first start then tries a freshly picked
        port, up to ``START_ATTEMPTS`` ports in all. A restart keeps its port (callers hold
        it), so there a taken port raises.

        :raises RuntimeError: the server exited (at once for any other cause) or did not
            answer in time; the message ends with the last lines of its log.
        """
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        attempts = 1 if self.port else START_ATTEMPTS
        for attempt in range(1, attempts + 1):
            port = self.port or self._pick_port()
            try:
                self._proc = self._launch(binary, port)
            except ChildExited as exited:
                if attempt < attempts and PORT_IN_USE in exited.log_tail:
                    continue
                raise
            self.port = port
            return

    def _launch(self, binary: str, port: int) -> subprocess.Popen[bytes]:
        command = [binary]
        if self._config is not None:
            path = f"{self._dir}/redis.conf"
            with open(path, "w") as f:
                f.write(self._config)
            command.append(path)
        command += ["--port", str(port), "--bind", "127.0.0.1", "--dir", self._dir]
        if self._sentinel:
            command.append("--sentinel")
        else:
            command += ["--save", "", "--appendonly", "no"]
        # one try per probe (redis-py's default retries with backoff for seconds, so the
        # server's exit went unseen as long); timeouts, as what holds the port may accept
        # and never answer
        client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2,
                             socket_timeout=0.5, retry=Retry(NoBackoff(), 0))

        def serving(pid: int) -> bool:
            try:
                return int(client.info("server")["process_id"]) == pid
            except redis.exceptions.RedisError:
                return False

        try:
            return start_child(command + self._args, log=Path(self._dir) / "redis.log",
                               ready=serving, what=f"redis-server on port {port}",
                               timeout_s=START_TIMEOUT_S)
        finally:
            client.close()

    @property
    def running(self) -> bool:
        """Whether the server was started and not stopped since."""
        return self._proc is not None

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
    try:
        server.start()
        yield server
    finally:
        server.close()


def wait_until(check: Any, what: str, timeout_s: float = 30.0) -> None:
    """Poll ``check`` every 50 ms (a server's state has no event to wait on; a Redis error
    counts as not yet) until it holds; after ``timeout_s``, raise naming ``what``."""
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


_ServersT = TypeVar("_ServersT", bound="_Servers")


class _Servers:
    """Servers started together (a cluster, a sentinel set-up), as a ``with`` block.

    If any step of the start fails, every server is stopped before the error goes on: the
    caller got nothing to close, and a ``redis-server`` does not end with its parent.
    """

    def start(self: _ServersT) -> _ServersT:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _ServersT) -> _ServersT:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalCluster(_Servers):
    """A Redis Cluster of ``masters`` nodes, each with ``replicas`` replicas (0: none), on
    loopback ports, made with ``redis-cli --cluster create``; ``url`` is
    ``redis+cluster://`` to its first node (``owner`` names a slot's master now). A node is
    declared failed after 2 s without an answer (``cluster-node-timeout``), when one of its
    replicas takes its slots.
    """

    def __init__(self, masters: int = 3, replicas: int = 0) -> None:
        self.replicas = replicas
        self.nodes = [PrivateRedis(["--cluster-enabled", "yes", "--cluster-config-file",
                                    "nodes.conf", "--cluster-node-timeout", "2000"])
                      for _ in range(masters * (1 + replicas))]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def _start(self) -> None:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed (apt-get install redis-tools)")
        subprocess.run([cli, "--cluster", "create",
                        *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ok() -> bool:
            for node in self.nodes:
                with redis.Redis(port=node.port) as c:
                    if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
            return True

        wait_until(ok, "the cluster's state ok")
        if self.replicas:
            wait_until(self._replicas_linked, "the replicas' links to their masters")

    def _replicas_linked(self) -> bool:
        linked = 0
        for node in self.nodes:
            with redis.Redis(port=node.port) as c:
                linked += c.info("replication").get("master_link_status") == "up"
        return linked == len(self.nodes) - len(self.nodes) // (1 + self.replicas)

    def owner(self, key: str) -> PrivateRedis:
        """The node that is master of ``key``'s slot now (as a live node reports it)."""
        for node in self.nodes:
            if node.port == 0 or not node.running:
                continue
            with redis.Redis(port=node.port) as c:
                slot = c.execute_command("CLUSTER", "KEYSLOT", key)
                for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        port = int(master[1])
                        return next(n for n in self.nodes if n.port == port)
        raise RuntimeError("no live cluster node")

    def close(self) -> None:
        for node in self.nodes:
            node.close()


class LocalSentinel(_Servers):
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

    def _start(self) -> None:
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
            wait_until(lambda: replica.info("replication").get("master_link_status") == "up",
                  "the replica's link to its master")
        wait_until(self.replica_promotable, "the sentinel's link to the replica")

    def replica_promotable(self) -> bool:
        """Whether the sentinel would promote a replica now: it is linked to one that has
        answered its INFO and PING lately (Sentinel's own choice; a replica it has only
        read of in the master's INFO fails ``SENTINEL FAILOVER`` with NOGOODSLAVE)."""
        assert self.sentinel is not None
        with redis.Redis(port=self.sentinel.port) as sentinel:
            replicas = sentinel.sentinel_slaves(self.master_name)
        return any(not r["is_disconnected"] and not r["is_sdown"] and not r["is_odown"]
                   and r.get("role-reported") == "slave"
                   and int(r["info-refresh"]) < 20_000 and int(r["last-ok-ping-reply"]) < 4_000
                   for r in replicas)

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
        wait_until(self.replica_promotable, "a replica the sentinel would promote")
        with redis.Redis(port=self.sentinel.port) as sentinel:
            sentinel.sentinel_failover(self.master_name)
        wait_until(lambda: self.master_port() != old, "the failover")
        new = self.master_port()
        with redis.Redis(port=new) as promoted:
            wait_until(lambda: promoted.info("replication").get("role") == "master",
                  "the promoted replica's taking writes")
        with redis.Redis(port=old) as demoted:
            wait_until(lambda: demoted.info("replication").get("role") == "slave",
                  "the old master's demotion")
        return new

    def close(self) -> None:
        for server in (self.sentinel, self.replica, self.master):
            if server is not None:
                server.close()
