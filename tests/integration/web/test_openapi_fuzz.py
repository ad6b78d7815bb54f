"""A property-based run of schemathesis (valid and invalid requests generated from the
served OpenAPI document) against the standalone server: no answer is a 5xx.

Kept short (``fuzzing.EXAMPLES`` per operation and mode) so it runs with the other tests;
raise ``LLMR_FUZZ_EXAMPLES`` for a longer run. The routes on PostgreSQL (ingestion, the
backlog, quotas, budget, traffic) are left out: they need the task and quota stores'
connection, which this server does not have.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import pytest
import schemathesis

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from tests.conftest import REDIS_URL, delete_namespace
from tests.integration.web.fuzzing import fuzz_for_5xx
from tests.integration.web.standalone import standalone_server

TOKEN = secrets.token_urlsafe(24)
#: the paths of the routes that need PostgreSQL
ON_POSTGRES = ("/tasks", "/backlog", "/quotas", "/stats", "/audit", "/budget", "/history",
               "/models")
AUTH = {"Authorization": f"Bearer {TOKEN}"}


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
    answered = fuzz_for_5xx(schema, lambda path: not path.startswith(ON_POSTGRES),
                            base_url=server, headers=AUTH, timeout=30)
    assert {"POST /schedule", "POST /complete", "POST /heartbeat", "POST /cancel",
            "GET /advice"} <= set(answered)
    # the run reached the routes, past validation and auth: admissions and refusals
    assert 200 in answered["POST /schedule"] and 422 in answered["POST /schedule"], answered
    assert 422 in answered["POST /complete"] and 404 in answered["POST /complete"], answered
    assert all(code < 500 for codes in answered.values() for code in codes), answered
