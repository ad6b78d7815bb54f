"""The claim cycle, one part of the task store: claim small chunks, write results back
under the claim token, heartbeat, release, and return the claims of workers that died.

Every write back presents the claim's token and is refused once the task was claimed again
(fencing: statements in :mod:`.queries`), so a worker whose claim expired and was taken over
can no longer touch the row. Claims never collide: ``FOR UPDATE SKIP LOCKED`` hands each row
to one claimer. The cycle's own reads (:meth:`ClaimCycle.backlog_size`,
:meth:`ClaimCycle.claims_in_progress`) return expired claims first, so what they count is
what a claim could take now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import psycopg

from airflow_llm_router.store import call_checks as checks
from airflow_llm_router.store.connection import StoreConnection
from airflow_llm_router.store.queries import RECLAIM_BATCH
from airflow_llm_router.store.records import (
    ClaimedTask,
    ClaimsInProgress,
    Reclaimed,
    TaskFailure,
    TaskResult,
)

__all__ = ["ClaimCycle"]


class ClaimCycle:
    """Claims on the table of ``connection`` (see the module docstring)."""

    def __init__(self, connection: StoreConnection) -> None:
        self._db = connection

    def claim(self, n: int, *, worker_id: str, claim_ttl_s: float) -> list[ClaimedTask]:
        """Claim up to ``n`` tasks, hot first, then oldest.

        Expired claims (their worker is presumed gone) are first returned to pending in the
        same transaction (:meth:`reclaim`), so they queue by their lane and age; those left
        for others are announced on the store's channel. Each claim counts an attempt
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
        with self._db.transaction() as conn:
            back = self._return_expired(conn, max(n, RECLAIM_BATCH))
            rows = conn.execute(
                self._db.queries.claim,
                {"n": n, "worker_id": worker_id, "ttl": float(claim_ttl_s)},
            ).fetchall()
            self._db.announce(conn, len(back.pending - {row[0] for row in rows}))
        rows.sort(key=lambda row: (row[-1], row[0]))
        return [ClaimedTask.from_row(row) for row in rows]

    def adopt(self, *, worker_id: str, claim_ttl_s: float) -> list[ClaimedTask]:
        """Take back the live claims ``worker_id`` holds (a restarted worker of the same
        task instance try: a trigger that a triggerer restarted), extending them by
        ``claim_ttl_s``; tokens and attempts stay, so writes stay fenced and the request
        ids built from the tokens find their live leases again.

        :return: the claims, in claim order (hot first, then oldest).
        """
        checks.validate_claim_args(1, worker_id, claim_ttl_s)
        with self._db.transaction() as conn:
            rows = conn.execute(self._db.queries.adopt,
                                {"worker_id": worker_id, "ttl": float(claim_ttl_s)}).fetchall()
        rows.sort(key=lambda row: (row[-1], row[0]))
        return [ClaimedTask.from_row(row) for row in rows]

    def reclaim(self) -> int:
        """Return expired claims to pending now and announce them; :meth:`claim`,
        :meth:`backlog_size` and :meth:`claims_in_progress` do this first, so there is
        rarely a need to call it.

        A returned task keeps its attempt count (the next claim counts one more); one whose
        expired claim was its last attempt is dead-lettered instead. Those back in pending
        are announced on the store's channel like an enqueue (payload: how many), so
        watchers and lingering solvers wake. Up to ``RECLAIM_BATCH`` per call.

        :return: how many tasks went back to pending.
        """
        with self._db.transaction() as conn:
            return self._reclaim_announced(conn)

    def _reclaim_announced(self, conn: psycopg.Connection[Any]) -> int:
        """:meth:`reclaim` inside ``conn``'s transaction: how many went back to pending."""
        back = self._return_expired(conn, RECLAIM_BATCH)
        self._db.announce(conn, len(back.pending))
        return len(back.pending)

    def _return_expired(self, conn: psycopg.Connection[Any], limit: int) -> Reclaimed:
        """Return up to ``limit`` expired claims; the first statement of each reading
        transaction, so it also keeps the transaction's plans on the indexes
        (:data:`~.queries._INDEX_PLANS`: without statistics the planner scanned)."""
        conn.execute(self._db.queries.index_plans)
        back = Reclaimed.from_rows(
            conn.execute(self._db.queries.reclaim, {"limit": limit}).fetchall())
        back.log(self._db.schema, self._db.table)
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
        with self._db.transaction() as conn:
            rows = conn.execute(
                self._db.queries.complete,
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
        with self._db.transaction() as conn:
            rows = conn.execute(
                self._db.queries.fail,
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
        with self._db.transaction() as conn:
            rows = conn.execute(
                self._db.queries.release, ([p[0] for p in pairs], [p[1] for p in pairs])
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
        with self._db.transaction() as conn:
            rows = conn.execute(
                self._db.queries.extend, (ttl, [p[0] for p in pairs], [p[1] for p in pairs])
            ).fetchall()
        return len(rows)

    def backlog_size(self, *, cap: int | None = None) -> int:
        """Tasks a claim could take now: pending plus expired claims. Read from the indexes,
        after returning expired claims to pending and announcing them (see :meth:`reclaim`).

        0 does not mean drained while others still hold live claims: their workers may
        die and the tasks come back; ask :meth:`claims_in_progress`.

        :param cap: count pending tasks only up to this many (``cap=1``: is there any?).
            A full count reads every pending entry of the claim index, so its cost grows
            with the backlog; a capped one reads at most ``cap``. None: count them all.
        """
        checks.validate_cap(cap)
        with self._db.transaction() as conn:
            self._reclaim_announced(conn)
            row = conn.execute(self._db.queries.backlog, {"cap": cap}).fetchone()
        return int(row[0]) if row else 0

    def claims_in_progress(self) -> ClaimsInProgress:
        """Live claims (not yet expired) and when the first of them expires, after returning
        expired claims to pending (see :meth:`reclaim`).

        A drain that finds the backlog empty but claims in progress should wait (linger)
        until ``next_expiry_s`` or a notification, rather than report itself done: if those
        workers died, their tasks come back then and are announced.
        """
        with self._db.transaction() as conn:
            self._reclaim_announced(conn)
            row = conn.execute(self._db.queries.live_claims).fetchone()
        if row is None:
            return ClaimsInProgress(0, None, None)
        return ClaimsInProgress(int(row[0]), row[1], row[2])
