"""A drain whose connections fail: the task store's server restarted mid-drain, a Redis
that refuses the password, a Redis that cannot be reached.

Each test injects the fault and checks the task store's rows and, where calls were made,
the backend's own counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
import redis

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.exceptions import TaskStoreError
from airflow_llm_router.store import TaskStore
from airflow_llm_router.store.watch import APPLICATION_NAME
from airflow_llm_router.triggers.solve import DrainTrigger
from llm_router_devkit.demo.embedded import free_port
from tests.integration.backends import serve_backend, set_quotas_from, small_profile
from tests.integration.pg_server import EmbeddedPostgres, private_postgres
from tests.integration.redis_server import private_redis

SCHEMA = "llmr_fault"


def _drain(seconds: float, *, schema: str = SCHEMA, **settings: Any) -> DrainTrigger:
    return DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": schema, "table": "tasks"},
        worker_id="drain-under-test",
        settings={"claim_ttl_s": 15.0, "store_outage_s": 9.0, "claim_batch": 50,
                  "backoff_s": 0.05, "hedge_late_calls": False, **settings},
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + seconds)


async def _event(trigger: DrainTrigger, within_s: float) -> dict[str, Any]:
    return (await asyncio.wait_for(anext(trigger.run()), within_s)).payload


@pytest.fixture
def pg() -> Iterator[EmbeddedPostgres]:
    with private_postgres() as server:
        yield server


@pytest.fixture
def pg_store(pg: EmbeddedPostgres) -> Iterator[TaskStore]:
    with TaskStore(pg.dsn, schema=SCHEMA) as task_store:
        task_store.migrate()
        yield task_store


def _counts(store: TaskStore) -> dict[str, int]:
    """The store's counts, through the test's own outage (its connection breaks too)."""
    try:
        return store.counts()
    except TaskStoreError:
        return store.counts()  # reconnects


def _watching(pg: EmbeddedPostgres) -> bool:
    """Whether a backlog watch (a lingering drain's LISTEN) is connected to ``pg``."""
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                           (APPLICATION_NAME,)).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("down_s", [0.0, 5.0])
async def test_a_postgres_restart_mid_drain_loses_no_answer_and_the_drain_goes_on(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg: EmbeddedPostgres,
    pg_store: TaskStore, router: RouterClient, down_s: float,
) -> None:
    """The task store's server restarts (at once, or down for 5 s: shorter than the claim
    TTL of 15 s) while answers are coming in: the drain retries its store calls, keeps the
    answers buffered, writes every one once the server is back and goes on to the end.
    Every task is solved by one call, under its first claim."""
    profile = small_profile(time_scale=120)
    n = 200
    pg_store.enqueue([f"question {i}" for i in range(n)])
    with serve_backend(profile, monkeypatch, namespace, pg.dsn) as sim:
        set_quotas_from(router, profile)
        drain = asyncio.create_task(_event(_drain(120), within_s=150))
        while _counts(pg_store)["solved"] < 40 and not drain.done():
            await asyncio.sleep(0.02)
        assert not drain.done(), drain.result()
        await asyncio.to_thread(pg.restart, down_s)  # sessions cut off
        event = await drain
        stats = httpx.get(sim.url + "/stats").json()
    assert event["status"] == "done", event
    counts = _counts(pg_store)
    assert counts["solved"] == n and counts["claimed"] == 0 and counts["pending"] == 0
    for task_id in range(1, n + 1):
        row = pg_store.get(task_id)
        assert row is not None and row.answer and row.attempts == 1, row
    # every answer the backend returned was written, and no call was made twice
    assert stats["totals"]["completed"] == n, stats["totals"]
    assert event["summary"]["solved"] + event["summary"]["stale"] >= n


async def test_answers_are_written_after_an_outage_that_outlasts_the_deadline(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg: EmbeddedPostgres,
    pg_store: TaskStore, router: RouterClient,
) -> None:
    """The task store's server goes down mid-drain and comes back only after the drain's
    deadline: the answers the backend returned meanwhile are paid for, so their writes go
    on past the deadline (within ``store_outage_s``) instead of giving up at it, and a
    claim the deadline cut short in the outage ends the claiming, not the drain. Every
    answer is written, the tasks not reached are handed back at once, none stays
    claimed. (Answers are written only when nothing is in flight, so the drain claims,
    not writes, while the store is down.)"""
    profile = small_profile(time_scale=30)  # about 37 calls a second: still busy at the end
    n = 400
    pg_store.enqueue([f"question {i}" for i in range(n)])
    with serve_backend(profile, monkeypatch, namespace, pg.dsn) as sim:
        set_quotas_from(router, profile)
        trigger = _drain(6, claim_ttl_s=30.0, store_outage_s=18.0, flush_every_s=60.0)
        drain = asyncio.create_task(_event(trigger, within_s=60))
        async with httpx.AsyncClient(base_url=sim.url) as http:
            while (await http.get("/stats")).json()["totals"].get("completed", 0) < 40 \
                    and not drain.done():
                await asyncio.sleep(0.02)
        assert not drain.done(), drain.result()
        # down from now until 1.5 s past the deadline
        down_s = max(0.0, trigger.deadline - time.time()) + 1.5
        await asyncio.to_thread(pg.restart, down_s)
        assert time.time() > trigger.deadline  # the outage outlasted the deadline
        event = await drain
        stats = httpx.get(sim.url + "/stats").json()
    assert event["status"] == "done", event
    counts = _counts(pg_store)
    # every answer the backend returned is in the store, each task under its first claim
    assert counts["solved"] == stats["totals"]["completed"], (counts, stats["totals"])
    assert counts["claimed"] == 0 and counts["dead"] == 0, counts
    assert 40 <= counts["solved"] < n and counts["solved"] + counts["pending"] == n, counts
    solved = [row for row in (pg_store.get(i) for i in range(1, n + 1))
              if row is not None and row.status == "solved"]
    assert all(row.answer and row.attempts == 1 for row in solved)


