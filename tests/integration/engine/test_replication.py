"""Admissions that survive a failover: with ``replicas_to_wait``, an admission is handed to
its caller only once a replica holds it.

A master and its replica on loopback ports, started by the test. The split brain of a
failover is made by hand, as Sentinel makes it: the replica is promoted while clients
still talk to the old master, which keeps taking writes until it is demoted, and its
demotion discards them. An admission acknowledged in that gap is traffic the new master
never sees: its windows count less than was sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
import redis

from airflow_llm_router.engine import Admission, AsyncRouterClient, RouterClient, RouterSettings
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.exceptions import ReplicationLagError
from llm_router_devkit.redis_tools import PrivateRedis

QUOTA = {"rpm": 100, "tpm": 100_000, "max_concurrency": 100}
#: how long a write waits for its replica's acknowledgement: long enough for a loaded
#: machine (200 ms was not, under two CPU burners: a set_quota failed with the lag error)
WAIT_MS = 2_000


@pytest.fixture
def pair() -> Iterator[tuple[PrivateRedis, PrivateRedis]]:
    with ExitStack() as stack:  # a replica that fails to start stops the master too
        master = PrivateRedis()
        stack.callback(master.close)
        master.start()
        replica = PrivateRedis(["--replicaof", "127.0.0.1", str(master.port)])
        stack.callback(replica.close)
        replica.start()
        with redis.Redis(port=replica.port) as r:
            _until(lambda: r.info("replication").get("master_link_status") == "up")
        yield master, replica


def _until(ok: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _promote(master: PrivateRedis, replica: PrivateRedis) -> None:
    """The replica, once it holds everything written so far, becomes a master; the old
    master notices it has no replica left. (Replication is asynchronous: promoted at once,
    a replica slowed by a loaded machine lacks writes acknowledged before the promotion
    too, and the test could not tell the failover's gap from that lag.)"""
    with redis.Redis(port=master.port) as m, redis.Redis(port=replica.port) as r:
        offset = m.info("replication")["master_repl_offset"]
        _until(lambda: r.info("replication").get("slave_repl_offset", -1) >= offset)
        r.execute_command("REPLICAOF", "NO", "ONE")
    with redis.Redis(port=master.port) as m:
        _until(lambda: m.info("replication").get("connected_slaves") == 0)


def _demote(master: PrivateRedis, replica: PrivateRedis) -> None:
    """The old master follows the new one, discarding what it took meanwhile."""
    with redis.Redis(port=master.port) as m:
        m.execute_command("REPLICAOF", "127.0.0.1", str(replica.port))
        _until(lambda: m.info("replication").get("master_link_status") == "up")


def _leases_on(port: int, keys: RouterKeys) -> set[str]:
    with redis.Redis(port=port, decode_responses=True) as r:
        return set(r.hkeys(keys.router("K_LEASES")))


@pytest.mark.parametrize("replicas_to_wait", [1, 0])
def test_no_acknowledged_admission_is_lost_in_a_failover(
        pair: tuple[PrivateRedis, PrivateRedis], replicas_to_wait: int) -> None:
    master, replica = pair
    settings = RouterSettings(namespace=f"repl-{uuid.uuid4().hex[:8]}",
                              replicas_to_wait=replicas_to_wait, replica_wait_ms=WAIT_MS)
    keys = RouterKeys(settings.namespace)
    router = RouterClient.from_url(master.url, settings)
    try:
        router.set_quota("m", QUOTA)
        acknowledged = set()
        for _ in range(3):
            lease = router.admit(10)
            assert isinstance(lease, Admission)
            acknowledged.add(lease.lease_id)
        _promote(master, replica)
        # the old master still takes writes; only a replica's acknowledgement tells
        try:
            lease = router.admit(10)
        except ReplicationLagError as err:
            assert replicas_to_wait == 1
            assert "0 of 1 replica" in str(err)
        else:
            assert isinstance(lease, Admission)
            acknowledged.add(lease.lease_id)
        _demote(master, replica)
        on_new_master = _leases_on(replica.port, keys)
        lost = acknowledged - on_new_master
        if replicas_to_wait:
            assert not lost  # every admission a caller acted on is on the new master
        else:
            assert len(lost) == 1  # without waiting, the gap's admission is gone
    finally:
        router.close()


async def test_the_async_client_waits_for_its_replica_too(
        pair: tuple[PrivateRedis, PrivateRedis]) -> None:
    master, replica = pair
    settings = RouterSettings(namespace=f"repl-{uuid.uuid4().hex[:8]}", replicas_to_wait=1,
                              replica_wait_ms=WAIT_MS)
    router = AsyncRouterClient.from_url(master.url, settings)
    try:
        await router.set_quota("m", QUOTA)
        lease = await router.admit(10)
        assert isinstance(lease, Admission)
        await asyncio.to_thread(_promote, master, replica)
        with pytest.raises(ReplicationLagError):
            await router.admit(10)
    finally:
        await router.aclose()
