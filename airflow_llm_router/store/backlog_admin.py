"""The backlog as operators see it: the summary, the dead-letter list, requeue and its log.

A mixin of :class:`~airflow_llm_router.store.task_store.TaskStore` (its public methods are
called on a ``TaskStore``), kept apart from the claim cycle: these run only when a person or
the API asks, each in one bounded transaction (statements in :mod:`.backlog_queries`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow_llm_router.store import dead_letters, models
from airflow_llm_router.store.backlog_queries import BacklogQueries
from airflow_llm_router.store.connection import StoreConnection
from airflow_llm_router.store.models import (
    STATUSES,
    BacklogSummary,
    DeadFilter,
    DeadPage,
    DeadTask,
    Requeued,
    RequeueRecord,
)

# The task store's logger: requeues are logged where they always were.
log = logging.getLogger("airflow_llm_router.store.task_store")


class BacklogAdmin(StoreConnection):
    """Summary, dead letters and requeue of one task table (see the module docstring)."""

    @cached_property
    def _backlog_queries(self) -> BacklogQueries:
        """Composed on first use: most stores (a drain's) never need these statements."""
        return BacklogQueries.build(self._names)

    def backlog_summary(self) -> BacklogSummary:
        """Counts by status and lane, the oldest pending task's age and the recent
        throughput, in one transaction (by the database's clock).

        Bounded whatever the table's history: each status is counted from its partial
        index up to :data:`~.models.COUNT_CAP` rows (``capped`` says which reached it), the
        throughput reads only the tasks solved in the last
        :data:`~.models.THROUGHPUT_WINDOW_S` seconds. Expired claims are not returned here
        (a read never writes): they count as claimed until a claim or :meth:`reclaim`.
        """
        q = self._backlog_queries
        with self._transaction() as conn:
            rows = conn.execute(q.status_counts, {"cap": models.COUNT_CAP}).fetchall()
            age_row = conn.execute(q.pending_age_and_rate,
                                   {"window": models.THROUGHPUT_WINDOW_S}).fetchone()
        counts = {status: dict.fromkeys(models.PRIORITIES, 0) for status in STATUSES}
        for status, rank, count in rows:
            counts[status][models.PRIORITIES[rank]] = int(count)
        capped = tuple(s for s in STATUSES if sum(counts[s].values()) >= models.COUNT_CAP)
        age, solved = age_row if age_row is not None else (None, 0)
        return BacklogSummary(counts=counts, capped=capped,
                              oldest_pending_age_s=None if age is None else max(0.0, age),
                              solved_recently=int(solved))

    def dead_tasks(self, *, limit: int = 50, offset: int = 0,
                   matching: DeadFilter | None = None) -> DeadPage:
        """A page of dead-lettered tasks, newest failure first, and how many match in all.

        Never returns a prompt; ``last_error`` is cut to
        :data:`~.models.ERROR_PREVIEW_CHARS` characters.

        :param limit: tasks per page, 1 to :data:`~.models.DEAD_PAGE_MAX`.
        :param offset: tasks to skip, 0 to :data:`~.models.DEAD_OFFSET_MAX`.
        :param matching: which dead tasks (kind, model, error substring); None: all.
        :raises TaskValidationError: naming the bad argument (``limit``, ``kind``, ...).
        """
        limit, offset = dead_letters.check_page(limit, offset)
        params = dead_letters.check_filter(matching or DeadFilter()).params()
        q = self._backlog_queries
        with self._transaction() as conn:
            rows = conn.execute(q.dead_page, {**params, "limit": limit, "offset": offset,
                                              "chars": models.ERROR_PREVIEW_CHARS}).fetchall()
            total_row = conn.execute(q.dead_count, {**params, "cap": models.COUNT_CAP}).fetchone()
        total = int(total_row[0]) if total_row else 0
        tasks = [DeadTask(id=row[0], kind=row[1], priority=row[2], attempts=row[3],
                          max_attempts=row[4], last_error=row[5], model=row[6],
                          allowed_models=tuple(row[7]) if row[7] is not None else None,
                          created_at=row[8], updated_at=row[9]) for row in rows]
        return DeadPage(tasks=tasks, total=total, total_capped=total >= models.COUNT_CAP,
                        limit=limit, offset=offset)

    def requeue(self, ids: Sequence[int] | None = None, *, matching: DeadFilter | None = None,
                actor: str, source: str = "python") -> Requeued:
        """Move dead tasks back to pending: these ``ids``, or the dead tasks ``matching`` a
        filter (``DeadFilter()`` for all), oldest failure first, at most
        :data:`~.models.REQUEUE_MAX` per call.

        A requeued task starts afresh: no attempts used, no claim (an old worker's late
        write stays fenced out), ``last_error`` kept until a new failure replaces it. One
        transaction moves the tasks, logs the requeue (``actor``, ``source``, the request
        and its result) and notifies :attr:`notify_channel`, so draining solvers wake.

        :param ids: task ids (1 to REQUEUE_MAX); those not dead are listed in ``skipped``.
        :param matching: a filter instead of ids; ``remaining`` says how many matching dead
            tasks are left for the next call.
        :param actor: who requeues (recorded, e.g. the Airflow user).
        :param source: how (``api``, ``python``, ...).
        :raises TaskValidationError: naming the bad argument; nothing is changed.
        """
        checked_ids, checked_filter = dead_letters.check_requeue(ids, matching)
        dead_letters.check_actor("actor", actor)
        dead_letters.check_actor("source", source)
        q = self._backlog_queries
        with self._transaction() as conn:
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
                                    {**params, "limit": models.REQUEUE_MAX}).fetchall()
                moved = sorted(int(row[0]) for row in rows)
                skipped = []
                left = conn.execute(q.dead_count, {**params, "cap": models.COUNT_CAP}).fetchone()
                remaining = int(left[0]) if left else 0
            conn.execute(q.requeue_log, {
                "actor": actor, "source": source, "request": json.dumps(request),
                "requeued": len(moved), "skipped": len(skipped), "remaining": remaining})
            self._announce(conn, len(moved))
        log.info("Requeued %d dead tasks in %s.%s (%d skipped, %d remaining) for %s via %s",
                 len(moved), self.schema, self.table, len(skipped), remaining, actor, source)
        return Requeued(ids=moved, skipped=skipped, remaining=remaining)

    def requeue_log(self, limit: int = 20) -> list[RequeueRecord]:
        """The latest requeues, newest first (``limit`` 1 to 1000)."""
        limit = dead_letters.check_limit("limit", limit, 1000)
        with self._transaction() as conn:
            rows = conn.execute(self._backlog_queries.requeue_log_read,
                                {"limit": limit}).fetchall()
        return [RequeueRecord(*row) for row in rows]