async def test_a_lingering_drain_rides_out_a_postgres_restart_and_takes_new_tasks(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg: EmbeddedPostgres,
    pg_store: TaskStore, router: RouterClient,
) -> None:
    """The backlog is empty and the drain lingers on its watch (a LISTEN connection of its
    own) when the server restarts: the drain waits for the store, watches again, and
    solves the tasks enqueued after the restart."""
    profile = small_profile(time_scale=120)
    pg_store.enqueue([f"question {i}" for i in range(20)])
    with serve_backend(profile, monkeypatch, namespace, pg.dsn):
        set_quotas_from(router, profile)
        drain = asyncio.create_task(_event(_drain(120, linger_s=20.0), within_s=150))
        while not _watching(pg) and not drain.done():  # lingers once the backlog is empty
            await asyncio.sleep(0.02)
        assert not drain.done(), drain.result()
        assert _counts(pg_store)["solved"] == 20
        await asyncio.to_thread(pg.restart)
        try:
            pg_store.enqueue([f"late question {i}" for i in range(10)])
        except TaskStoreError:
            pg_store.enqueue([f"late question {i}" for i in range(10)])  # reconnects
        while _counts(pg_store)["solved"] < 30 and not drain.done():
            await asyncio.sleep(0.02)
        assert not drain.done(), drain.result()  # still lingering, not ended by the outage
        drain.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drain
    counts = _counts(pg_store)
    assert counts["solved"] == 30 and counts["claimed"] == 0


async def test_a_store_outage_past_its_budget_ends_the_drain_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg: EmbeddedPostgres,
    pg_store: TaskStore, router: RouterClient,
) -> None:
    """The server stays down past ``store_outage_s``: the drain ends, within the budget
    of the outage's start, with ``TaskStoreUnavailable`` naming the setting."""
    profile = small_profile(time_scale=120)
    pg_store.enqueue([f"question {i}" for i in range(100)])
    with serve_backend(profile, monkeypatch, namespace, pg.dsn):
        set_quotas_from(router, profile)
        drain = asyncio.create_task(_event(_drain(120, store_outage_s=2.0), within_s=150))
        while _counts(pg_store)["solved"] < 10 and not drain.done():
            await asyncio.sleep(0.02)
        await asyncio.to_thread(pg.stop)
        stopped = time.monotonic()
        event = await drain
        ended = time.monotonic() - stopped
    assert event["status"] == "error", event
    assert "TaskStoreUnavailable" in event["error"] and "store_outage_s=2" in event["error"]
    assert ended < 15, ended


async def test_a_wrong_redis_password_fails_at_once_naming_the_connection(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore,
) -> None:
    """A refused password is not an outage: the drain ends in well under two seconds,
    with an error naming the connection, and hands its claims back."""
    profile = small_profile(time_scale=120)
    store.enqueue([f"question {i}" for i in range(20)])
    with private_redis() as server, serve_backend(profile, monkeypatch, namespace, pg_dsn):
        with redis.Redis.from_url(server.url) as raw:
            raw.config_set("requirepass", "right")
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": server.port,
             "password": "wrong", "extra": {"namespace": namespace}}))
        started = time.monotonic()
        event = await _event(_drain(15, schema=pg_schema), within_s=60)
        took = time.monotonic() - started
    assert event["status"] == "error", event
    assert "llm_router_default" in event["error"] and "password" in event["error"], event
    assert took < 2.0, took
    assert store.counts()["claimed"] == 0


async def test_an_unreachable_redis_is_retried_within_the_deadline_only(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore,
) -> None:
    """Nothing listens at the connection's address: the drain retries for as long as its
    deadline allows (not the 180 s outage budget), then ends with the error and hands its
    claims back."""
    profile = small_profile(time_scale=120)
    store.enqueue([f"question {i}" for i in range(20)])
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": free_port(),
             "extra": {"namespace": namespace}}))
        started = time.monotonic()
        event = await _event(_drain(10, schema=pg_schema), within_s=120)
        took = time.monotonic() - started
    assert event["status"] == "error", event
    assert 5 <= took < 25, took
    assert store.counts()["claimed"] == 0
