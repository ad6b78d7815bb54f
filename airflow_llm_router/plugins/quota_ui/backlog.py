"""The backlog panel's API: the task store's counts, throughput and ETA, its dead letters,
and requeue (editors only, logged with the user's name like a quota change).

Reads and writes go through :class:`~airflow_llm_router.store.TaskStore`
(``backlog_summary``, ``dead_tasks``, ``requeue``), which bounds every query; these routes
only check who asks and translate errors: a bad argument is a 422 naming the field, an
unreachable or unconfigured task store a 503.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, TypeVar

from fastapi import APIRouter, HTTPException, Query, status

from airflow_llm_router.api.errors import first_line
from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.names import MAX_KIND_CHARS, MODEL_NAME_RE
from airflow_llm_router.plugins.quota_ui.api import Service
from airflow_llm_router.plugins.quota_ui.auth import Editor, Reader
from airflow_llm_router.plugins.quota_ui.bodies import (
    BacklogView,
    DeadPageView,
    RequeueBody,
    RequeueView,
)
from airflow_llm_router.plugins.quota_ui.service import QuotaService
from airflow_llm_router.store import TaskStore
from airflow_llm_router.store.dead_letters import MAX_ERROR_FILTER_CHARS
from airflow_llm_router.store.models import (
    DEAD_OFFSET_MAX,
    DEAD_PAGE_MAX,
    DeadFilter,
    RequeueRecord,
)

router = APIRouter(prefix="/api/backlog", tags=["LLM task backlog"])
log = logging.getLogger(__name__)

T = TypeVar("T")


def _unprocessable(field: str, message: str) -> HTTPException:
    """A 422 shaped like the validation handler's: one entry naming the field."""
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [
        {"loc": ["body", field], "field": field, "type": "value_error", "msg": message}])


@contextmanager
def _tasks(svc: QuotaService) -> Iterator[TaskStore]:
    if svc.tasks is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            "no task store is configured for the backlog panel")
    try:
        with svc.tasks.use() as store:
            yield store
    except (HTTPException, TaskValidationError):
        raise
    except Exception as err:  # connection missing, database down, migration refused
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"cannot read the task store {svc.tasks.where}: "
                            f"{type(err).__name__}: {first_line(err)}") from err


def _call(svc: QuotaService, fn: Callable[[TaskStore], T], body_field: bool = False) -> T:
    """``fn(store)``, a store's refusal as 422 naming its field (query or body)."""
    try:
        with _tasks(svc) as store:
            return fn(store)
    except TaskValidationError as err:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [
            {"loc": ["body" if body_field else "query", err.field], "field": err.field,
             "type": "value_error", "msg": str(err)}]) from err


@router.get("", summary="Tasks per status and priority, oldest pending age, throughput "
            "over the last 5 minutes and the ETA of what remains")
def backlog(_: Reader, svc: Service) -> BacklogView:
    summary = _call(svc, lambda store: store.backlog_summary())
    capacity = _capacity_per_s(svc, summary.remaining)
    eta = (round(summary.remaining / capacity, 1)
           if capacity and summary.remaining else None)
    return BacklogView(**summary.to_dict(), eta_at_capacity_s=eta,
                       capacity_per_min=None if capacity is None else round(capacity * 60, 2))


def _capacity_per_s(svc: QuotaService, remaining: int) -> float | None:
    """Calls per second the quotas allow (the advice's sum of sustainable rates), or None
    when the router cannot be read: the backlog counts still answer without Redis."""
    try:
        return float(svc.router.advice(remaining).capacity_per_s)
    except Exception as err:
        log.warning("Backlog ETA at capacity unavailable: cannot read the router's advice "
                    "(%s)", type(err).__name__)
        return None


@router.get("/dead", summary="Dead-lettered tasks, newest failure first (never a prompt)")
def dead(_: Reader, svc: Service,
         limit: Annotated[int, Query(ge=1, le=DEAD_PAGE_MAX)] = 50,
         offset: Annotated[int, Query(ge=0, le=DEAD_OFFSET_MAX)] = 0,
         model: Annotated[str | None, Query(pattern=MODEL_NAME_RE.pattern, description=(
             "tasks that recorded this model or list it in allowed_models"))] = None,
         kind: Annotated[str | None, Query(min_length=1, max_length=MAX_KIND_CHARS)] = None,
         error: Annotated[str | None, Query(
             min_length=1, max_length=MAX_ERROR_FILTER_CHARS,
             description="a substring of last_error, case-insensitive")] = None,
         ) -> DeadPageView:
    matching = DeadFilter(kind=kind, model=model, error_contains=error)
    page = _call(svc, lambda store: store.dead_tasks(limit=limit, offset=offset,
                                                     matching=matching))
    return DeadPageView(tasks=page.tasks,
                        total=page.total, total_capped=page.total_capped,
                        limit=page.limit, offset=page.offset)


@router.post("/requeue", summary="Move dead tasks back to pending (by ids, or all matching "
             "a filter), attempts reset; logged with the user's name",
             responses={422: {"description": "invalid request, nothing changed"}})
def requeue(body: RequeueBody, user: Editor, svc: Service) -> RequeueView:
    conditions = {k: v for k, v in (("kind", body.kind), ("model", body.model),
                                     ("error_contains", body.error_contains)) if v is not None}
    if body.ids is not None and body.all:
        raise _unprocessable("all", "give either ids or all: true with conditions, not both")
    if body.ids is None and not body.all:
        raise _unprocessable("ids", "name the dead tasks to requeue, or send all: true "
                                    "(with kind, model or error_contains to narrow it)")
    if body.ids is not None and conditions:
        raise _unprocessable(next(iter(conditions)),
                             "conditions apply to all: true only; with ids, leave them out")
    actor = user.get_name()
    if body.ids is not None:
        ids = body.ids
        result = _call(svc, lambda s: s.requeue(ids, actor=actor, source="api"), True)
    else:
        matching = DeadFilter(**conditions)
        result = _call(svc, lambda s: s.requeue(matching=matching, actor=actor, source="api"),
                       True)
    return RequeueView(**result.to_dict())


@router.get("/requeues", summary="The latest requeues, newest first: who, when, what")
def requeues(_: Reader, svc: Service,
             limit: Annotated[int, Query(ge=1, le=1000)] = 20) -> list[RequeueRecord]:
    return _call(svc, lambda store: store.requeue_log(limit))
