"""The PostgreSQL task store: enqueue prompts, claim small chunks, write results back.

One :class:`TaskStore` owns one connection (opened on first use) and runs every call in its
own short transaction, so it is cheap to keep for a whole operator run. It is meant for one
thread; threads that claim in parallel each make their own store (claims never collide:
``FOR UPDATE SKIP LOCKED`` hands each row to one claimer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from airflow_llm_router.names import DEFAULT_KIND
from airflow_llm_router.store import checks, models
from airflow_llm_router.store.backlog_admin import BacklogAdmin
from airflow_llm_router.store.ingest import Enqueued, NewTask, match_ids
from airflow_llm_router.store.models import (
    STATUSES,
    ClaimedTask,
    ClaimsInProgress,
    TaskFailure,
    TaskResult,
    TaskRow,
)
from airflow_llm_router.store.validation import EnqueueRows, validate_enqueue, validate_tasks

log = logging.getLogger(__name__)

#: Most expired claims returned to pending (or dead-lettered) per call; a claim of ``n``
#: returns at least ``n``. More are returned by the next call.
RECLAIM_BATCH = 1000


class TaskStore(BacklogAdmin):
    """The backlog of LLM tasks in ``<schema>.<table>``; constructed as
    :class:`~airflow_llm_router.store.connection.StoreConnection` (``TaskStore(dsn,
    schema=..., table=...)`` or :meth:`from_conn_id`). The operators' methods (summary,
    dead letters, requeue) come from :class:`~.backlog_admin.BacklogAdmin`."""

    # --- writes by producers ----------------------------------------------------------------

    def enqueue(
        self,
        prompts: Sequence[str],
        *,
        priority: str = "bulk",
        allowed_models: Sequence[str] | None = None,
        kind: str = DEFAULT_KIND,
        max_attempts: int = 5,
        metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
        on_budget: str = "overflow",
    ) -> list[int]:
        """Add tasks in one statement and notify :attr:`notify_channel` on commit.

        :param prompts: the prompts, one task each.
        :param priority: ``'hot'`` (claimed before any bulk task) or ``'bulk'``.
        :param allowed_models: None for any model, or models in order of preference.
        :param kind: free label of the task type (token estimates learn per kind).
        :param max_attempts: claims allowed before the task is dead-lettered; >= 1.
        :param metadata: one JSON dict for all tasks, or a list with one per prompt.
        :param idempotency_keys: None, or one key (or None) per prompt: a prompt whose key
            is already in the table is not added again and its existing id is returned, so a
            retried enqueue adds nothing twice (:meth:`enqueue_tasks` also says which).
        :param on_budget: when a task's preferred model is over its spend budget:
            ``'overflow'`` to its next allowed model, or ``'wait'`` until the budget allows
            it (docs/budgets.md).
        :return: the ids, in the order of ``prompts``.
        :raises TaskValidationError: naming the first invalid argument and, for per-task
            values, its index (``prompts[3]``); nothing is written. See ``store/validation.py``
            for what is refused.
        """
        return self._insert(validate_enqueue(
            prompts, priority=priority, allowed_models=allowed_models, kind=kind,
            max_attempts=max_attempts, metadata=metadata, idempotency_keys=idempotency_keys,
            on_budget=on_budget, max_prompt_chars=self.max_prompt_chars)).ids

    def enqueue_tasks(self, tasks: Sequence[NewTask]) -> Enqueued:
        """Add tasks that differ in priority, models, kind or keys: :meth:`enqueue`, per task.

        All or nothing, in one transaction, notified on commit like :meth:`enqueue` (payload:
        how many were added; nothing if none were).

        :return: the ids in task order, and which tasks' idempotency keys already named a
            task (that task's id is returned; nothing is written for it). Concurrent calls
            with the same key get the same id: the second waits for the first to commit.
        :raises TaskValidationError: naming ``tasks[i].<field>``; nothing is written.
        """
        return self._insert(validate_tasks(tasks, self.max_prompt_chars))

    def _insert(self, rows_in: EnqueueRows) -> Enqueued:
        if not rows_in.prompts:
            return Enqueued([], [])
        keys = rows_in.idempotency_keys
        with self._transaction() as conn:
            rows = conn.execute(self._queries.enqueue, rows_in.params()).fetchall()
            written = {row[1] for row in rows}
            skipped = [key for key in keys if key is not None and key not in written]
            existing = dict(conn.execute(self._queries.enqueue_keys, (skipped,)).fetchall()
                            ) if skipped else {}
            self._announce(conn, len(rows))
        result = match_ids(keys, rows, existing)
        log.debug("Enqueued %d tasks into %s.%s (%d already present by idempotency key)",
                  result.created, self.schema, self.table, len(skipped))
        return result

    # --- the claim cycle ---------------------------------------------------------------------

    def claim(self, n: int, *, worker_id: str, claim_ttl_s: float) -> list[ClaimedTask]:
        """Claim up to ``n`` tasks, hot first, then oldest.

        Expired claims (their worker is presumed gone) are first returned to pending in the
        same transaction (:meth:`reclaim`), so they queue by their lane and age; those left
        for others are announced on :attr:`notify_channel`. Each claim counts an attempt
        and gets a fresh ``claim_token``.

        :param n: most tasks to claim; 0 returns ``[]`` without touching the database.
        :param worker_id: who claims, stored in ``claimed_by`` for diagnostics.
        :param claim_ttl_s: seconds until the claim expires unless extended
            (:meth:`extend_claims`).
        :return: the claimed tasks in claim order; fewer than ``n`` (maybe none) if the
            backlog is short or other claimers hold the rest.
        """
        checks.validate_claim_args(n, worker_id, claim_ttl_s)
        if n == 0:
            return []
        with self._transaction() as conn:
            back = self._return_expired(conn, max(n, RECLAIM_BATCH))
            rows = conn.execute(
                self._queries.claim,
                {"n": n, "worker_id": worker_id, "ttl": float(claim_ttl_s)},
            ).fetchall()
            self._announce(conn, len(back.pending - {row[0] for row in rows}))
        rows.sort(key=lambda row: (row[-1], row[0]))
        return [checks.claimed_task(row) for row in rows]

    def adopt(self, *, worker_id: str, claim_ttl_s: float) -> list[ClaimedTask]:
        """Take back the live claims ``worker_id`` holds (a restarted worker of the same
        task instance try: a trigger that a triggerer restarted), extending them by
        ``claim_ttl_s``; tokens and attempts stay, so writes stay fenced and the request
        ids built from the tokens find their live leases again.

        :return: the claims, in claim order (hot first, then oldest).
        """
        checks.validate_claim_args(1, worker_id, claim_ttl_s)
        with self._transaction() as conn:
            rows = conn.execute(self._queries.adopt,
                                {"worker_id": worker_id, "ttl": float(claim_ttl_s)}).fetchall()
        rows.sort(key=lambda row: (row[-1], row[0]))
        return [checks.claimed_task(row) for row in rows]

    def reclaim(self) -> int:
        """Return expired claims to pending now and announce them; :meth:`claim`,
        :meth:`backlog_size` and :meth:`claims_in_progress` do this first, so there is
        rarely a need to call it.

        A returned task keeps its attempt count (the next claim counts one more); one whose
        expired claim was its last attempt is dead-lettered instead. Those back in pending
        are announced on :attr:`notify_channel` like an enqueue (payload: how many), so
        watchers and lingering solvers wake. Up to ``RECLAIM_BATCH`` per call.

        :return: how many tasks went back to pending.
        """
        with self._transaction() as conn:
            return self._reclaim_announced(conn)

    def _reclaim_announced(self, conn: psycopg.Connection[Any]) -> int:
        """:meth:`reclaim` inside ``conn``'s transaction: how many went back to pending."""
        back = self._return_expired(conn, RECLAIM_BATCH)
        self._announce(conn, len(back.pending))
        return len(back.pending)

    def _return_expired(self, conn: psycopg.Connection[Any], limit: int) -> models.Reclaimed:
        back = models.Reclaimed.from_rows(
            conn.execute(self._queries.reclaim, {"limit": limit}).fetchall())
        back.log(self.schema, self.table)
        return back

    def complete(
        self,
        task_id: int,
        claim_token: str,
        *,
        answer: str,
        model: str,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> bool:
        """Store the answer if ``claim_token`` is still the task's current claim.

        :return: True if written; False if the claim was superseded (the row is unchanged).
        """
        result = TaskResult(task_id, claim_token, answer, model, input_tokens, output_tokens)
        return self.complete_many([result])[task_id]

    def complete_many(self, results: Iterable[TaskResult | Mapping[str, Any]]) -> dict[int, bool]:
        """Fenced :meth:`complete` of a chunk in one statement.

        :param results: :class:`TaskResult` objects or dicts with the same keys.
        :return: for every task id, whether its answer was written.
        """
        checked = [checks.check_result(i, r) for i, r in enumerate(results)]
        checks.reject_duplicates("results", [r.task_id for r in checked])
        if not checked:
            return {}
        with self._transaction() as conn:
            rows = conn.execute(
                self._queries.complete,
                (
                    [r.task_id for r in checked],
                    [r.claim_token for r in checked],
                    [r.answer for r in checked],
                    [r.model for r in checked],
                    [r.input_tokens for r in checked],
                    [r.output_tokens for r in checked],
                ),
            ).fetchall()
        written = {row[0] for row in rows}
        return {r.task_id: r.task_id in written for r in checked}

    def fail(
        self, task_id: int, claim_token: str, *, error: str, retryable: bool = True,
        model: str | None = None,
    ) -> str | None:
        """Record a failed attempt if ``claim_token`` is still current.

        :param error: why it failed; stored in ``last_error``, cut to a few KB.
        :param retryable: False dead-letters the task at once (e.g. a prompt too large).
        :param model: the model whose call failed, stored in ``model`` (None: no call was
            made; the model of an earlier failure stays).
        :return: the new status, ``'pending'`` (will be retried) or ``'dead'``; None if the
            claim was superseded and nothing was written.
        """
        return self.fail_many([TaskFailure(task_id, claim_token, error, retryable, model)]
                              )[task_id]

    def fail_many(
        self, failures: Iterable[TaskFailure | Mapping[str, Any]]
    ) -> dict[int, str | None]:
        """Fenced :meth:`fail` of a chunk in one statement; new status (or None) per id."""
        checked = [checks.check_failure(i, f) for i, f in enumerate(failures)]
        checks.reject_duplicates("failures", [f.task_id for f in checked])
        if not checked:
            return {}
        with self._transaction() as conn:
            rows = conn.execute(
                self._queries.fail,
                (
                    [f.task_id for f in checked],
                    [f.claim_token for f in checked],
                    [f.error for f in checked],
                    [f.retryable for f in checked],
                    [f.model for f in checked],
                ),
            ).fetchall()
        status = dict(rows)
        return {f.task_id: status.get(f.task_id) for f in checked}

    def release(self, task_id: int, claim_token: str) -> bool:
        """Give a claimed task back untried (e.g. on shutdown); the attempt is not counted.

        :return: True if released; False if the claim was superseded.
        """
        return self.release_many([(task_id, claim_token)])[task_id]

    def release_many(
        self, claims: Mapping[int, str] | Iterable[tuple[int, str] | ClaimedTask]
    ) -> dict[int, bool]:
        """Fenced :meth:`release` of a chunk in one statement; whether each was released."""
        pairs = checks.claim_pairs(claims)
        if not pairs:
            return {}
        with self._transaction() as conn:
            rows = conn.execute(
                self._queries.release, ([p[0] for p in pairs], [p[1] for p in pairs])
            ).fetchall()
        released = {row[0] for row in rows}
        return {task_id: task_id in released for task_id, _ in pairs}

    def extend_claims(
        self,
        claims: Mapping[int, str] | Iterable[tuple[int, str] | ClaimedTask],
        *,
        claim_ttl_s: float,
    ) -> int:
        """Heartbeat: push the expiry of still-current claims to ``now() + claim_ttl_s``.

        A claim that already expired but was not taken over is still current and is renewed.

        :param claims: ``{task_id: claim_token}``, ``(id, token)`` pairs or ClaimedTasks.
        :return: how many claims were extended; fewer than given means some were superseded.
        """
        ttl = checks.validate_ttl(claim_ttl_s)
        pairs = checks.claim_pairs(claims)
        if not pairs:
            return 0
        with self._transaction() as conn:
            rows = conn.execute(
                self._queries.extend, (ttl, [p[0] for p in pairs], [p[1] for p in pairs])
            ).fetchall()
        return len(rows)

    # --- reads ------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Tasks per status, every status present. Counts the whole table: not for hot loops."""
        with self._transaction() as conn:
            rows = conn.execute(self._queries.counts).fetchall()
        result = dict.fromkeys(STATUSES, 0)
        result.update({status: int(count) for status, count in rows})
        return result

    def backlog_size(self) -> int:
        """Tasks a claim could take now: pending plus expired claims. Read from the indexes,
        after returning expired claims to pending and announcing them (see :meth:`reclaim`).

        0 does not mean drained while others still hold live claims: their workers may
        die and the tasks come back; ask :meth:`claims_in_progress`.
        """
        with self._transaction() as conn:
            self._reclaim_announced(conn)
            row = conn.execute(self._queries.backlog).fetchone()
        return int(row[0]) if row else 0

    def claims_in_progress(self) -> ClaimsInProgress:
        """Live claims (not yet expired) and when the first of them expires, after returning
        expired claims to pending (see :meth:`reclaim`).

        A drain that finds the backlog empty but claims in progress should wait (linger)
        until ``next_expiry_s`` or a notification, rather than report itself done: if those
        workers died, their tasks come back then and are announced.
        """
        with self._transaction() as conn:
            self._reclaim_announced(conn)
            row = conn.execute(self._queries.live_claims).fetchone()
        if row is None:
            return ClaimsInProgress(0, None, None)
        return ClaimsInProgress(int(row[0]), row[1], row[2])

    def get(self, task_id: int) -> TaskRow | None:
        """The full row of one task, or None if there is no such id."""
        checks.validate_task_id("task_id", task_id)
        with self._transaction() as conn:
            row = conn.execute(self._queries.get, (task_id,)).fetchone()
        if row is None:
            return None
        values = list(row)
        values[4] = tuple(values[4]) if values[4] is not None else None
        return TaskRow(*values)
