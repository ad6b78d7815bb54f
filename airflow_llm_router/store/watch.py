"""Watching the backlog from the triggerer: the backlog's size and the arrival of new tasks,
on one asynchronous connection.

:meth:`TaskStore.enqueue` notifies the store's channel when its transaction commits, so a
watcher that LISTENs wakes within milliseconds of new work instead of at its next poll. A
notification sent while nobody listens is lost, so a watcher reads the backlog once after it
starts listening: work that arrived before is found there. Nothing here claims or changes a
task.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from airflow_llm_router.pg import TableNames
from airflow_llm_router.store.queries import Queries

__all__ = ["APPLICATION_NAME", "BacklogWatch"]

#: How a watcher's session shows in ``pg_stat_activity``.
APPLICATION_NAME = "llm_router_backlog_watch"


class BacklogWatch:
    """LISTEN on a task store's channel and read its backlog, for async code.

    Use as ``async with BacklogWatch(dsn, schema=..., table=...) as watch``; then
    :meth:`backlog` counts the tasks a claim could take and :meth:`arrival` waits for the
    next enqueue.

    :param dsn: libpq connection string (never logged).
    """

    def __init__(self, dsn: str, *, schema: str = "llm_router", table: str = "tasks") -> None:
        self._names = TableNames(schema=schema, table=table)
        self._backlog = Queries.build(self._names).backlog
        self._dsn = dsn
        self._conn: psycopg.AsyncConnection[Any] | None = None

    @property
    def channel(self) -> str:
        return self._names.notify_channel

    async def __aenter__(self) -> BacklogWatch:
        self._conn = await psycopg.AsyncConnection.connect(
            self._dsn, autocommit=True, application_name=APPLICATION_NAME)
        await self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            raise RuntimeError("BacklogWatch is used outside 'async with'")
        return self._conn

    async def backlog(self) -> int:
        """Tasks a claim could take now; 0 while the store's table does not exist yet (a
        first deployment: the first enqueue creates it and notifies)."""
        try:
            cur = await self._connection().execute(self._backlog)
        except pg_errors.UndefinedTable:
            return 0
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def arrival(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for enqueues; the number of tasks they announced (0 if
        none came). Notifications already waiting are taken at once, all of them."""
        conn = self._connection()
        announced = 0
        async for note in conn.notifies(timeout=max(0.0, timeout_s), stop_after=1):
            announced += _count(note.payload)
        if announced:  # take the notifications already queued behind it, without waiting
            async for note in conn.notifies(timeout=0.0):
                announced += _count(note.payload)
        return announced

def _count(payload: str) -> int:
    """An enqueue's payload is the number of tasks it added; anything else counts as one."""
    try:
        return max(1, int(payload))
    except ValueError:
        return 1
