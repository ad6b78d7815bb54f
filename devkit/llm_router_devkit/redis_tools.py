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

__all__ = ["PrivateRedis", "drop_namespace", "private_redis"]


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


class PrivateRedis:
    """One ``redis-server`` process that a test may stop and start again on the same port."""

    def __init__(self) -> None:
        self.port = _free_port()
        self._dir = tempfile.mkdtemp(prefix="llmr-redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            for _ in range(200):
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
