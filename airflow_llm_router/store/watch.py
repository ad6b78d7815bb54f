"""Watching the backlog from the triggerer: the backlog's size and the arrival of claimable
tasks, on one asynchronous connection.

:meth:`TaskStore.enqueue` notifies the store's channel when its transaction commits, and so
does any store call that returns expired claims to pending, so a watcher that LISTENs wakes
within milliseconds of new work instead of at its next poll. A notification sent while
nobody listens is lost, so a watcher reads the backlog once after it starts listening: work
that arrived before is found there.

Claims that expire announce nothing by themselves (nobody writes when a worker dies), so a
waiting watcher also keeps the earliest claim expiry in view: it wakes then, returns the
expired claims to pending itself and announces them to every other listener. Stranded work
thus wakes a drain, a lingering solver or an arrival trigger with nobody enqueuing.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from airflow_llm_router.pg import TableNames
from airflow_llm_router.store.call_checks import validate_cap
from airflow_llm_router.store.queries import RECLAIM_BATCH, Queries
from airflow_llm_router.store.records import Reclaimed

__all__ = ["APPLICATION_NAME", "EXPIRY_CHECK_S", "EXPIRY_GRACE_S", "BacklogWatch"]

#: How a watcher's session shows in ``pg_stat_activity``.
APPLICATION_NAME = "llm_router_backlog_watch"

#: Woken for a claim's expiry, a watcher waits this much longer, so the claim has expired
#: by the database's clock when it looks; also the shortest wait between two looks.
EXPIRY_GRACE_S = 0.05

#: The longest a waiting watcher goes without re-reading the earliest claim expiry: claims
#: are not announced, so one taken after it looked is seen within this time.
EXPIRY_CHECK_S = 5.0

class BacklogWatch:
    """LISTEN on a task store's channel and read its backlog, for async code.

    Use as ``async with BacklogWatch(dsn, schema=..., table=...) as watch``; then
    :meth:`backlog` counts the tasks a claim could take and :meth:`arrival` waits for more
    to become claimable (enqueued, or returned from expired claims).

    :param dsn: libpq connection string (never logged).
    """

    def __init__(self, dsn: str, *, schema: str = "llm_router", table: str = "tasks") -> None:
        self._names = TableNames(schema=schema, table=table)
        self._queries = Queries.build(self._names)
        self._dsn = dsn
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._pid = 0

    @property
    def channel(self) -> str:
        return self._names.notify_channel

    async def __aenter__(self) -> BacklogWatch:
        self._conn = await psycopg.AsyncConnection.connect(
            self._dsn, autocommit=True, application_name=APPLICATION_NAME)
        self._pid = self._conn.info.backend_pid
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

    async def backlog(self, *, cap: int | None = None) -> int:
        """Tasks a claim could take now (pending ones up to ``cap``, as
        :meth:`ClaimCycle.backlog_size`), after returning expired claims to pending (and
        announcing them); 0 while the store's table does not exist yet (a first
        deployment: the first enqueue creates it and notifies)."""
        validate_cap(cap)
        conn = self._connection()
        try:
            async with conn.transaction():
                await self._reclaim(conn)
                cur = await conn.execute(self._queries.backlog, {"cap": cap})
                row = await cur.fetchone()
        except pg_errors.UndefinedTable:
            return 0
        return int(row[0]) if row else 0

    async def reclaim(self) -> int:
        """Return expired claims to pending and announce them to the other listeners (as
        :meth:`ClaimCycle.reclaim`); how many came back."""
        conn = self._connection()
        try:
            async with conn.transaction():
                return await self._reclaim(conn)
        except pg_errors.UndefinedTable:
            return 0

    async def _reclaim(self, conn: psycopg.AsyncConnection[Any]) -> int:
        await conn.execute(self._queries.index_plans)  # as the claim cycle: by the indexes
        cur = await conn.execute(self._queries.reclaim, {"limit": RECLAIM_BATCH})
        back = Reclaimed.from_rows(await cur.fetchall())
        back.log(self._names.schema, self._names.table)
        if back.pending:
            await conn.execute(self._queries.notify, (self.channel, str(len(back.pending))))
        return len(back.pending)

    async def next_expiry(self) -> float | None:
        """Seconds until the earliest claim expires (<= 0: one already has), by the
        database's clock; None if nothing is claimed."""
        try:
            cur = await self._connection().execute(self._queries.next_expiry)
        except pg_errors.UndefinedTable:
            return None
        row = await cur.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    async def arrival(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for tasks to become claimable; how many this watcher
        heard of or returned itself (0 if none; with several watchers returning claims at
        once each may count only its share, so read :meth:`backlog` for the total).

        Wakes on the announcements of other sessions (enqueues, claims returned by a store
        call), taking all that are already queued, and at the expiry of the earliest live
        claim, when it returns the expired claims itself and announces them to the others.
        A claim extended or finished meanwhile just moves the wake-up to the next expiry;
        claims taken while it waits are seen within ``EXPIRY_CHECK_S``.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            now = time.monotonic()
            expiry = await self.next_expiry()
            expires_at = None if expiry is None else now + max(expiry, 0.0) + EXPIRY_GRACE_S
            wake_at = min(deadline, now + EXPIRY_CHECK_S,
                          deadline if expires_at is None else expires_at)
            announced = await self._announcements(max(0.0, wake_at - time.monotonic()))
            if announced:
                return announced
            if expires_at is not None and time.monotonic() >= expires_at:
                if back := await self.reclaim():
                    return back
                if expiry is not None and expiry <= 0:  # locked by others: look again soon
                    await self._announcements(min(EXPIRY_GRACE_S, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                return 0

    async def _announcements(self, timeout_s: float) -> int:
        """Tasks announced by other sessions within ``timeout_s``, then all already queued;
        this watcher's own announcements (of claims it returned) are skipped."""
        conn = self._connection()
        announced = 0
        async for note in conn.notifies(timeout=max(0.0, timeout_s), stop_after=1):
            if note.pid != self._pid:
                announced += _count(note.payload)
        async for note in conn.notifies(timeout=0.0):
            if note.pid != self._pid:
                announced += _count(note.payload)
        return announced


def _count(payload: str) -> int:
    """An announcement's payload is the number of tasks; anything else counts as one."""
    try:
        return max(1, int(payload))
    except ValueError:
        return 1
