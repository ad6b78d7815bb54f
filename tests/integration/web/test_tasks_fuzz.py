"""A property-based run of schemathesis (the documented examples, then valid and invalid
requests generated from the served OpenAPI document) against the ``/tasks`` routes, with a
real task store: no answer is a 5xx. The app runs in process (ASGI): the routes and their
store are what is tested, a server adds nothing here (the admission routes' run uses one).

Kept short (``fuzzing.EXAMPLES`` per operation and mode); raise ``LLMR_FUZZ_EXAMPLES`` for
more.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI

from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from airflow_llm_router.web import Lazy, create_app, token_access
from tests.conftest import REDIS_URL
from tests.integration.web.conftest import AUTH, TOKEN
from tests.integration.web.fuzzing import fuzz_for_5xx


@pytest.fixture
def app(namespace: str, pg_dsn: str, pg_schema: str, store: TaskStore) -> Iterator[FastAPI]:
    async def router() -> AsyncRouterClient:
        return AsyncRouterClient.from_url(REDIS_URL, RouterSettings(namespace=namespace))

    owned: list[TaskStore] = []

    async def task_store() -> TaskStore:
        owned.append(TaskStore(pg_dsn, schema=pg_schema))
        return owned[-1]

    yield create_app(access=token_access(TOKEN), router=Lazy(router, "redis"),
                     task_store=Lazy(task_store, "the test's store"))
    for made in owned:
        made.close()


@pytest.mark.timeout(600)
def test_no_tasks_operation_answers_5xx(app: FastAPI, store: TaskStore) -> None:
    (dead,) = store.enqueue(["will die"])
    (claim,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    store.fail(claim.id, claim.claim_token, error="x", retryable=False)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)
    answered = fuzz_for_5xx(schema, lambda path: path.startswith("/tasks"), headers=AUTH)
    assert set(answered) == {"POST /tasks", "GET /tasks/{task_id}", "POST /tasks/requeue"}
    # the run got past validation and auth into the store: writes, reads and refusals
    assert {201, 422} <= answered["POST /tasks"], answered
    assert 422 in answered["GET /tasks/{task_id}"], answered
    assert {200, 422} <= answered["POST /tasks/requeue"], answered
    assert all(code < 500 for codes in answered.values() for code in codes), answered
    assert store.get(dead) is not None
