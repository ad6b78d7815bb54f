"""Task ingestion over HTTP (seed 004's edge endpoint): ``POST /tasks``, ``GET /tasks/{id}``.

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
(``max_prompt_chars``) and everything else :mod:`airflow_llm_router.store.task_checks`
refuses: 422 naming the field (``tasks.3.prompt``), and nothing of the POST is written.
``GET /tasks/{id}`` answers the task's state without its prompt unless asked
(``?include_prompt=true``); error messages never quote a prompt. Dead letters and their
requeue are the backlog's (:mod:`airflow_llm_router.web.backlog`).

The task store is synchronous and holds one connection: its calls run in a worker thread,
one at a time per store (each is one short transaction, a few milliseconds).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, HTTPException, Path, Query, Response, status
from fastapi.openapi.models import Example
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.names import MAX_KIND_CHARS, MODEL_NAME_RE
from airflow_llm_router.store.records import NewTask
from airflow_llm_router.store.task_checks import (
    MAX_ALLOWED_MODELS,
    MAX_ATTEMPTS,
    MAX_IDEMPOTENCY_KEY_CHARS,
)
from airflow_llm_router.web.auth import Reader, Writer
from airflow_llm_router.web.errors import store_refusal
from airflow_llm_router.web.limits import too_large
from airflow_llm_router.web.sources import Store

__all__ = ["BODY_LIMITS", "MAX_BODY_BYTES", "MAX_TASKS_PER_POST", "TaskId", "router"]

#: Most tasks one ``POST /tasks`` may carry.
MAX_TASKS_PER_POST = 1000
#: Largest ``POST /tasks`` body (bytes); larger ones are refused unread (413).
MAX_BODY_BYTES = 16 * 1024 * 1024
#: Body limits per path, enforced by the app's :class:`~airflow_llm_router.web.limits.BodyLimit`
#: before a body is read (and before the caller is authenticated).
BODY_LIMITS = {"/tasks": MAX_BODY_BYTES}
#: Largest task id (PostgreSQL bigint).
MAX_ID = 2**63 - 1


router = APIRouter(tags=["tasks"])

ModelName = Annotated[str, StringConstraints(pattern=MODEL_NAME_RE.pattern)]
TaskId = Annotated[int, Path(ge=1, le=MAX_ID, description="the task's id")]


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


@router.post("/tasks", summary="Add tasks to the backlog (one or many, all or nothing)",
             status_code=status.HTTP_201_CREATED, response_model=Enqueued,
             responses={200: {"model": Enqueued, "description": (
                 "every task's idempotency key was already stored: nothing was added")},
                 **too_large(MAX_BODY_BYTES)})
async def post_tasks(body: Annotated[TasksBody, Body(openapi_examples=TASKS_EXAMPLES)],
                     _: Writer, store: Store, response: Response) -> Any:
    tasks = [NewTask(prompt=t.prompt, priority=t.priority, allowed_models=t.allowed_models,
                     kind=t.kind, max_attempts=t.max_attempts, metadata=t.metadata,
                     idempotency_key=t.idempotency_key, on_budget=t.on_budget)
             for t in body.tasks]
    try:
        result = await store.run(store.store.enqueue_tasks, tasks)
    except TaskValidationError as err:
        return store_refusal(err)
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
