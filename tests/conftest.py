"""Shared fixtures: a real Redis namespace and a real PostgreSQL schema per test.

Airflow reads its configuration at import time, so the environment is set here, before any
test module imports ``airflow``.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="llmr-airflow-"))
os.environ.setdefault("AIRFLOW_HOME", str(_AIRFLOW_HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault(
    "AIRFLOW__CORE__DAGS_FOLDER", str(Path(__file__).parent / "dags")
)

import pytest  # noqa: E402

REDIS_URL = os.environ.get("LLMR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_DSN = os.environ.get(
    "LLMR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)


def delete_namespace(namespace: str) -> int:
    """Delete every Redis key of a router namespace (what a Redis restart without
    persistence does to it); returns how many there were."""
    from llm_router_devkit.redis_tools import drop_namespace

    return drop_namespace(REDIS_URL, namespace)


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh router namespace; its Redis keys are deleted after the test."""
    ns = f"test-{uuid.uuid4().hex[:12]}"
    yield ns
    delete_namespace(ns)


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped after the test."""
    import psycopg

    schema = f"llmr_test_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_dsn() -> str:
    return POSTGRES_DSN


@pytest.fixture
def router(namespace: str, redis_url: str) -> Iterator[Any]:
    """A sync router client on the test's own namespace."""
    from airflow_llm_router.engine import RouterClient
    from airflow_llm_router.engine.types import RouterSettings

    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    yield client
    client.close()


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[Any]:
    """A migrated task store; closed before ``pg_schema`` drops the schema."""
    from airflow_llm_router.store import TaskStore

    with TaskStore(pg_dsn, schema=pg_schema) as task_store:
        task_store.migrate()
        yield task_store
