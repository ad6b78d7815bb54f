"""The drain DAG end to end through real Airflow (dag.test), Redis, PostgreSQL and the
simulator: every task answered, zero 429s, each model's share following its quota."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from tests.integration.backends import serve_backend, set_quotas_from, small_profile


def _run_drain(schema: str, dag_id: str = "llm_router_e2e") -> str:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag().get_dag(dag_id)
    assert dag is not None
    run = dag.test(run_conf={"store_schema": schema})
    return str(run.state)


def _prompts(n: int) -> list[str]:
    return [f"Task {i}: summarise the following notes. " + "note " * (i % 40) for i in range(n)]


@pytest.mark.slow
def test_drain_solves_backlog_within_quotas(
    airflow_db: None, monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
    pg_schema: str, store: TaskStore, router: RouterClient,
) -> None:
    profile = small_profile(time_scale=60)
    store.enqueue(_prompts(400))
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        assert _run_drain(pg_schema) == "success"
        stats = httpx.get(sim.url + "/stats").json()
    assert store.counts() == {"pending": 0, "claimed": 0, "solved": 400, "dead": 0}
    with store.connection.transaction() as conn:
        rows = conn.execute(
            f'SELECT model, answer FROM "{pg_schema}".tasks').fetchall()
    assert all(answer for _, answer in rows)
    assert stats["totals"]["rejected_429"] == 0 and stats["totals"]["violations"] == 0
    for model in stats["models"].values():
        assert model["peak_offered_requests_in_window"] <= model["limits"]["rpm"]
    # saturated for several windows, each model serves in proportion to its rpm
    served = Counter(model for model, _ in rows)
    total_rpm = sum(m.rpm for m in profile.models)
    for m in profile.models:
        expected = m.rpm / total_rpm
        assert abs(served[m.name] / 400 - expected) <= 0.1 * expected + 0.02, served


@pytest.mark.slow
def test_the_drain_as_async_tasks_solves_the_backlog_within_quotas(
    airflow_db: None, monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
    pg_schema: str, store: TaskStore, router: RouterClient,
) -> None:
    """SolveTaskAsyncOperator: the same drain in the worker's event loop (no triggerer)."""
    profile = small_profile(time_scale=60)
    store.enqueue(_prompts(200))
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        assert _run_drain(pg_schema, "llm_router_async") == "success"
        stats = httpx.get(sim.url + "/stats").json()
    assert store.counts() == {"pending": 0, "claimed": 0, "solved": 200, "dead": 0}
    assert stats["totals"]["completed"] == 200
    assert stats["totals"]["rejected_429"] == 0 and stats["totals"]["violations"] == 0


@pytest.mark.slow
def test_drain_with_faults_loses_nothing(
    airflow_db: None, monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
    pg_schema: str, store: TaskStore, router: RouterClient,
) -> None:
    # 3 s windows, not 1 s: the engine's guard covers a late arrival at the backend of up
    # to a quarter of a window (lib/guard.lua, GUARD_MAX), and on a loaded 2-core machine
    # the full suite stalls a process for half a second now and then. At 1 s windows two
    # loaded runs met 41 and 43 rpm 429s, every model offered 1.5-1.6 times its limit in
    # one window at once (m3: 62 of 40): a stall 30 provider seconds long at that scale,
    # outside the guard's promise, not the router counting wrong.
    profile = small_profile(time_scale=20, error_rate=0.05, timeout_rate=0.02, timeout_s=4)
    ids = store.enqueue(_prompts(300), max_attempts=3)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        assert _run_drain(pg_schema) == "success"
        stats = httpx.get(sim.url + "/stats").json()
    counts = store.counts()
    assert counts["pending"] == counts["claimed"] == 0
    assert counts["solved"] + counts["dead"] == 300
    assert stats["totals"]["errors"] > 0 and stats["totals"]["timeouts"] > 0
    for task_id in ids:
        row = store.get(task_id)
        assert row is not None
        if row.status == "solved":
            assert row.answer and row.model
        else:
            assert row.last_error  # dead-lettered with its error
    # on failure: each model's violations at the backend beside what the engine learned
    # (its guard, widened by measured delays and 429s, and its counters)
    # (as JSON: pytest cuts a dict's repr short, and a loaded run's failure showed only m0)
    engine = router.stats().models
    assert stats["totals"]["rejected_429"] == 0, json.dumps({
        name: {"backend": model,
               "engine": engine[name].to_dict() if name in engine else None}
        for name, model in stats["models"].items()}, default=str)
