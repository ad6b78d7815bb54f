"""The task store the quota UI's API server reads (same schema as its quota tables), for the
backlog tests: emptied before each test, and a way to make dead tasks through the real
claim cycle."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.store import TaskStore
from tests.conftest import POSTGRES_DSN
from tests.integration.plugins.conftest import QuotaUiStack


@pytest.fixture
def tasks(ui: QuotaUiStack) -> Iterator[TaskStore]:
    """The API server's task store, migrated and empty."""
    with TaskStore(POSTGRES_DSN, schema=ui.schema) as store:
        store.migrate()
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("TRUNCATE {}, {}").format(
                sql.Identifier(ui.schema, "tasks"), sql.Identifier(ui.schema, "tasks_requeues")))
        yield store


def kill(store: TaskStore, n: int, *, error: str, kind: str = "default",
         priority: str = "bulk") -> list[int]:
    """``n`` tasks dead-lettered by a non-retryable failure, as a solver records one."""
    ids = store.enqueue([f"do not show this prompt {i}" for i in range(n)], kind=kind,
                        priority=priority)
    claimed = store.claim(n, worker_id="test-solver", claim_ttl_s=60)
    assert sorted(t.id for t in claimed) == ids
    for task in claimed:
        assert store.fail(task.id, task.claim_token, error=error, retryable=False) == "dead"
    return ids
