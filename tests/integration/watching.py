"""Waiting, in a test, for a backlog watcher to sit on LISTEN (it has read the backlog and
waits for notifications): then an enqueue can only reach it through its notification."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from airflow_llm_router.store.watch import APPLICATION_NAME


async def until_listening(pg_dsn: str, schema: str, task: asyncio.Future[Any] | None = None,
                          timeout_s: float = 10.0) -> None:
    """Until a watcher of ``schema`` is idle on its connection; fails if ``task`` (the
    watcher's owner) ends first or nothing listens within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND state = 'idle' AND query LIKE %s",
                (APPLICATION_NAME, f"%{schema}%")).fetchone()
            if row and row[0]:
                return
            assert task is None or not task.done(), "it ended instead of listening"
            assert time.monotonic() < deadline, "nothing started listening"
            await asyncio.sleep(0.02)
