"""What producers hand to the store task by task, and what an enqueue answers.

:meth:`TaskStore.enqueue` takes one priority, kind and model list for a whole batch (a DAG
enqueuing its own prompts); callers that gather tasks from many sources (the HTTP ingestion
endpoint) have different settings per task, so :meth:`TaskStore.enqueue_tasks` takes
:class:`NewTask` objects. Both write through one statement and answer :class:`Enqueued`.

Idempotency: a task may carry the producer's own key. A key already in the table is not
inserted again; its existing id is answered and marked as a duplicate, so a producer that
retries a request whose answer it lost gets the same ids back and adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_llm_router.exceptions import TaskStoreError
from airflow_llm_router.names import DEFAULT_KIND

__all__ = ["Enqueued", "NewTask", "match_ids"]


@dataclass(frozen=True)
class NewTask:
    """One task for :meth:`TaskStore.enqueue_tasks`; the fields mean what the keyword
    arguments of :meth:`TaskStore.enqueue` mean, for this task alone.

    :param idempotency_key: the producer's name for this task (at most 200 printable
        characters), or None. A key names one task for the life of the table.
    :param on_budget: over its preferred model's spend budget, ``"overflow"`` to the next
        allowed model or ``"wait"`` until the budget allows it (docs/budgets.md).
    """

    prompt: str
    priority: str = "bulk"
    allowed_models: Sequence[str] | None = None
    kind: str = DEFAULT_KIND
    max_attempts: int = 5
    metadata: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    on_budget: str = "overflow"


@dataclass(frozen=True)
class Enqueued:
    """Ids in the order the tasks were given; ``duplicates[i]`` is True where the task's
    idempotency key already named a task, whose id ``ids[i]`` is (nothing was written)."""

    ids: list[int]
    duplicates: list[bool]

    @property
    def created(self) -> int:
        """How many tasks this enqueue added."""
        return self.duplicates.count(False)


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
