"""Fixtures for the quota store tests: a migrated store on a throw-away schema and namespace."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.quotas import QuotaStore
from tests.conftest import delete_namespace


@pytest.fixture
def quota_store(pg_dsn: str, pg_schema: str, router: RouterClient) -> QuotaStore:
    store = QuotaStore(pg_dsn, router, schema=pg_schema)
    store.migrate()
    return store


@pytest.fixture
def lose_redis(namespace: str) -> Callable[[], int]:
    """Delete every key of the namespace: what a Redis restart without persistence does to
    it (without flushing the other namespaces that share this Redis)."""
    return lambda: delete_namespace(namespace)
