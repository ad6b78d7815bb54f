"""Prices, budgets and spend through the quota API on the real Airflow API server."""

from __future__ import annotations

from airflow_llm_router.engine.types import Admission
from tests.integration.plugins.conftest import QuotaUiStack, api

PRICED = {"rpm": 60, "tpm": 90_000, "max_concurrency": 8,
          "input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 4_000_000,
          "budget_micro_usd": 2_000, "budget_period_s": 3600}


def test_spend_and_budget_are_listed(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    admin = tokens["admin"]
    assert api(ui, admin, "PUT", "/api/quotas/priced", json=PRICED).status_code == 201
    assert api(ui, admin, "PUT", "/api/quotas/free",
               json={"rpm": 60, "tpm": 90_000, "max_concurrency": 8}).status_code == 201
    with ui.router() as router:
        done = router.admit(300, estimated_output_tokens=100, models=["priced"])
        held = router.admit(300, estimated_output_tokens=100, models=["priced"])
        assert isinstance(done, Admission) and isinstance(held, Admission)
        router.complete(done.lease_id, 150, 50)  # 150 + 200 micro-dollars
    listed = {m["model"]: m for m in api(ui, admin, "GET", "/api/quotas").json()["models"]}
    assert listed["priced"]["quota"]["budget_micro_usd"] == 2_000
    spend = listed["priced"]["usage"]["spend"]
    assert (spend["settled_micro_usd"], spend["reserved_micro_usd"]) == (350, 600)
    assert spend["budget_micro_usd"] == 2_000 and spend["spend_pct"] == 47.5
    assert spend["period_s"] == 3600
    assert listed["free"]["usage"]["spend"] is None
    body = api(ui, admin, "GET", "/api/quotas").json()
    assert body["total_spend"]["settled_micro_usd"] == 350
    assert body["total_spend"]["budget_micro_usd"] is None


def test_bad_prices_and_budgets_are_422_naming_the_field(ui: QuotaUiStack,
                                                         tokens: dict[str, str]) -> None:
    admin = tokens["admin"]
    for body, field in [({**PRICED, "input_micro_usd_per_mtok": -1}, "input_micro_usd_per_mtok"),
                        ({**PRICED, "budget_micro_usd": -5}, "budget_micro_usd"),
                        ({**PRICED, "budget_period_s": 0}, "budget_period_s")]:
        response = api(ui, admin, "PUT", "/api/quotas/m", json=body)
        assert response.status_code == 422, response.text
        assert field in [d["field"] for d in response.json()["detail"]]
    assert api(ui, admin, "PUT", "/api/quotas/m",
               json={"rpm": 60, "tpm": 90_000, "max_concurrency": 8}).status_code == 201
    # a budget patched onto an unpriced model: the merged quota is refused, naming it
    response = api(ui, admin, "PATCH", "/api/quotas/m", json={"budget_micro_usd": 100})
    assert response.status_code == 422, response.text
    assert "budget_micro_usd" in response.text and "needs a price" in response.text
