"""A migrated task store and a router client on the test's own schema and namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_llm_router.engine.client import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[TaskStore]:
    with TaskStore(pg_dsn, schema=pg_schema) as s:
        s.migrate()
        yield s


@pytest.fixture
def router(namespace: str, redis_url: str) -> Iterator[RouterClient]:
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    yield client
    client.close()
