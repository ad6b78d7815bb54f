"""A property-based run of schemathesis (valid and invalid requests generated from the
served OpenAPI document) against the standalone server: no answer is a 5xx.

Kept short (a few examples per operation) so it runs with the other tests; raise
``LLMR_FUZZ_EXAMPLES`` for a longer run. ``/tasks`` (ingestion) is left out: it needs the
task store's connection, which this server does not have.
"""

from __future__ import annotations

import itertools
import os
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err

from airflow_llm_router.engine.client import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from tests.conftest import REDIS_URL, delete_namespace
from tests.integration.api.standalone import standalone_server

TOKEN = secrets.token_urlsafe(24)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = int(os.environ.get("LLMR_FUZZ_EXAMPLES", "30"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    namespace = f"fuzz-{uuid.uuid4().hex[:10]}"
    router = RouterClient.from_url(REDIS_URL, RouterSettings(namespace=namespace))
    router.set_quota("m", {"rpm": 100_000, "tpm": 10**9, "max_concurrency": 100_000})
    try:
        with standalone_server(tmp_path_factory.mktemp("fuzz"), namespace, TOKEN) as url:
            yield url
    finally:
        router.close()
        delete_namespace(namespace)


@pytest.mark.timeout(600)
def test_no_operation_answers_5xx(server: str) -> None:
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json", headers=AUTH)
    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # the served document is invalid
            raise result.err()
        if not result.ok().path.startswith("/tasks"):
            operations.append(result.ok())
    assert {op.path for op in operations} >= {"/schedule", "/complete", "/heartbeat",
                                               "/cancel", "/advice"}
    answered: dict[str, set[int]] = {}
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case: schemathesis.Case[Any]) -> None:
            response = case.call(base_url=server, headers=AUTH, timeout=30)
            answered.setdefault(case.operation.label, set()).add(response.status_code)
            case.validate_response(response, checks=[not_a_server_error])

        fuzz()
    # the run reached the routes, past validation and auth: admissions and refusals
    assert 200 in answered["POST /schedule"] and 422 in answered["POST /schedule"], answered
    assert 422 in answered["POST /complete"] and 404 in answered["POST /complete"], answered
    assert all(code < 500 for codes in answered.values() for code in codes), answered
