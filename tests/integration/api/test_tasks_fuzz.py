"""A property-based run of schemathesis (valid and invalid requests generated from the
served OpenAPI document) against the ``/tasks`` routes, with a real task store: no answer
is a 5xx. The app runs in process (ASGI): the routes and their store are what is tested,
a server adds nothing here (the admission routes' run uses one).

Kept short (a few examples per operation and mode); raise ``LLMR_FUZZ_EXAMPLES`` for more.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err

from airflow_llm_router.api import Lazy, create_app, token_access
from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from tests.conftest import REDIS_URL
from tests.integration.api.conftest import AUTH, TOKEN

EXAMPLES = int(os.environ.get("LLMR_FUZZ_EXAMPLES", "25"))


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
    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()
        if result.ok().path.startswith("/tasks"):
            operations.append(result.ok())
    assert {op.label for op in operations} == {
        "POST /tasks", "GET /tasks/{task_id}", "POST /tasks/requeue"}
    answered: dict[str, set[int]] = {}
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case: schemathesis.Case[Any]) -> None:
            response = case.call(headers=AUTH)
            answered.setdefault(case.operation.label, set()).add(response.status_code)
            case.validate_response(response, checks=[not_a_server_error])

        fuzz()
    # the run got past validation and auth into the store: writes, reads and refusals
    assert {201, 422} <= answered["POST /tasks"], answered
    assert 422 in answered["GET /tasks/{task_id}"], answered
    assert {200, 422} <= answered["POST /tasks/requeue"], answered
    assert all(code < 500 for codes in answered.values() for code in codes), answered
    assert store.get(dead) is not None
