"""A drain off the happy path: a bad task, a Redis outage, claims stranded by a crash.

Each test injects the fault and checks the backend's own counters and the task store.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import psycopg
import pytest
import redis
from psycopg import sql

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.store import DeadFilter, TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger
from tests.integration.backends import quotas_from, serve_backend, set_quotas_from, small_profile
from tests.integration.redis_server import private_redis


def _drain(schema: str, seconds: float, *, claim_ttl_s: float = 5.0,
           max_in_flight: int = 100, hedge_late_calls: bool = True,
           max_errors: int = 3) -> DrainTrigger:
    return DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": schema, "table": "tasks"},
        worker_id="drain-under-test",
        settings={"claim_ttl_s": claim_ttl_s, "claim_batch": 50,
                  "max_in_flight": max_in_flight, "backoff_s": 0.05,
                  "hedge_late_calls": hedge_late_calls, "max_errors": max_errors},
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + seconds)


async def _event(trigger: DrainTrigger, within_s: float) -> dict[str, Any]:
    return (await asyncio.wait_for(anext(trigger.run()), within_s)).payload


def _sim_stats(url: str) -> dict[str, Any]:
    return httpx.get(url + "/stats").json()


async def test_a_task_that_cannot_be_admitted_fails_alone_and_the_drain_ends(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """A row with an invalid model name (enqueue refuses it now; an older row or a direct
    INSERT can still hold one) once killed the admission loop and hung the whole drain."""
    profile = small_profile(time_scale=120)
    store.enqueue([f"prompt {i}" for i in range(20)])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} (prompt, allowed_models) VALUES (%s, %s)")
                     .format(sql.Identifier(pg_schema, "tasks")), ("x", ["bad{x}"]))
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        event = await _event(_drain(pg_schema, seconds=15), within_s=60)
    assert event["status"] == "done", event
    assert event["summary"]["solved"] == 20 and event["summary"]["dead"] == 1
    counts = store.counts()
    assert counts["solved"] == 20 and counts["dead"] == 1 and counts["claimed"] == 0
    (bad,) = [t for t in (store.get(i) for i in range(1, 22)) if t and t.status == "dead"]
    assert "bad{x}" in (bad.last_error or "")


@pytest.mark.parametrize("loss", ["restart", "flushall"])
async def test_a_redis_restart_mid_drain_loses_no_answer_and_the_drain_carries_on(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, loss: str,
) -> None:
    """Redis is killed mid-drain (every key lost) and started again a moment later, or
    flushed: the drain waits for it, quotas come back from PostgreSQL, every answer the
    backend returned is written once, and (the recovery hold: the windows' usage was lost
    with Redis) no window at the backend goes over its limit."""
    profile = small_profile(time_scale=60)  # one-second windows
    n = 150
    store.enqueue([f"question {i}: " + "why " * (i % 20) for i in range(n)])
    with private_redis() as server, serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": server.port,
             "extra": {"namespace": namespace, "lease_ttl_s": 10, "guard_ms": 50,
                       "quota_schema": pg_schema}}))
        router = RouterClient.from_url(server.url, RouterSettings(namespace=namespace))
        quotas = QuotaStore(pg_dsn, router, schema=pg_schema)
        quotas.migrate()
        for model, quota in quotas_from(profile).items():
            quotas.put(model, quota, actor="test")
        # no hedges: this counts one backend call per prompt (a late call's loser, cut
        # off as the drain ends, would be one more)
        drain = asyncio.create_task(_event(_drain(pg_schema, seconds=90,
                                                  hedge_late_calls=False), within_s=120))
        while store.counts()["solved"] < 40 and not drain.done():
            await asyncio.sleep(0.02)
        if loss == "restart":
            server.stop()  # a crash without persistence: quotas, windows, leases are gone
            await asyncio.sleep(0.2)  # the outage itself: a fifth of a window
            server.start()
        else:
            with redis.Redis.from_url(server.url) as raw:
                raw.flushall()  # an operator's mistake: same loss, no outage
        event = await drain
        stats = _sim_stats(sim.url)
        router.close()
    assert event["status"] == "done", event
    counts = store.counts()
    assert counts["solved"] == n and counts["claimed"] == 0 and counts["pending"] == 0
    # every call the backend answered was written, and none was made twice
    assert stats["totals"]["completed"] == n
    # the backend's own strict counters: no window over a limit, no 429
    assert stats["totals"]["violations"] == 0, stats["totals"]
    assert stats["totals"]["rejected_429"] == 0, stats["totals"]


async def test_a_drain_after_a_crash_waits_for_the_dead_workers_claims(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """A worker claimed tasks and died: a drain started right after finds the backlog
    empty, but it must not report done while those claims are live; it takes them when
    they expire."""
    profile = small_profile(time_scale=120)
    store.enqueue([f"prompt {i}" for i in range(30)])
    stranded = store.claim(20, worker_id="dead-worker", claim_ttl_s=3)
    assert len(stranded) == 20
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        event = await _event(_drain(pg_schema, seconds=60), within_s=90)
    assert event["status"] == "done", event
    assert event["summary"]["solved"] == 30
    counts = store.counts()
    assert counts["solved"] == 30 and counts["claimed"] == 0


async def test_a_drain_that_hands_over_ends_with_the_backlog_not_with_others_claims(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """``until_empty`` (the operator's start in the worker): the drain ends once the
    backlog is empty and its own tasks are written, without waiting for another worker's
    live claims or lingering; the trigger it hands over to does that waiting."""
    profile = small_profile(time_scale=120)
    store.enqueue([f"prompt {i}" for i in range(30)])
    assert len(store.claim(20, worker_id="other-worker", claim_ttl_s=3600)) == 20
    drain = DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": pg_schema, "table": "tasks"},
        worker_id="drain-under-test", settings={"linger_s": 600, "claim_batch": 50},
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + 600, until_empty=True)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        event = await _event(drain, within_s=60)
    assert event["status"] == "done", event
    assert event["summary"]["solved"] == 10
    counts = store.counts()
    assert counts["solved"] == 10 and counts["claimed"] == 20


async def test_a_restarted_drain_takes_back_its_own_claims_at_once(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """The triggerer running a drain died and another restarted its trigger: the same
    worker id finds the claims the dead run held (which would last another 10 minutes)
    and solves them first, with their tokens and attempts, instead of waiting for them."""
    profile = small_profile(time_scale=120)
    store.enqueue([f"prompt {i}" for i in range(30)])
    left = store.claim(12, worker_id="drain-under-test", claim_ttl_s=600)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        started = time.monotonic()
        event = await _event(_drain(pg_schema, seconds=60, claim_ttl_s=600), within_s=90)
    assert event["status"] == "done", event
    assert event["summary"]["adopted"] == 12 and event["summary"]["solved"] == 30
    assert time.monotonic() - started < 30  # not the claims' 600 s
    counts = store.counts()
    assert counts["solved"] == 30 and counts["claimed"] == 0
    for task in left:  # the same attempt, finished under the same claim
        row = store.get(task.id)
        assert row is not None and row.attempts == 1


def test_a_drain_whose_loop_shuts_down_hands_back_the_claim_it_was_taking(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """``asyncio.run()`` interrupted (``dag.test()`` runs a trigger inline under it: Ctrl-C,
    or the demo's SIGTERM) cancels every task of its loop at once, the one running the
    drain's store call among them. A claim committed while the drain was being cancelled
    must still be handed back; the drain went on without waiting for it, and its tasks
    stayed claimed until their claims expired."""
    profile = small_profile(time_scale=120)
    store.enqueue([f"prompt {i}" for i in range(20)])
    claimed, go_on = threading.Event(), threading.Event()
    claim = TaskStore.claim

    def claim_then_pause(self: TaskStore, n: int, **kwargs: Any) -> Any:
        tasks = claim(self, n, **kwargs)  # committed: the rows are claimed ...
        claimed.set()
        go_on.wait(30)  # ... and the drain has not heard of them yet
        return tasks

    monkeypatch.setattr(TaskStore, "claim", claim_then_pause)

    async def go_on_once_cancelled(drain: asyncio.Task[Any]) -> None:
        try:
            await asyncio.wait([drain])  # the claim holds it: until the shutdown cancels this
        finally:
            # a drain that does not wait for its claim ends now; one that does, cannot
            await asyncio.wait([drain], timeout=1.0)
            go_on.set()

    async def main() -> None:
        # the trigger as dag.test() runs it (no timeout around it: one more cancellation)
        drain = asyncio.create_task(anext(_drain(pg_schema, seconds=60).run()))
        asyncio.create_task(go_on_once_cancelled(drain))  # noqa: RUF006 (the drain holds it)
        await asyncio.to_thread(claimed.wait, 30)
        # returning ends asyncio.run(): it cancels every task left and waits for them

    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        asyncio.run(main())
    assert claimed.is_set()
    counts = store.counts()
    assert counts["claimed"] == 0 and counts["pending"] == 20, counts


async def test_a_dead_letter_records_the_model_whose_calls_failed_it(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """Any-model tasks die on the one model with a quota (every call answers 500): the
    page's model filter finds them by that model, though their ``allowed_models`` is
    NULL. (Four: fewer errors than open the model's breaker.)"""
    profile = small_profile(time_scale=120, error_rate=1.0)
    store.enqueue([f"prompt {i}" for i in range(4)], max_attempts=1)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        router.set_quota("m3", quotas_from(profile)["m3"])
        drain = DrainTrigger(
            store={"postgres_conn_id": "postgres_default", "schema": pg_schema,
                   "table": "tasks"},
            worker_id="drain-under-test",
            settings={"max_errors": 1, "backoff_s": 0.05, "hedge_late_calls": False},
            router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
            deadline=time.time() + 30)
        event = await _event(drain, within_s=60)
    assert event["status"] == "done", event
    assert event["summary"]["dead"] == 4
    page = store.admin.dead_tasks(matching=DeadFilter(model="m3"))
    assert page.total == 4 and {t.model for t in page.tasks} == {"m3"}
    assert all(t.allowed_models is None for t in page.tasks)


@pytest.mark.parametrize("max_errors", [3, 1])
async def test_a_model_the_backend_does_not_know_is_taken_out_of_rotation(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient, max_errors: int,
) -> None:
    """A quota for a model the backend does not have (it answers 404 unknown_model): the
    model's fault, not the tasks'. Its breaker opens at once with that cause, the tasks
    it failed go to other models, no attempt is burnt and none dies. The 404 is no error
    of the prompt's: with ``max_errors`` 1, counting it would give up the attempt of each
    prompt that met it."""
    profile = small_profile(time_scale=120)
    n = 100
    store.enqueue([f"prompt {i}" for i in range(n)], max_attempts=5)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        router.set_quota("flash-mini-typo", quotas_from(profile)["m3"])
        event = await _event(_drain(pg_schema, seconds=60, max_errors=max_errors),
                             within_s=90)
        stats = _sim_stats(sim.url)
    assert event["status"] == "done", event
    assert event["summary"]["solved"] == n and event["summary"]["dead"] == 0, event
    counts = store.counts()
    assert counts["solved"] == n and counts["dead"] == 0 and counts["pending"] == 0
    assert all(row is not None and row.attempts == 1 and row.model != "flash-mini-typo"
               for row in (store.get(i) for i in range(1, n + 1)))
    typo = router.stats().models["flash-mini-typo"]
    assert typo.counters["unknown_model"] >= 1 and typo.counters["breaker_opened"] >= 1
    assert typo.breaker != "closed" and typo.breaker_cause == "unknown_model", typo
    # one answered call per prompt, plus at most one for each prompt whose late call was
    # hedged (the loser runs on to its end at the backend): a 404 is never an answer
    assert n <= stats["totals"]["completed"] <= n + event["summary"]["hedged"], (
        stats["totals"], event["summary"])


async def test_a_task_only_an_unknown_model_may_take_dies_at_its_first_call(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """Every model a task allows is one the backend says it does not have: no retry can
    help, so the task dies at its first call (one 404 at the backend), naming the model,
    instead of waiting for the breaker's probe and burning its attempts."""
    profile = small_profile(time_scale=120)
    store.enqueue(["only the typo may answer"], allowed_models=["flash-mini-typo"],
                  max_attempts=5)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        router.set_quota("flash-mini-typo", quotas_from(profile)["m3"])
        started = time.monotonic()
        event = await _event(_drain(pg_schema, seconds=15, hedge_late_calls=False),
                             within_s=45)
        took = time.monotonic() - started
        stats = _sim_stats(sim.url)
    assert event["status"] == "done", event
    assert event["summary"]["dead"] == 1, event
    row = store.get(1)
    assert row is not None and row.status == "dead" and row.attempts == 1, row
    assert row.model == "flash-mini-typo" and "404" in (row.last_error or ""), row
    assert stats["totals"]["completed"] == 0, stats["totals"]
    typo = router.stats().models["flash-mini-typo"]
    assert typo.counters["unknown_model"] == 1, typo
    assert took < 10, took  # not held for the breaker's 30 s probe
