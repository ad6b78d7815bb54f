"""No window over target across a Sentinel failover, with a pause of about one window.

A master, its replica and a sentinel on loopback ports. A client admits without pause
(rpm N per W s, each lease completed at once) while ``SENTINEL FAILOVER`` promotes the
replica: the client goes on admitting on the old master until Sentinel demotes it, and
those admissions never reach the new master. When the client's connection reaches the new
master it holds the namespace for one window (``engine/failover.py``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from airflow_llm_router.engine import Admission, AsyncRouterClient, RouterSettings, Wait
from airflow_llm_router.solver.outage import RedisOutage
from llm_router_devkit.redis_tools import LocalSentinel

N, W = 10, 2.0
GUARD_MS = 200
#: client clocks see an admission some time after Redis decided it (a loaded machine
#: delays a reply): a span this much shorter than the window is counted, not the window
SLACK_S = 0.5


@pytest.fixture
def sentinel() -> Iterator[LocalSentinel]:
    with LocalSentinel() as s:
        yield s


def most_in_a_window(times: list[float], span: float) -> int:
    """The most admissions that any interval of ``span`` seconds holds."""
    times = sorted(times)
    most, first = 0, 0
    for last, t in enumerate(times):
        while t - times[first] >= span:
            first += 1
        most = max(most, last - first + 1)
    return most


def kill_master(sentinel: LocalSentinel) -> None:
    """SIGKILL the master; return once the sentinel has promoted the replica."""
    old = sentinel.master_port()
    sentinel.master.stop()
    deadline = time.monotonic() + 60
    while sentinel.master_port() == old:
        assert time.monotonic() < deadline, "no failover after the master was killed"
        time.sleep(0.05)


FAULTS = {"sentinel-failover": LocalSentinel.failover, "master-sigkill": kill_master}


async def admit_across_failover(sentinel: LocalSentinel, fault: str = "sentinel-failover",
                                ) -> tuple[list[float], float, float, AsyncRouterClient]:
    """Admit for a window, fail over (``FAULTS``), admit for three windows more; the
    admissions' times and when the failover started and ended (monotonic s)."""
    settings = RouterSettings(namespace=f"fo-{uuid.uuid4().hex[:8]}", guard_ms=GUARD_MS)
    router = AsyncRouterClient.from_url(sentinel.url, settings)
    await router.set_quota("m", {"rpm": N, "tpm": 1_000_000, "max_concurrency": 100,
                                 "window_s": W})
    outage = RedisOutage(60.0)
    times: list[float] = []
    stop = asyncio.Event()

    async def admitting() -> None:
        while not stop.is_set():
            decision = await outage.call(router.admit, 1, what="admit")
            if isinstance(decision, Admission):
                times.append(time.monotonic())
                await outage.call(router.complete, decision.lease_id, what="complete")
            else:
                assert isinstance(decision, Wait)
                await asyncio.sleep(min(decision.retry_after_ms, 100) / 1000)

    worker = asyncio.create_task(admitting())
    try:
        while len(times) < N + 1:  # a window rolled over on the old master
            await asyncio.sleep(0.05)
        started = time.monotonic()
        await asyncio.to_thread(FAULTS[fault], sentinel)
        ended = time.monotonic()
        await asyncio.sleep(3 * W)
    finally:
        stop.set()
        await worker
    return times, started, ended, router


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_no_window_over_target_across_a_failover(sentinel: LocalSentinel, fault: str,
                                                      ) -> None:
    times, started, ended, router = await admit_across_failover(sentinel, fault)
    try:
        watch = router.redis.connection_pool.connection_kwargs["master_watch"]
        assert watch.moves >= 1  # the client reached the new master and held
        if fault == "sentinel-failover":
            # the old master admitted while the new one was promoted (what a hold covers)
            assert any(started < t < ended for t in times)
        assert most_in_a_window(times, W - SLACK_S) <= N
        # the pause is about one window: the hold (W + guard) from the client's move, which
        # follows the failover's end by a reconnection (the outage's backoff: up to 2 s)
        resumed = [t for t in times if t > ended]
        assert resumed[0] - ended < W + GUARD_MS / 1000 + 2.5
        assert len(resumed) >= N  # admission resumed
    finally:
        await router.aclose()


async def test_a_pools_connections_leave_the_master_it_has_left(sentinel: LocalSentinel,
                                                               ) -> None:
    """Once one connection of an asyncio pool reaches the new master, the connections that
    were in use across the failover (redis-py drops only idle ones when it sees a new
    master address) leave the old master at their next checkout: otherwise they go on
    admitting there, while the new connections admit on the new master, until Sentinel
    demotes it (both a whole window once the hold ends). Read from the connections."""
    router = AsyncRouterClient.from_url(sentinel.url, RouterSettings(namespace="fo-pool"))
    pool = router.redis.connection_pool
    watch = pool.connection_kwargs["master_watch"]
    old = sentinel.master_port()
    busy = [await pool.get_connection() for _ in range(2)]
    try:
        assert {c.port for c in busy} == {old}
        # SENTINEL FAILOVER, no further than the new master's being named: the old one
        # still takes writes until its demotion (which closes its clients' connections)
        assert sentinel.sentinel is not None
        with redis.Redis(port=sentinel.sentinel.port) as s:
            s.sentinel_failover(sentinel.master_name)
        new = old
        deadline = time.monotonic() + 30
        while new == old:  # until a new connection reaches the new master (and holds)
            assert time.monotonic() < deadline, "the sentinel never named the new master"
            fresh = pool.make_connection()
            await fresh.connect()
            new = fresh.port
            await fresh.disconnect()
            if new == old:
                await asyncio.sleep(0.05)
        assert watch.moves == 1
        with redis.Redis(port=old) as before:
            if before.info("replication").get("role") != "master":
                pytest.skip("the old master was demoted before the pool could be checked")
    finally:
        for c in busy:
            await pool.release(c)
    held = [await pool.get_connection() for _ in range(2)]
    try:
        assert [c.port for c in held] == [new, new]
        assert watch.moves == 3  # each connection that moved over restarted the hold
    finally:
        for c in held:
            await pool.release(c)
        await router.aclose()
