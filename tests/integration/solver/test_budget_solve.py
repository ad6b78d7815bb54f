"""Spend budgets through the real solver (SolveTrigger) and the simulator over HTTP: a
preferred, priced model takes prompts while its budget lasts, then they overflow to the next
model; with an output cap spend never passes the budget, and the engine's spend is what the
backend's answers cost."""

from __future__ import annotations

import time

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.triggers.solve import SolveTrigger
from tests.integration.backends import quotas_from, serve_backend, small_profile

CAP = 50  # output tokens sent to the backend as its maximum, and reserved
#: a year: no period boundary falls inside the test
PRICE = {"input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 3_000_000,
         "budget_period_s": 366 * 86400}


def cost(inp: int, out: int) -> int:
    return -(-(inp * PRICE["input_micro_usd_per_mtok"]
               + out * PRICE["output_micro_usd_per_mtok"]) // 1_000_000)


async def test_prompts_overflow_to_the_next_model_when_the_budget_is_spent(
        monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
        router: RouterClient) -> None:
    profile = small_profile(time_scale=60)  # one-second windows
    budget = 10 * cost(30, CAP)  # about ten calls' worth on m3
    quotas = quotas_from(profile)
    router.set_quota("m3", {**quotas["m3"], **PRICE, "budget_micro_usd": budget})
    router.set_quota("m2", {**quotas["m2"], **PRICE})
    router.set_budget({"budget_micro_usd": 10**12, "budget_period_s": 366 * 86400})
    items = [SolveItem(key=str(i), prompt=f"question {i}: " + "why " * (i % 25),
                       request_id=f"b-{i}", models=("m3", "m2"),
                       max_output_tokens=CAP).to_dict() for i in range(40)]
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        trigger = SolveTrigger(items=items, router_conn_id="llm_router_default",
                               backend_conn_id="models_backend_default",
                               deadline=time.time() + 60,
                               settings={"max_in_flight": 100, "backoff_s": 0.05})
        event = (await anext(trigger.run())).payload
    results = event["results"]
    assert all(r["status"] == "solved" for r in results), results
    by_model: dict[str, list[dict]] = {"m3": [], "m2": []}
    for r in results:
        by_model[r["model"]].append(r)
    assert by_model["m3"] and by_model["m2"]  # the budget bound m3; the rest overflowed
    stats = router.stats()
    for model, answered in by_model.items():
        spend = stats.models[model].spend
        assert spend is not None and spend.reserved_micro_usd == 0
        # the engine settled exactly what the backend's answers cost
        assert spend.settled_micro_usd == sum(
            cost(r["input_tokens"], r["output_tokens"]) for r in answered)
        assert all(r["output_tokens"] <= CAP for r in answered)
    # with the output cap no call costs more than its reservation: the budget holds exactly
    m3 = stats.models["m3"].spend
    assert m3 is not None and m3.settled_micro_usd <= budget
    assert stats.total_spend is not None
    assert stats.total_spend.settled_micro_usd == sum(
        cost(r["input_tokens"], r["output_tokens"]) for r in results)
