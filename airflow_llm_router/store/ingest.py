"""Ingestion, one part of the task store: tasks enter the table here, checked, in one
statement, and announced on commit.

:meth:`Ingestion.enqueue` takes one priority, kind and model list for a whole batch (a DAG
enqueuing its own prompts); callers that gather tasks from many sources (the HTTP ingestion
endpoint) have different settings per task, so :meth:`Ingestion.enqueue_tasks` takes
:class:`~.records.NewTask` objects. Both are checked into the same columns
(:mod:`.task_checks`), write through one statement and answer :class:`~.records.Enqueued`.

Idempotency: a task may carry the producer's own key. A key already in the table is not
inserted again; its existing id is answered and marked as a duplicate, so a producer that
retries a request whose answer it lost gets the same ids back and adds nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_llm_router.exceptions import TaskStoreError
from airflow_llm_router.names import DEFAULT_KIND
from airflow_llm_router.store.connection import StoreConnection
from airflow_llm_router.store.records import Enqueued, NewTask
from airflow_llm_router.store.task_checks import (
    DEFAULT_MAX_PROMPT_CHARS,
    EnqueueRows,
    validate_enqueue,
    validate_max_prompt_chars,
    validate_tasks,
)

__all__ = ["Ingestion", "match_ids"]

# The store's logger: enqueues are logged where they always were.
log = logging.getLogger("airflow_llm_router.store.task_store")


class Ingestion:
    """Enqueue into the table of ``connection``.

    :param max_prompt_chars: longest prompt accepted, in characters.
    """

    def __init__(self, connection: StoreConnection, *,
                 max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> None:
        self.max_prompt_chars = validate_max_prompt_chars(max_prompt_chars)
        self._db = connection

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
        """Add tasks in one statement and notify the store's channel on commit.

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
            values, its index (``prompts[3]``); nothing is written. See
            ``store/task_checks.py`` for what is refused.
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
        db = self._db
        with db.transaction() as conn:
            rows = conn.execute(db.queries.enqueue, rows_in.params()).fetchall()
            written = {row[1] for row in rows}
            skipped = [key for key in keys if key is not None and key not in written]
            existing = dict(conn.execute(db.queries.enqueue_keys, (skipped,)).fetchall()
                            ) if skipped else {}
            db.announce(conn, len(rows))
        result = match_ids(keys, rows, existing)
        log.debug("Enqueued %d tasks into %s.%s (%d already present by idempotency key)",
                  result.created, db.schema, db.table, len(skipped))
        return result


def match_ids(keys: Sequence[str | None], inserted: Iterable[tuple[int, str | None]],
              existing: Mapping[str, int]) -> Enqueued:
    """Put the ids of one enqueue back in task order.

    :param keys: each task's idempotency key (None for none), in task order.
    :param inserted: ``(id, key)`` of the rows the statement wrote. Rows without a key take
        ids from one sequence in task order, so sorted they line up with the keyless tasks.
    :param existing: ids of the keys that were already present.
    :raises TaskStoreError: if a key was neither written nor found (the row vanished
        between the two statements: nothing in the package deletes tasks).
    """
    by_key: dict[str, int] = {}
    keyless: list[int] = []
    for task_id, key in inserted:
        if key is None:
            keyless.append(task_id)
        else:
            by_key[key] = task_id
    keyless.sort()
    fresh = iter(keyless)
    ids: list[int] = []
    duplicates: list[bool] = []
    for key in keys:
        if key is None:
            ids.append(next(fresh))
            duplicates.append(False)
        elif key in by_key:
            ids.append(by_key[key])
            duplicates.append(False)
        elif key in existing:
            ids.append(existing[key])
            duplicates.append(True)
        else:
            raise TaskStoreError(
                "a task's idempotency key conflicted but its task is gone; retry the enqueue")
    return Enqueued(ids, duplicates)
