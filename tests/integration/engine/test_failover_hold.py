"""No window over target across a Sentinel failover, with a pause of about one window.

A master, its replica and a sentinel on loopback ports. A client admits without pause
(rpm N per W s, each lease completed at once) while ``SENTINEL FAILOVER`` promotes the
replica: the client goes on admitting on the old master until Sentinel demotes it, and
those admissions never reach the new master. When the client's connection reaches the new
master it holds the namespace for one window (``engine/failover.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Iterator

import pytest

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


async def admit_across_failover(sentinel: LocalSentinel) -> tuple[list[float], float, float,
                                                                   AsyncRouterClient]:
    """Admit for a window, fail over, admit for three windows more; the admissions' times
    and when the failover started and ended (monotonic s)."""
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
        await asyncio.to_thread(sentinel.failover)
        ended = time.monotonic()
        await asyncio.sleep(3 * W)
    finally:
        stop.set()
        await worker
    return times, started, ended, router


async def test_no_window_over_target_across_a_failover(sentinel: LocalSentinel) -> None:
    times, started, ended, router = await admit_across_failover(sentinel)
    try:
        watch = router.redis.connection_pool.connection_kwargs["master_watch"]
        assert watch.moves >= 1  # the client reached the new master and held
        # the old master admitted while the new one was promoted (the gap a hold covers)
        assert any(started < t < ended for t in times)
        assert most_in_a_window(times, W - SLACK_S) <= N
        # the pause is about one window: the hold (W + guard) after the move
        after = [t for t in times if t > started]
        gaps = [b - a for a, b in itertools.pairwise(after)]
        assert max(gaps) < 2 * W + GUARD_MS / 1000 + 1.0
        assert sum(1 for t in times if t > ended) >= N  # admission resumed
    finally:
        await router.aclose()
