"""A drain tells the engine how many tasks wait in its store unclaimed, so admission can
weigh a slower model against the whole backlog (lib/finish.lua), not only the requests the
drains hold."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import pytest
import redis

from airflow_llm_router.engine import AsyncRouterClient, RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.solver.upkeep import BACKLOG_REPORT_TTL_S, report_backlog, stop_helpers
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger
from tests.integration.backends import drain_of, serve_backend, set_quotas_from, small_profile

TASKS = 200
IN_FLIGHT = 20


def drain_for(pg_schema: str) -> DrainTrigger:
    """A drain of the test's store, :data:`IN_FLIGHT` calls at a time, for 4 s at most."""
    return drain_of(pg_schema, {"claim_ttl_s": 30, "claim_batch": IN_FLIGHT,
                                "max_in_flight": IN_FLIGHT, "backoff_s": 0.05}, 4)


@pytest.mark.timeout(60)
async def test_a_drain_reports_its_unclaimed_backlog(
    monkeypatch: pytest.MonkeyPatch, namespace: str, redis_url: str, pg_dsn: str,
    pg_schema: str, store: TaskStore, router: RouterClient,
) -> None:
    profile = small_profile(time_scale=1)  # one-minute windows: 75 calls in the first
    store.enqueue([f"prompt {i}" for i in range(TASKS)])
    key = RouterKeys(namespace).router("K_BACKLOG")
    source = f"{pg_schema}.tasks"
    with serve_backend(profile, monkeypatch, namespace, pg_dsn), \
            redis.Redis.from_url(redis_url, decode_responses=True) as raw:
        set_quotas_from(router, profile)
        # made once the backend is up: its 4 s run from here, not from before the
        # simulator's start (seconds on a loaded machine)
        drain = asyncio.create_task(anext(drain_for(pg_schema).run()))
        reports = []  # until one follows the drain's claims
        while not reports or int(reports[-1].split(":")[0]) == TASKS:
            assert not drain.done(), f"the drain ended without reporting its claims: {reports}"
            if (report := raw.hget(key, source)) is not None:
                reports.append(report)
            await asyncio.sleep(0.02)
        event = (await asyncio.wait_for(drain, 30)).payload
        left = raw.hget(key, source)
    tasks, until_ms = (int(x) for x in reports[-1].split(":"))
    # what a claim could take: not the tasks the drain holds, nor those it solved (at most
    # the first window's 75 calls)
    assert TASKS - 75 - IN_FLIGHT <= tasks <= TASKS - IN_FLIGHT, reports
    assert event["status"] == "done"
    assert left is not None
    # the last report holds no longer than its TTL past the drain's end
    assert int(left.split(":")[1]) <= router.stats().now_ms + BACKLOG_REPORT_TTL_S * 1000
    assert until_ms > 0


class SwallowsCancellation(AsyncRouterClient):
    """The real client, its backlog report a slow call that swallows a cancellation, as a
    call under way did in a loaded CI run (the reporter went on after the drain ended and
    the drain waited for it for ever)."""

    inside: asyncio.Event

    async def report_backlog(self, source: str, tasks: int, ttl_s: float = 5.0) -> int:
        self.inside.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.2)
        return await super().report_backlog(source, tasks, ttl_s)


@pytest.mark.timeout(60)
async def test_the_backlog_reporter_stops_when_its_cancellation_is_swallowed(
    namespace: str, redis_url: str, pg_schema: str, store: TaskStore,
) -> None:
    client = SwallowsCancellation.from_url(redis_url, RouterSettings(namespace=namespace))
    client.inside = asyncio.Event()
    stop = asyncio.Event()

    async def count() -> int:
        return await asyncio.to_thread(store.backlog_size)

    reporter = asyncio.create_task(report_backlog(client, f"{pg_schema}.tasks", count, stop))
    try:
        await asyncio.wait_for(client.inside.wait(), 10)
        stop.set()  # as the drain ends: the stop, then the cancellation, mid-report
        await stop_helpers([reporter])
        assert reporter.done(), "the reporter went on after the drain ended"
        with redis.Redis.from_url(redis_url, decode_responses=True) as raw:
            assert raw.hget(RouterKeys(namespace).router("K_BACKLOG"), f"{pg_schema}.tasks")
    finally:
        reporter.cancel()
        await client.aclose()


