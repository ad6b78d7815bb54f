"""Local Redis Clusters made of each major version of ``redis-server`` on PATH (the test
command's 6.2 from the virtualenv, Debian's 7 in /usr/bin), so a cluster test runs on
both; and a slot moved from one node to another as ``redis-cli --cluster reshard`` does."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from llm_router_devkit.redis_tools import LocalCluster

__all__ = ["SERVER_DIRS", "SERVER_IDS", "cluster_of", "reshard"]


def _server_dirs() -> list[str]:
    """One PATH folder per major version of ``redis-server`` found on PATH."""
    found: dict[str, str] = {}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        binary = os.path.join(folder, "redis-server")
        if folder and os.access(binary, os.X_OK):
            out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                 check=False).stdout
            major = re.search(r"v=(\d+)\.", out)
            if major:
                found.setdefault(major.group(1), folder)
    return list(found.values())


SERVER_DIRS = _server_dirs()
#: pytest ids of SERVER_DIRS
SERVER_IDS = [f"redis-server-in-{d.strip('/').replace('/', '-')}" for d in SERVER_DIRS]


@contextmanager
def cluster_of(server_dir: str, masters: int = 3) -> Iterator[LocalCluster]:
    """A cluster of ``masters`` nodes running the ``redis-server`` in ``server_dir``."""
    path = os.environ["PATH"]
    os.environ["PATH"] = server_dir + os.pathsep + path  # the nodes' redis-server
    try:
        c = LocalCluster(masters).__enter__()
    finally:
        os.environ["PATH"] = path
    try:
        yield c
    finally:
        c.__exit__(None, None, None)


def reshard(cluster: LocalCluster, slot: int, *, per_migrate: int = 10,
            mid_move: Callable[[], None] = lambda: None,
            pace: Callable[[list[redis.Redis]], Callable[[], None]] | None = None,
            ) -> tuple[int, float, float]:
    """Move ``slot`` from its node to the next one as ``redis-cli --cluster reshard`` does
    (``SETSLOT`` IMPORTING / MIGRATING, ``MIGRATE`` of ``per_migrate`` keys at a time,
    ``SETSLOT NODE``), calling ``mid_move`` after the first ``MIGRATE``. ``pace``, given the
    nodes before each ``MIGRATE``, returns what to wait on after it. Returns the keys
    moved, when the slot was marked migrating and when the new node took it (monotonic s).
    """
    nodes = [redis.Redis(port=n.port) for n in cluster.nodes]
    try:
        ids = [n.execute_command("CLUSTER", "MYID").decode() for n in nodes]
        owner = next(i for i, n in enumerate(nodes)
                     if n.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) > 0)
        source, target = nodes[owner], nodes[(owner + 1) % len(nodes)]
        target_id = ids[(owner + 1) % len(nodes)]
        target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[owner])
        source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        migrating = time.monotonic()
        port = cluster.nodes[(owner + 1) % len(nodes)].port
        moved = 0
        while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, per_migrate):
            after = pace(nodes) if pace is not None else None
            source.execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "REPLACE",
                                   "KEYS", *keys)
            if not moved:
                mid_move()
            moved += len(keys)
            if after is not None:
                after()
        owned = migrating
        for node in (target, source, *(n for n in nodes if n not in (source, target))):
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            if node is target:
                owned = time.monotonic()
        assert source.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
        assert target.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) > 0
        return moved, migrating, owned
    finally:
        for n in nodes:
            n.close()
