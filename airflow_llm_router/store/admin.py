"""Backlog admin, one part of the task store: the backlog as operators see it (the summary,
counts, one task's row, the dead-letter list, requeue and its log).

Reached as ``store.admin`` (``store.admin.requeue(...)``): these run only when a person, the
quota page or the HTTP API asks, never in a drain's loop, so they are kept off the claim
cycle's path. Each runs in one bounded transaction (statements in :mod:`.backlog_queries`,
composed on first use: a drain's store never needs them).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow_llm_router.store import backlog_records as limits
from airflow_llm_router.store import call_checks as checks
from airflow_llm_router.store.backlog_queries import BacklogQueries
from airflow_llm_router.store.backlog_records import (
    BacklogSummary,
    DeadFilter,
    DeadPage,
    DeadTask,
    Requeued,
    RequeueRecord,
)
from airflow_llm_router.store.connection import StoreConnection
from airflow_llm_router.store.records import PRIORITIES, STATUSES, TaskRow

__all__ = ["BacklogAdmin"]

# The task store's logger: requeues are logged where they always were.
log = logging.getLogger("airflow_llm_router.store.task_store")


class BacklogAdmin:
    """Summary, counts, dead letters and requeue of the table of ``connection``."""

    def __init__(self, connection: StoreConnection) -> None:
        self._db = connection

    @cached_property
    def _backlog_queries(self) -> BacklogQueries:
        """Composed on first use: most stores (a drain's) never need these statements."""
        return BacklogQueries.build(self._db.names)

    def counts(self) -> dict[str, int]:
        """Tasks per status, every status present. Counts the whole table: not for hot loops."""
        with self._db.transaction() as conn:
            rows = conn.execute(self._db.queries.counts).fetchall()
        result = dict.fromkeys(STATUSES, 0)
        result.update({status: int(count) for status, count in rows})
        return result

    def get(self, task_id: int) -> TaskRow | None:
        """The full row of one task, or None if there is no such id."""
        checks.validate_task_id("task_id", task_id)
        with self._db.transaction() as conn:
            row = conn.execute(self._db.queries.get, (task_id,)).fetchone()
        return None if row is None else TaskRow.from_row(row)

    def backlog_summary(self) -> BacklogSummary:
        """Counts by status and lane, the oldest pending task's age and the recent
        throughput, in one transaction (by the database's clock).

        Bounded whatever the table's history: each status is counted from its partial
        index up to :data:`~.backlog_records.COUNT_CAP` rows (``capped`` says which reached it), the
        throughput reads only the tasks solved in the last
        :data:`~.backlog_records.THROUGHPUT_WINDOW_S` seconds. Expired claims are not returned here
        (a read never writes): they count as claimed until a claim or a reclaim.
        """
        q = self._backlog_queries
        with self._db.transaction() as conn:
            rows = conn.execute(q.status_counts, {"cap": limits.COUNT_CAP}).fetchall()
            age_row = conn.execute(q.pending_age_and_rate,
                                   {"window": limits.THROUGHPUT_WINDOW_S}).fetchone()
        counts = {status: dict.fromkeys(PRIORITIES, 0) for status in STATUSES}
        for status, rank, count in rows:
            counts[status][PRIORITIES[rank]] = int(count)
        capped = tuple(s for s in STATUSES if sum(counts[s].values()) >= limits.COUNT_CAP)
        age, solved = age_row if age_row is not None else (None, 0)
        return BacklogSummary(counts=counts, capped=capped,
                              oldest_pending_age_s=None if age is None else max(0.0, age),
                              solved_recently=int(solved))

    def dead_tasks(self, *, limit: int = 50, offset: int = 0,
                   matching: DeadFilter | None = None) -> DeadPage:
        """A page of dead-lettered tasks, newest failure first, and how many match in all.

        Never returns a prompt; ``last_error`` is cut to
        :data:`~.backlog_records.ERROR_PREVIEW_CHARS` characters.

        :param limit: tasks per page, 1 to :data:`~.backlog_records.DEAD_PAGE_MAX`.
        :param offset: tasks to skip, 0 to :data:`~.backlog_records.DEAD_OFFSET_MAX`.
        :param matching: which dead tasks (kind, model, error substring); None: all.
        :raises TaskValidationError: naming the bad argument (``limit``, ``kind``, ...).
        """
        limit, offset = checks.check_page(limit, offset)
        params = checks.check_filter(matching or DeadFilter()).params()
        q = self._backlog_queries
        with self._db.transaction() as conn:
            rows = conn.execute(q.dead_page, {**params, "limit": limit, "offset": offset,
                                              "chars": limits.ERROR_PREVIEW_CHARS}).fetchall()
            total_row = conn.execute(q.dead_count, {**params, "cap": limits.COUNT_CAP}).fetchone()
        total = int(total_row[0]) if total_row else 0
        tasks = [DeadTask(id=row[0], kind=row[1], priority=row[2], attempts=row[3],
                          max_attempts=row[4], last_error=row[5], model=row[6],
                          allowed_models=tuple(row[7]) if row[7] is not None else None,
                          created_at=row[8], updated_at=row[9]) for row in rows]
        return DeadPage(tasks=tasks, total=total, total_capped=total >= limits.COUNT_CAP,
                        limit=limit, offset=offset)

    def requeue(self, ids: Sequence[int] | None = None, *, matching: DeadFilter | None = None,
                actor: str, source: str = "python") -> Requeued:
        """Move dead tasks back to pending: these ``ids``, or the dead tasks ``matching`` a
        filter (``DeadFilter()`` for all), oldest failure first, at most
        :data:`~.backlog_records.REQUEUE_MAX` per call.

        A requeued task starts afresh: no attempts used, no claim (an old worker's late
        write stays fenced out), ``last_error`` kept until a new failure replaces it. One
        transaction moves the tasks, logs the requeue (``actor``, ``source``, the request
        and its result) and notifies the store's channel, so draining solvers wake.

        :param ids: task ids (1 to REQUEUE_MAX); those not dead are listed in ``skipped``.
        :param matching: a filter instead of ids; ``remaining`` says how many matching dead
            tasks are left for the next call.
        :param actor: who requeues (recorded, e.g. the Airflow user).
        :param source: how (``api``, ``python``, ...).
        :raises TaskValidationError: naming the bad argument; nothing is changed.
        """
        checked_ids, checked_filter = checks.check_requeue(ids, matching)
        checks.check_actor("actor", actor)
        checks.check_actor("source", source)
        q = self._backlog_queries
        with self._db.transaction() as conn:
            if checked_ids is not None:
                request: dict[str, Any] = {"ids": checked_ids}
                rows = conn.execute(q.requeue_ids, {"ids": checked_ids}).fetchall()
                moved = sorted(int(row[0]) for row in rows)
                skipped = sorted(set(checked_ids) - set(moved))
                remaining = 0
            else:
                assert checked_filter is not None
                params = checked_filter.params()
                request = {"matching": {k: v for k, v in params.items() if v is not None}}
                rows = conn.execute(q.requeue_filter,
                                    {**params, "limit": limits.REQUEUE_MAX}).fetchall()
                moved = sorted(int(row[0]) for row in rows)
                skipped = []
                left = conn.execute(q.dead_count, {**params, "cap": limits.COUNT_CAP}).fetchone()
                remaining = int(left[0]) if left else 0
            conn.execute(q.requeue_log, {
                "actor": actor, "source": source, "request": json.dumps(request),
                "requeued": len(moved), "skipped": len(skipped), "remaining": remaining})
            self._db.announce(conn, len(moved))
        log.info("Requeued %d dead tasks in %s.%s (%d skipped, %d remaining) for %s via %s",
                 len(moved), self._db.schema, self._db.table, len(skipped), remaining, actor,
                 source)
        return Requeued(ids=moved, skipped=skipped, remaining=remaining)

    def requeue_log(self, limit: int = 20) -> list[RequeueRecord]:
        """The latest requeues, newest first (``limit`` 1 to 1000)."""
        limit = checks.check_limit("limit", limit, 1000)
        with self._db.transaction() as conn:
            rows = conn.execute(self._backlog_queries.requeue_log_read,
                                {"limit": limit}).fetchall()
        return [RequeueRecord(*row) for row in rows]
