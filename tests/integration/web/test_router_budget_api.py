"""The router-wide budget through the quota API on the real Airflow API server:
``GET/PUT /api/budget`` (readers read, editors change, 422 naming the field)."""

from __future__ import annotations

from airflow_llm_router.engine.quota import RouterBudget
from airflow_llm_router.engine.types import Admission
from tests.integration.plugins.conftest import QuotaUiStack, api

PRICED = {"rpm": 60, "tpm": 90_000, "max_concurrency": 8,
          "input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 4_000_000}
BUDGET = {"budget_micro_usd": 5_000, "budget_period_s": 3600}


def test_an_editor_sets_the_budget_and_a_viewer_reads_it(ui: QuotaUiStack,
                                                         tokens: dict[str, str]) -> None:
    empty = api(ui, tokens["viewer"], "GET", "/api/budget")
    assert empty.status_code == 200, empty.text
    assert empty.json()["budget"] is None
    put = api(ui, tokens["op"], "PUT", "/api/budget", json=BUDGET)
    assert put.status_code == 200, put.text
    assert put.json()["action"] == "create" and put.json()["audit_id"] is not None
    assert api(ui, tokens["admin"], "PUT", "/api/quotas/priced", json=PRICED).status_code == 201
    with ui.router() as router:
        assert router.budget() == RouterBudget(**BUDGET)
        lease = router.admit(300, estimated_output_tokens=100, models=["priced"])
        assert isinstance(lease, Admission)
        router.complete(lease.lease_id, 150, 50)  # 150 + 200 micro-dollars
    body = api(ui, tokens["viewer"], "GET", "/api/budget").json()
    assert body["budget"] == {"budget_micro_usd": 5_000, "budget_period_s": 3600.0}
    assert body["applied"] is True and body["updated_by"] == "op"
    spend = body["total_spend"]
    assert (spend["settled_micro_usd"], spend["budget_micro_usd"], spend["spend_pct"]) == (
        350, 5_000, 7.0)
    audit = api(ui, tokens["viewer"], "GET", "/api/audit").json()
    assert any(e["model"] == "*" and e["action"] == "create" and e["actor"] == "op"
               for e in audit), audit
    removed = api(ui, tokens["op"], "PUT", "/api/budget", json={"budget_micro_usd": None})
    assert removed.status_code == 200 and removed.json()["action"] == "delete"
    with ui.router() as router:
        assert router.budget() is None


def test_writes_need_the_edit_right_and_a_valid_body(ui: QuotaUiStack,
                                                     tokens: dict[str, str]) -> None:
    assert api(ui, None, "GET", "/api/budget").status_code == 401
    assert api(ui, tokens["viewer"], "PUT", "/api/budget", json=BUDGET).status_code == 403
    for body, field in [({"budget_micro_usd": -1}, "budget_micro_usd"),
                        ({"budget_micro_usd": 1.5}, "budget_micro_usd"),
                        ({}, "budget_micro_usd"),
                        ({"budget_micro_usd": 10, "budget_period_s": 0}, "budget_period_s"),
                        ({"budget_micro_usd": 10, "per": 60}, "per")]:
        response = api(ui, tokens["op"], "PUT", "/api/budget", json=body)
        assert response.status_code == 422, response.text
        assert field in [d["field"] for d in response.json()["detail"]], response.text
    assert api(ui, tokens["viewer"], "GET", "/api/budget").json()["budget"] is None
