"""Fixtures for the quota store tests: a migrated store on a throw-away schema and namespace."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from airflow_llm_router.engine.client import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.quotas import QuotaStore


@pytest.fixture
def router(namespace: str, redis_url: str) -> Iterator[RouterClient]:
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    yield client
    client.close()


@pytest.fixture
def quota_store(pg_dsn: str, pg_schema: str, router: RouterClient) -> QuotaStore:
    store = QuotaStore(pg_dsn, router, schema=pg_schema)
    store.migrate()
    return store


@pytest.fixture
def lose_redis(namespace: str, redis_url: str) -> Callable[[], int]:
    """Delete every key of the namespace: what a Redis restart without persistence does to
    it (without flushing the other namespaces that share this Redis)."""

    def lose() -> int:
        client = redis.Redis.from_url(redis_url)
        try:
            keys = list(client.scan_iter(match=f"llmr:{{{namespace}}}:*", count=1000))
            return int(client.delete(*keys)) if keys else 0
        finally:
            client.close()

    return lose
