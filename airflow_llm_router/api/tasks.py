"""Task ingestion over HTTP (seed 004's edge endpoint): ``POST /tasks``, ``GET /tasks/{id}``,
``POST /tasks/requeue``.

Producers outside Airflow put tasks in the same PostgreSQL backlog the drains claim from:
``POST /tasks`` writes one or many tasks in one transaction through
:meth:`TaskStore.enqueue_tasks`, which notifies the store's channel on commit, so a drain
that lingers wakes at once (no DAG run has to start). Each task may name its priority lane
(``hot`` is claimed before any ``bulk`` task), the models it allows, its kind, its attempts
and an **idempotency key**: a retried POST (its answer lost on the way) answers the ids of
the tasks the first one made and adds nothing, also when the retries race.

Limits: at most :data:`MAX_TASKS_PER_POST` tasks and :data:`MAX_BODY_BYTES` bytes per POST
(413 naming ``body`` before anything is read further: :data:`BODY_LIMITS`, enforced by the
app's ``BodyLimit`` middleware), the store's own prompt limit
(``max_prompt_chars``) and everything else :mod:`airflow_llm_router.store.validation`
refuses: 422 naming the field (``tasks.3.prompt``), and nothing of the POST is written.
``GET /tasks/{id}`` answers the task's state without its prompt unless asked
(``?include_prompt=true``); error messages never quote a prompt. ``POST /tasks/requeue``
moves dead-lettered tasks back to pending, by ids or by a filter, through
:meth:`TaskStore.requeue` (the quota page's requeue: logged with the caller's name, bounded
per call, notified to the drains).

The task store is synchronous and holds one connection: its calls run in a worker thread,
one at a time per store (each is one short transaction, a few milliseconds).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request, Response, status
from fastapi.openapi.models import Example
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from airflow_llm_router.api.auth import Reader, Writer
from airflow_llm_router.api.errors import invalid
from airflow_llm_router.exceptions import TaskStoreError, TaskValidationError
from airflow_llm_router.names import MAX_KIND_CHARS, MODEL_NAME_RE
from airflow_llm_router.store import TaskStore
from airflow_llm_router.store.dead_letters import MAX_ERROR_FILTER_CHARS
from airflow_llm_router.store.ingest import NewTask
from airflow_llm_router.store.models import REQUEUE_MAX, DeadFilter
from airflow_llm_router.store.validation import (
    MAX_ALLOWED_MODELS,
    MAX_ATTEMPTS,
    MAX_IDEMPOTENCY_KEY_CHARS,
)

__all__ = ["BODY_LIMITS", "MAX_BODY_BYTES", "MAX_TASKS_PER_POST", "router"]

#: Most tasks one ``POST /tasks`` may carry.
MAX_TASKS_PER_POST = 1000
#: Largest ``POST /tasks`` body (bytes); larger ones are refused unread (413).
MAX_BODY_BYTES = 16 * 1024 * 1024
#: Largest ``POST /tasks/requeue`` body (bytes): 10,000 ids of 19 digits fit.
REQUEUE_BODY_BYTES = 256 * 1024
#: Body limits per path, enforced by the app's :class:`~airflow_llm_router.api.limits.BodyLimit`
#: before a body is read (and before the caller is authenticated).
BODY_LIMITS = {"/tasks": MAX_BODY_BYTES, "/tasks/requeue": REQUEUE_BODY_BYTES}
#: Largest task id (PostgreSQL bigint).
_MAX_ID = 2**63 - 1

T = TypeVar("T")


router = APIRouter(tags=["tasks"])

ModelName = Annotated[str, StringConstraints(pattern=MODEL_NAME_RE.pattern)]
TaskId = Annotated[int, Path(ge=1, le=_MAX_ID, description="the task's id")]


class TaskIn(BaseModel):
    """One task. Everything but ``prompt`` is optional; the store's checks apply
    (``docs/task_store.md``, *Refused input*)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, description=(
        "the prompt; at most the store's max_prompt_chars (default 1,000,000 characters)"))
    priority: Literal["hot", "bulk"] = Field("bulk", description=(
        "hot: claimed before any bulk task, and admitted within the hot share of each model"))
    allowed_models: list[ModelName] | None = Field(
        None, min_length=1, max_length=MAX_ALLOWED_MODELS,
        description="models in order of preference; omit for any model")
    kind: Annotated[str, StringConstraints(min_length=1, max_length=MAX_KIND_CHARS)] = Field(
        "default", description="the task's type: token estimates are learned per kind")
    max_attempts: int = Field(5, strict=True, ge=1, le=MAX_ATTEMPTS, description=(
        "claims allowed before the task is dead-lettered"))
    on_budget: Literal["overflow", "wait"] = Field("overflow", description=(
        "when its preferred model is over its spend budget: overflow goes on to the next "
        "allowed model, wait holds the task until the budget allows it"))
    metadata: dict[str, Any] | None = Field(None, description=(
        "your own JSON object, handed back with the task (at most 65,536 characters)"))
    idempotency_key: Annotated[str, StringConstraints(
        min_length=1, max_length=MAX_IDEMPOTENCY_KEY_CHARS)] | None = Field(None, description=(
            "your name for this task (printable, unique per task): a POST carrying a key "
            "already stored answers that task's id and adds nothing"))


class TasksBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: list[TaskIn] = Field(min_length=1, max_length=MAX_TASKS_PER_POST)


#: ``POST /tasks`` bodies the OpenAPI document shows (the viewer's "try it out" and
#: docs/http_api.md): each is accepted, so a client copying one, and a test generating
#: requests from the document, starts from a request that succeeds.
TASKS_EXAMPLES: dict[str, Example] = {
    "tasks": {"summary": "one task with every option, one with the defaults", "value": {
        "tasks": [{"prompt": "Summarise ...", "priority": "hot",
                   "allowed_models": ["gpt-small", "gpt-big"], "kind": "summary",
                   "max_attempts": 3, "metadata": {"source": "crm", "ticket": 8812},
                   "idempotency_key": "crm:8812"},
                  {"prompt": "Translate ..."}]}},
}


class Enqueued(BaseModel):
    """The tasks' ids in the order posted."""

    ids: list[int]
    duplicates: list[bool] = Field(description=(
        "true where the task's idempotency key was already stored: ids[i] is that earlier "
        "task, and nothing was written for this one"))
    created: int = Field(description="how many tasks this POST added")


class TaskView(BaseModel):
    """A task's state. Timestamps are ISO 8601 with the database's time zone."""

    id: int
    status: Literal["pending", "claimed", "solved", "dead"]
    priority: str
    kind: str
    allowed_models: list[str] | None
    attempts: int
    max_attempts: int
    on_budget: Literal["overflow", "wait"]
    model: str | None = Field(description="the model that answered (solved tasks)")
    answer: str | None
    input_tokens: int | None
    output_tokens: int | None
    last_error: str | None = Field(description="the last failure; kept after a later success")
    created_at: datetime
    updated_at: datetime
    solved_at: datetime | None
    metadata: dict[str, Any]
    prompt: str | None = Field(None, description="only with ?include_prompt=true")


class _Store:
    """One :class:`TaskStore` for the event loop: each call in a worker thread, one at a
    time (the store has one connection; a request cancelled mid-call cannot let the next
    call start on that connection, since the lock is taken inside the thread)."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        def locked() -> T:
            with self._lock:
                return fn(*args)

        try:
            return await asyncio.to_thread(locked)
        except TaskValidationError:
            raise
        except TaskStoreError as err:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"the task store is unavailable: {err}; retry",
                                headers={"Retry-After": "1"}) from err


async def task_store(request: Request) -> _Store:
    """The app's task store (503 if it has none, or it cannot be built)."""
    source = request.app.state.task_store
    if source is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            "this API serves no task store (start it with one)")
    store: TaskStore = await source.get()
    state = request.app.state
    found: _Store | None = getattr(state, "tasks_store", None)
    if found is None or found.store is not store:  # no await since the read: no race
        found = state.tasks_store = _Store(store)
    return found


