"""``on_budget`` over HTTP: a ``/schedule`` body and each task of ``POST /tasks`` choose
whether a model over its spend budget is passed (overflow) or waited for (wait)."""

from __future__ import annotations

import httpx

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission
from airflow_llm_router.store import TaskStore
from tests.integration.web.test_tasks_api import MakeTasksApi, make_tasks_api  # noqa: F401

ROOMY = {"rpm": 1000, "tpm": 1_000_000, "max_concurrency": 100}
#: 1 micro-dollar a token; a year: no period ends in the test
PRICED = {**ROOMY, "input_micro_usd_per_mtok": 1_000_000,
          "output_micro_usd_per_mtok": 1_000_000, "budget_micro_usd": 500,
          "budget_period_s": 366 * 86400}


async def test_schedule_waits_for_the_budget_or_overflows(api: httpx.AsyncClient,
                                                          engine: RouterClient) -> None:
    engine.set_quota("priced", PRICED)
    engine.set_quota("free", ROOMY)
    spent = engine.admit(450, models=["priced"])
    assert isinstance(spent, Admission)
    engine.complete(spent.lease_id, 400, 50)  # 450 of 500: a call of 100 no longer fits
    body = {"estimated_tokens": 100, "models": ["priced", "free"]}
    waited = (await api.post("/schedule", json={**body, "on_budget": "wait"})).json()
    assert waited["status"] == "wait" and waited["reason"] == "budget", waited
    went_on = (await api.post("/schedule", json=body)).json()  # overflow: the default
    assert went_on["status"] == "admitted" and went_on["model"] == "free", went_on
    bad = await api.post("/schedule", json={**body, "on_budget": "later"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "on_budget"


async def test_posted_tasks_keep_their_choice(make_tasks_api: MakeTasksApi,  # noqa: F811
                                              store: TaskStore) -> None:
    api = await make_tasks_api()
    response = await api.post("/tasks", json={"tasks": [
        {"prompt": "hold me", "on_budget": "wait"}, {"prompt": "let me go on"}]})
    assert response.status_code == 201, response.text
    waiting, going = response.json()["ids"]
    assert (await api.get(f"/tasks/{waiting}")).json()["on_budget"] == "wait"
    assert (await api.get(f"/tasks/{going}")).json()["on_budget"] == "overflow"
    claimed = {t.id: t.on_budget for t in store.claim(2, worker_id="w", claim_ttl_s=30)}
    assert claimed == {waiting: "wait", going: "overflow"}
    bad = await api.post("/tasks", json={"tasks": [{"prompt": "x", "on_budget": "never"}]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "tasks.0.on_budget"
    assert store.counts()["pending"] + store.counts()["claimed"] == 2  # nothing written
