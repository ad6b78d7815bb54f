"""The backlog: the task store's counts, throughput and ETA, its dead letters, and their
requeue (writers only, logged with the caller's name like a quota change).

Reads and writes go through the task store's admin part (``store.admin``:
``backlog_summary``, ``dead_tasks``, ``requeue``, ``requeue_log``), which bounds every
query; these routes only check who asks and translate errors: a bad argument is a 422
naming the field, an unreachable or unconfigured task store a 503. ``POST /tasks/requeue``
moves dead-lettered tasks back to pending, by ids or by a filter (bounded per call,
notified to the drains); the quota page's backlog panel sends the same body.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Query, Request, status

from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.names import MAX_KIND_CHARS, MODEL_NAME_RE
from airflow_llm_router.store.backlog_records import (
    DEAD_OFFSET_MAX,
    DEAD_PAGE_MAX,
    MAX_ERROR_FILTER_CHARS,
    DeadFilter,
    RequeueRecord,
)
from airflow_llm_router.web.auth import Reader, Writer
from airflow_llm_router.web.bodies import (
    REQUEUE_EXAMPLES,
    BacklogView,
    DeadMatch,
    DeadPageView,
    RequeueBody,
    Requeued,
)
from airflow_llm_router.web.errors import store_refusal
from airflow_llm_router.web.limits import too_large
from airflow_llm_router.web.sources import Lazy, Store

__all__ = ["BODY_LIMITS", "REQUEUE_BODY_BYTES", "REQUEUE_SOURCE", "router"]

router = APIRouter(tags=["backlog"])
log = logging.getLogger(__name__)

#: Largest ``POST /tasks/requeue`` body (bytes): 10,000 ids of 19 digits fit.
REQUEUE_BODY_BYTES = 256 * 1024
#: Body limits per path (see :data:`airflow_llm_router.web.ingestion.BODY_LIMITS`).
BODY_LIMITS = {"/tasks/requeue": REQUEUE_BODY_BYTES}
#: What the requeue log records as the source of a requeue made here.
REQUEUE_SOURCE = "http-api"


def _query_refusal(err: TaskValidationError) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [
        {"loc": ["query", err.field], "field": err.field, "type": "value_error",
         "msg": str(err)}])


@router.get("/backlog", summary="Tasks per status and priority, oldest pending age, "
            "throughput over the last 5 minutes and the ETA of what remains")
async def backlog(request: Request, _: Reader, store: Store) -> BacklogView:
    summary = await store.run(store.store.admin.backlog_summary)
    capacity = await _capacity_per_s(request.app.state.router, summary.remaining)
    eta = (round(summary.remaining / capacity, 1)
           if capacity and summary.remaining else None)
    return BacklogView(**summary.to_dict(), eta_at_capacity_s=eta,
                       capacity_per_min=None if capacity is None else round(capacity * 60, 2))


async def _capacity_per_s(router: Lazy[AsyncRouterClient], remaining: int) -> float | None:
    """Calls per second the quotas allow (the advice's sum of sustainable rates), or None
    when the router cannot be read: the backlog counts still answer without Redis."""
    try:
        client = await router.get()
        return float((await client.advice(remaining)).capacity_per_s)
    except Exception as err:
        log.warning("Backlog ETA at capacity unavailable: cannot read the router's advice "
                    "(%s)", type(err).__name__)
        return None


@router.get("/backlog/dead", summary="Dead-lettered tasks, newest failure first (never a "
            "prompt)")
async def dead(_: Reader, store: Store,
               limit: Annotated[int, Query(ge=1, le=DEAD_PAGE_MAX)] = 50,
               offset: Annotated[int, Query(ge=0, le=DEAD_OFFSET_MAX)] = 0,
               model: Annotated[str | None, Query(pattern=MODEL_NAME_RE.pattern, description=(
                   "tasks that recorded this model or list it in allowed_models"))] = None,
               kind: Annotated[str | None, Query(min_length=1, max_length=MAX_KIND_CHARS)]
               = None,
               error: Annotated[str | None, Query(
                   min_length=1, max_length=MAX_ERROR_FILTER_CHARS,
                   description="a substring of last_error, case-insensitive")] = None,
               ) -> DeadPageView:
    matching = DeadFilter(kind=kind, model=model, error_contains=error)

    def read() -> Any:
        return store.store.admin.dead_tasks(limit=limit, offset=offset, matching=matching)

    try:
        page = await store.run(read)
    except TaskValidationError as err:
        raise _query_refusal(err) from err
    return DeadPageView(tasks=page.tasks, total=page.total, total_capped=page.total_capped,
                        limit=page.limit, offset=page.offset)


@router.post("/tasks/requeue", summary="Move dead tasks back to pending (by ids or a "
             "filter), attempts reset; logged with the caller's name",
             response_model=Requeued, responses={
                 **too_large(REQUEUE_BODY_BYTES), 422: {"description": (
                     "invalid, or both or neither of ids and matching (nothing changed)")}})
async def requeue(body: Annotated[RequeueBody, Body(openapi_examples=REQUEUE_EXAMPLES)],
                  caller: Writer, store: Store) -> Any:
    matching = None if body.matching is None else DeadFilter(
        **body.matching.model_dump(exclude_none=True))

    def move() -> Any:
        return store.store.admin.requeue(body.ids, matching=matching, actor=caller.name,
                                         source=REQUEUE_SOURCE)

    try:
        done = await store.run(move)
    except TaskValidationError as err:
        return store_refusal(err, "matching" if err.field in DeadMatch.model_fields else "")
    return Requeued.model_validate(done.to_dict())


@router.get("/backlog/requeues", summary="The latest requeues, newest first: who, when, what")
async def requeues(_: Reader, store: Store,
                   limit: Annotated[int, Query(ge=1, le=1000)] = 20) -> list[RequeueRecord]:
    try:
        return await store.run(store.store.admin.requeue_log, limit)
    except TaskValidationError as err:
        raise _query_refusal(err) from err
