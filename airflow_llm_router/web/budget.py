"""The router-wide spend budget: ``GET /budget`` and ``PUT /budget``.

The budget is stored in PostgreSQL beside the quotas (audited like them, restored with them
into a Redis that lost its data) and pushed to the router's Redis in the same transaction;
see :meth:`~airflow_llm_router.quotas.quota_store.QuotaStore.set_budget`. Reading needs
the right to read pools, changing it the right to edit them, as for quotas.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, status

from airflow_llm_router.engine.quota import RouterBudget
from airflow_llm_router.quotas import BudgetChange
from airflow_llm_router.web.auth import Reader, Writer
from airflow_llm_router.web.bodies import BudgetBody, BudgetChangeView, BudgetView
from airflow_llm_router.web.quotas import Service, spend_view, stats_of, store_call

router = APIRouter(tags=["budget"])


def _live_budget(svc: Any) -> RouterBudget | None:
    try:
        live: RouterBudget | None = svc.router.budget()
    except Exception as err:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"cannot read the router's budget from Redis: {err}") from err
    return live


@router.get("/budget", summary="The router-wide spend budget and the total spend")
def get_budget(_: Reader, svc: Service) -> BudgetView:
    record = store_call(svc.store.budget_record)
    stats = stats_of(svc)  # first, so that a Redis that lost its data is restored
    live = _live_budget(svc)
    stored = None if record is None else record.budget
    return BudgetView(budget=stored, applied=live == stored,
                      updated_at=None if record is None else record.updated_at.isoformat(),
                      updated_by=None if record is None else record.updated_by,
                      total_spend=spend_view(stats.total_spend))


@router.put("/budget", summary="Set (or with a null budget_micro_usd, remove) the "
            "router-wide spend budget", responses={422: {"description": "invalid"}})
def put_budget(body: BudgetBody, caller: Writer, svc: Service) -> BudgetChangeView:
    budget = None if body.budget_micro_usd is None else RouterBudget(
        budget_micro_usd=body.budget_micro_usd, budget_period_s=body.budget_period_s)
    change: BudgetChange = store_call(svc.store.set_budget, budget, actor=caller.name,
                                       source="api")
    return BudgetChangeView(action=change.action, old=change.old, new=change.new,
                            audit_id=change.audit_id)
