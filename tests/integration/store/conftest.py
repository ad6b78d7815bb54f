"""Fixtures for the task store tests: a migrated store in a throw-away schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.store import TaskStore


@pytest.fixture
def other_store(pg_dsn: str, pg_schema: str, store: TaskStore) -> Iterator[TaskStore]:
    """A second worker's store on the same table, with its own connection."""
    with TaskStore(pg_dsn, schema=pg_schema) as task_store:
        yield task_store


@pytest.fixture
def expire_claims(pg_dsn: str, pg_schema: str) -> Callable[..., int]:
    """Move claims' expiry into the past, so tests need no sleeps; returns rows touched."""

    def expire(*task_ids: int) -> int:
        query = sql.SQL(
            "UPDATE {} SET claim_expires_at = now() - interval '1 second' "
            "WHERE status = 'claimed' AND id = ANY(%s)"
        ).format(sql.Identifier(pg_schema, "tasks"))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            return conn.execute(query, (list(task_ids),)).rowcount

    return expire
