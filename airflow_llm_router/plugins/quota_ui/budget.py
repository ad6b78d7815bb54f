"""The router-wide spend budget through the quota API: ``GET /api/budget`` and
``PUT /api/budget``.

The budget is stored in PostgreSQL beside the quotas (audited like them, restored with them
into a Redis that lost its data) and pushed to the router's Redis in the same transaction;
see :meth:`~airflow_llm_router.quotas.quota_store.QuotaStore.set_budget`. Reading needs
the right to read pools, changing it the right to edit them, as for quotas.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, ConfigDict, Field

from airflow_llm_router.engine.quota import DEFAULT_PERIOD_S, MicroUSD, PeriodSeconds, RouterBudget
from airflow_llm_router.plugins.quota_ui.api import Service, _spend, _stats, _store_call
from airflow_llm_router.plugins.quota_ui.auth import Editor, Reader
from airflow_llm_router.plugins.quota_ui.bodies import SpendView
from airflow_llm_router.quotas.quota_store import BudgetChange

router = APIRouter(prefix="/api", tags=["LLM quotas"])


class BudgetBody(BaseModel):
    """The router-wide budget to keep: what every priced model may spend together per
    period (each model's own budget applies as well)."""

    model_config = ConfigDict(extra="forbid")

    budget_micro_usd: MicroUSD | None = Field(description=(
        "micro-dollars per period ($200 is 200000000); null removes the router-wide budget"))
    budget_period_s: PeriodSeconds = Field(DEFAULT_PERIOD_S, description=(
        "the period in seconds, aligned to multiples of it since the Unix epoch (86400: a "
        "UTC day)"))


class BudgetView(BaseModel):
    """The stored budget (None: none), whether the router's Redis holds the same, its last
    change, and what the priced models spent together this period."""

    budget: RouterBudget | None
    applied: bool
    updated_at: str | None
    updated_by: str | None
    total_spend: SpendView | None


class BudgetChangeView(BaseModel):
    """The result of a change (``audit_id`` is None when nothing changed)."""

    action: str
    old: RouterBudget | None
    new: RouterBudget | None
    audit_id: int | None


def _live_budget(svc: Any) -> RouterBudget | None:
    try:
        live: RouterBudget | None = svc.router.budget()
    except Exception as err:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"cannot read the router's budget from Redis: {err}") from err
    return live


@router.get("/budget", summary="The router-wide spend budget and the total spend")
def get_budget(_: Reader, svc: Service) -> BudgetView:
    record = _store_call(svc.store.budget_record)
    stats = _stats(svc)  # first, so that a Redis that lost its data is restored
    live = _live_budget(svc)
    stored = None if record is None else record.budget
    return BudgetView(budget=stored, applied=live == stored,
                      updated_at=None if record is None else record.updated_at.isoformat(),
                      updated_by=None if record is None else record.updated_by,
                      total_spend=_spend(stats.total_spend))


@router.put("/budget", summary="Set (or with a null budget_micro_usd, remove) the "
            "router-wide spend budget", responses={422: {"description": "invalid"}})
def put_budget(body: BudgetBody, user: Editor, svc: Service) -> BudgetChangeView:
    budget = None if body.budget_micro_usd is None else RouterBudget(
        budget_micro_usd=body.budget_micro_usd, budget_period_s=body.budget_period_s)
    change: BudgetChange = _store_call(svc.store.set_budget, budget, actor=user.get_name(),
                                       source="api")
    return BudgetChangeView(action=change.action, old=change.old, new=change.new,
                            audit_id=change.audit_id)