@pytest.mark.timeout(60)
async def test_no_report_counts_the_tasks_a_drain_has_claimed(
    monkeypatch: pytest.MonkeyPatch, namespace: str, redis_url: str, pg_dsn: str,
    pg_schema: str, store: TaskStore, router: RouterClient,
) -> None:
    """The engine counts the reported tasks and the requests waiting in it: a report made
    before a claim counts the claimed tasks twice, so a drain's first report follows its
    first claim."""
    first = await _first_report(monkeypatch, namespace, redis_url, pg_dsn, pg_schema, store,
                                router)
    assert int(first.split(":")[0]) <= TASKS - IN_FLIGHT, first


async def _first_report(monkeypatch: pytest.MonkeyPatch, namespace: str, redis_url: str,
                        pg_dsn: str, pg_schema: str, store: TaskStore,
                        router: RouterClient) -> str:
    """Drain :data:`TASKS` tasks; the drain's first backlog report (``tasks:until_ms``)."""
    profile = small_profile(time_scale=1)  # one-minute windows: 75 calls in the first
    store.enqueue([f"prompt {i}" for i in range(TASKS)])
    key = RouterKeys(namespace).router("K_BACKLOG")
    with serve_backend(profile, monkeypatch, namespace, pg_dsn), \
            redis.Redis.from_url(redis_url, decode_responses=True) as raw:
        set_quotas_from(router, profile)
        drain = asyncio.create_task(anext(drain_for(pg_schema).run()))  # as above
        while (first := raw.hget(key, f"{pg_schema}.tasks")) is None:
            assert not drain.done(), "the drain ended without reporting"
            await asyncio.sleep(0.005)  # a poll of Redis: nothing to wait on
        event = (await asyncio.wait_for(drain, 30)).payload
    assert event["status"] == "done"
    return str(first)


@pytest.mark.timeout(60)
async def test_a_report_counts_the_backlog_up_to_the_cap(
    monkeypatch: pytest.MonkeyPatch, namespace: str, redis_url: str, pg_dsn: str,
    pg_schema: str, store: TaskStore, router: RouterClient,
) -> None:
    """A full count reads every pending task (726 ms at a million on this machine), up to
    ten times a second per drain: a drain counts only up to BACKLOG_REPORT_CAP."""
    monkeypatch.setattr("airflow_llm_router.solver.drain.BACKLOG_REPORT_CAP", 50)
    first = await _first_report(monkeypatch, namespace, redis_url, pg_dsn, pg_schema, store,
                                router)
    assert int(first.split(":")[0]) == 50, first  # 180 or so unclaimed, counted up to 50


@pytest.mark.timeout(60)
async def test_reports_are_spaced_by_what_a_count_costs(
    namespace: str, redis_url: str, pg_schema: str,
) -> None:
    """A drain that claims on and on asks for a report after each claim; when a count
    takes 0.2 s (a large backlog on a busy server) the next waits 2 s, not 0.1 s."""
    client = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    stop, claimed = asyncio.Event(), asyncio.Event()
    counts: list[float] = []

    async def count() -> int:
        counts.append(time.monotonic())
        await asyncio.sleep(0.2)  # stands for the count's cost
        return 1000

    async def claiming() -> None:
        while not stop.is_set():
            claimed.set()
            await asyncio.sleep(0.02)

    reporter = asyncio.create_task(
        report_backlog(client, f"{pg_schema}.tasks", count, stop, claimed))
    claims = asyncio.create_task(claiming())
    try:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 2.5)  # the window observed
        stop.set()
        await stop_helpers([reporter, claims])
    finally:
        await client.aclose()
    gaps = [b - a for a, b in itertools.pairwise(counts)]
    assert 1 <= len(counts) <= 2, counts  # 0.1 s apart, it counted about eight times
    assert all(gap >= 2.0 for gap in gaps), gaps
