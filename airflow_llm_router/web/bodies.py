"""Request and response bodies of the quota, budget and backlog routes (they document
themselves in OpenAPI). The admission and ingestion bodies live beside their routes
(``admission.py``, ``ingestion.py``); every body is defined once, whichever mount serves it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi.openapi.models import Example
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model

from airflow_llm_router.engine.quota import (
    DEFAULT_PERIOD_S,
    MicroUSD,
    ModelQuota,
    PeriodSeconds,
    RouterBudget,
)
from airflow_llm_router.names import MAX_KIND_CHARS, MODEL_NAME_RE
from airflow_llm_router.store.backlog_records import MAX_ERROR_FILTER_CHARS, REQUEUE_MAX, DeadTask

#: Largest task id (PostgreSQL bigint).
MAX_TASK_ID = 2**63 - 1
ModelName = Annotated[str, StringConstraints(pattern=MODEL_NAME_RE.pattern)]


def _patch_model() -> type[BaseModel]:
    """``ModelQuota`` with every field optional and unset by default: a patch validates
    each given field by the quota's own rules (types, ranges, unknown fields), and the
    merged quota is validated again as a whole."""
    fields: dict[str, Any] = {
        name: (info.rebuild_annotation(), None) for name, info in ModelQuota.model_fields.items()
    }
    return create_model("QuotaPatch", __base__=ModelQuota, __doc__=(
        "Some fields of a model's quota; the others keep their value."), **fields)


QuotaPatch = _patch_model()


class SpendView(BaseModel):
    """Spend in the current budget period, in micro-dollars (docs/budgets.md)."""

    #: None: no budget set (spend is tracked all the same)
    budget_micro_usd: int | None
    #: the settled cost of the calls completed in the period
    settled_micro_usd: int
    #: the estimated cost reserved by the period's calls still in flight
    reserved_micro_usd: int
    #: (settled + reserved) / budget, percent; None without a budget
    spend_pct: float | None
    period_s: float
    #: when the period began (ms, the router's clock)
    period_start_ms: int


class Usage(BaseModel):
    """A model's current window against its targets (the router's view)."""

    requests: int
    tokens: int
    in_flight: int
    rpm_pct: float | None
    tpm_pct: float | None
    concurrency_pct: float | None
    cooldown_ms: int
    breaker: str
    #: why the breaker is not closed: ``"errors"`` in a row, or ``"unknown_model"`` (the
    #: backend does not have the model); None when closed
    breaker_cause: str | None = None
    #: the share of the quota admission holds the model to, learned from the provider's
    #: 429s (1.0: the quota); below 1, ``effective`` holds the limits in force
    limit_share: float = 1.0
    effective: dict[str, int] | None = None
    #: how long past its window an admission keeps counting (ms): the base guard, or more
    #: while calls are measured reaching the provider late (docs/engine.md, "Guard")
    guard_ms: int = 0
    #: a priced model's spend this budget period; None for an unpriced model
    spend: SpendView | None = None


class QuotaView(BaseModel):
    """One model: its quota, whether PostgreSQL stores it and Redis holds the same, and
    its live usage. A model set in Redis directly (``RouterClient.set_quota``) is listed
    with ``stored`` false and no ``updated_at``/``updated_by``; PUT stores it."""

    model_config = ConfigDict(protected_namespaces=())

    model: str
    quota: ModelQuota
    stored: bool
    updated_at: str | None
    updated_by: str | None
    applied: bool
    usage: Usage | None


class QuotaList(BaseModel):
    models: list[QuotaView]
    waiting: int
    now_ms: int
    #: every priced model's spend together against the router-wide budget (if one is set)
    total_spend: SpendView | None = None


class ChangeView(BaseModel):
    """The result of a change (``audit_id`` is None when nothing changed)."""

    model_config = ConfigDict(protected_namespaces=())

    model: str
    action: str
    old: ModelQuota | None
    new: ModelQuota | None
    audit_id: int | None


class AuditView(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    id: int
    at: str
    actor: str
    action: str
    source: str
    model: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None


# --- the backlog panel ----------------------------------------------------------------------

class BacklogView(BaseModel):
    """The task store's backlog now: tasks per status and lane (``counts["pending"]["hot"]``),
    totals per status, statuses counted only up to the cap (``capped``: their counts are
    lower bounds), the oldest pending task's age (s), tasks solved over the last
    ``window_s`` seconds and per minute, what remains (pending + claimed) and the ETA at that
    rate (s; null when nothing was solved recently); and from the router's advice, what the
    quotas allow (``capacity_per_min``: calls per minute of all enabled models together)
    and the ETA at that capacity (no drain finishes sooner; null without Redis, a quota or
    anything remaining)."""

    counts: dict[str, dict[str, int]]
    totals: dict[str, int]
    capped: list[str]
    oldest_pending_age_s: float | None
    solved_recently: int
    window_s: int
    throughput_per_min: float
    remaining: int
    eta_s: float | None
    capacity_per_min: float | None = None
    eta_at_capacity_s: float | None = None


class DeadPageView(BaseModel):
    """One page of dead tasks, newest failure first; ``total`` matching in all (counted up
    to a cap: ``total_capped``)."""

    #: id, kind, priority, attempts, max_attempts, last_error (cut), model, allowed_models,
    #: created_at, updated_at: never the prompt
    tasks: list[DeadTask]
    total: int
    total_capped: bool
    limit: int
    offset: int


class DeadMatch(BaseModel):
    """Which dead tasks a requeue by filter means; every condition given must hold, none
    given means every dead task."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    kind: Annotated[str, StringConstraints(min_length=1, max_length=MAX_KIND_CHARS)] | None \
        = Field(None, description="the task kind, exactly")
    model: ModelName | None = Field(None, description=(
        "tasks this model answered last, or that allow it"))
    error_contains: Annotated[str, StringConstraints(
        min_length=1, max_length=MAX_ERROR_FILTER_CHARS)] | None = Field(
            None, description="a substring of last_error, case-insensitive")


class RequeueBody(BaseModel):
    """Either ``ids`` (these dead tasks) or ``matching`` (every dead task it matches,
    oldest failure first, at most ``REQUEUE_MAX`` per call)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[int, Field(strict=True, ge=1, le=MAX_TASK_ID)]] | None = Field(
        None, min_length=1, max_length=REQUEUE_MAX, description=f"1 to {REQUEUE_MAX} task ids")
    matching: DeadMatch | None = Field(None, description="a filter instead of ids; {} is "
                                       "every dead task")


#: ``POST /tasks/requeue`` bodies the OpenAPI document shows, one per way to name the
#: tasks; each is accepted (200, also when no task is dead).
REQUEUE_EXAMPLES: dict[str, Example] = {
    "ids": {"summary": "these dead tasks", "value": {"ids": [977, 978]}},
    "matching": {"summary": "the dead tasks matching every condition given", "value": {
        "matching": {"kind": "summary", "model": "gpt-big", "error_contains": "503"}}},
    "all": {"summary": "every dead task", "value": {"matching": {}}},
}


class Requeued(BaseModel):
    """What a requeue did."""

    requeued: int
    ids: list[int] = Field(description="the tasks moved back to pending, ascending")
    skipped: list[int] = Field(description="ids asked for that were not dead")
    remaining: int = Field(description="matching dead tasks left for the next call")
    max_per_call: int


# --- the router-wide budget -----------------------------------------------------------------

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