Store = Annotated[_Store, Depends(task_store)]


def _refused(err: TaskValidationError, under: str = "") -> JSONResponse:
    """The store's refusal as the shared 422: ``tasks[3].prompt`` becomes ``tasks.3.prompt``
    (and ``kind`` becomes ``matching.kind`` with ``under="matching"``)."""
    parts = re.findall(r"[^.\[\]]+", err.field)
    if under:
        parts = [under, *parts]
    message = str(err).removeprefix(f"{err.field}: ")
    return invalid([{"loc": ["body", *parts], "field": ".".join(parts),
                     "type": "value_error.task_store", "msg": message}])


def _too_large(path: str) -> dict[int | str, dict[str, Any]]:
    return {413: {"description": f"the body is over {BODY_LIMITS[path]} bytes (field: body)"}}


@router.post("/tasks", summary="Add tasks to the backlog (one or many, all or nothing)",
             status_code=status.HTTP_201_CREATED, response_model=Enqueued,
             responses={200: {"model": Enqueued, "description": (
                 "every task's idempotency key was already stored: nothing was added")},
                 **_too_large("/tasks")})
async def post_tasks(body: Annotated[TasksBody, Body(openapi_examples=TASKS_EXAMPLES)],
                     _: Writer, store: Store, response: Response) -> Any:
    tasks = [NewTask(prompt=t.prompt, priority=t.priority, allowed_models=t.allowed_models,
                     kind=t.kind, max_attempts=t.max_attempts, metadata=t.metadata,
                     idempotency_key=t.idempotency_key, on_budget=t.on_budget)
             for t in body.tasks]
    try:
        result = await store.run(store.store.enqueue_tasks, tasks)
    except TaskValidationError as err:
        return _refused(err)
    if result.created == 0:
        response.status_code = status.HTTP_200_OK
    return Enqueued(ids=result.ids, duplicates=result.duplicates, created=result.created)


@router.get("/tasks/{task_id}", summary="A task's status, answer, attempts and last error",
            response_model=TaskView, responses={404: {"description": "no task has this id"}})
async def get_task(task_id: TaskId, _: Reader, store: Store,
                   include_prompt: Annotated[bool, Query(description=(
                       "also answer the prompt text (left out by default: it may be large "
                       "or confidential)"))] = False) -> TaskView:
    row = await store.run(store.store.get, task_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task has id {task_id}")
    data = row.to_dict()
    if not include_prompt:
        data["prompt"] = None
    return TaskView.model_validate(data, from_attributes=False)


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

    ids: list[Annotated[int, Field(strict=True, ge=1, le=_MAX_ID)]] | None = Field(
        None, min_length=1, max_length=REQUEUE_MAX, description=f"1 to {REQUEUE_MAX} task ids")
    matching: DeadMatch | None = Field(None, description="a filter instead of ids; {} is "
                                       "every dead task")


#: ``POST /tasks/requeue`` bodies the OpenAPI document shows, one per way to name the
#: tasks; each is accepted (200, also when no task is dead), as :data:`TASKS_EXAMPLES`.
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


@router.post("/tasks/requeue", summary="Move dead tasks back to pending (by ids or a filter)",
             response_model=Requeued, responses={
                 **_too_large("/tasks/requeue"), 422: {"description": (
                     "invalid, or both or neither of ids and matching (nothing changed)")}})
async def requeue(body: Annotated[RequeueBody, Body(openapi_examples=REQUEUE_EXAMPLES)],
                  caller: Writer, store: Store) -> Any:
    matching = None if body.matching is None else DeadFilter(
        **body.matching.model_dump(exclude_none=True))

    def move() -> Any:
        return store.store.requeue(body.ids, matching=matching, actor=caller.name,
                                   source="http-api")

    try:
        done = await store.run(move)
    except TaskValidationError as err:
        return _refused(err, "matching" if err.field in DeadMatch.model_fields else "")
    return Requeued.model_validate(done.to_dict())
