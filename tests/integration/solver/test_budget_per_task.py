"""Each task chooses what happens when its preferred model is over its spend budget: a task
enqueued with ``on_budget="overflow"`` goes on to its next allowed model, one enqueued with
``on_budget="wait"`` holds until the budget allows it (real drain, PostgreSQL, Redis and
the simulator over HTTP)."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger
from tests.integration.backends import quotas_from, serve_backend, small_profile

#: 1 micro-dollar per input token, 3 per output token; a year: no period ends in the test
PRICE = {"input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 3_000_000,
         "budget_period_s": 366 * 86400}
BUDGET = 1_000
SPENT = 50 + 3 * 300  # one call of 50 input and 300 output tokens: 950 of the 1,000
CAP = 50  # output tokens reserved (and sent as the cap): a drain's call costs 150 + input
TASKS = 8


@pytest.mark.timeout(120)
async def test_overflow_tasks_go_on_and_wait_tasks_hold(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    profile = small_profile(time_scale=60)  # one-second windows
    quotas = quotas_from(profile)
    router.set_quota("m3", {**quotas["m3"], **PRICE, "budget_micro_usd": BUDGET})
    router.set_quota("m2", quotas["m2"])  # unpriced
    first = router.admit(350, estimated_output_tokens=300, models=["m3"])
    assert isinstance(first, Admission) and first.model == "m3"
    router.complete(first.lease_id, 50, 300)  # 50 micro-dollars left: no call of ours fits
    overflow = store.enqueue([f"overflow {i}" for i in range(TASKS)],
                             allowed_models=["m3", "m2"])  # the default
    waiting = store.enqueue([f"wait {i}" for i in range(TASKS)], allowed_models=["m3", "m2"],
                            on_budget="wait")
    row = store.get(waiting[0])
    assert row is not None and row.on_budget == "wait"
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        trigger = DrainTrigger(
            store={"postgres_conn_id": "postgres_default", "schema": pg_schema,
                   "table": "tasks"},
            worker_id="budget-drain",
            settings={"claim_ttl_s": 30, "claim_batch": 2 * TASKS, "max_in_flight": 100,
                      "backoff_s": 0.05, "max_output_tokens": CAP},
            router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
            # the waiting tasks hold until then: long enough for the others to be solved
            deadline=time.time() + 10)
        event = (await asyncio.wait_for(anext(trigger.run()), 60)).payload
    summary = event["summary"]
    assert summary["solved"] == TASKS and summary["released"] == TASKS, event
    for task_id in overflow:
        solved = store.get(task_id)
        assert solved is not None and solved.status == "solved" and solved.model == "m2"
    for task_id in waiting:
        held = store.get(task_id)
        assert held is not None and held.status == "pending" and held.model is None, held
    spend = router.stats().models["m3"].spend
    assert spend is not None
    assert (spend.settled_micro_usd, spend.reserved_micro_usd) == (SPENT, 0)
