"""The task store's records: what a task is as it enters, as a worker holds it, as its row
reads, and what the claim cycle writes back and reports.

Plain frozen dataclasses (no database), so the operator, the trigger and the HTTP layer can
build, serialise and compare them without a connection. The backlog as operators see it
(summary, dead letters, requeue) has its own records in :mod:`.backlog_records`; what
callers hand to the store is checked in :mod:`.task_checks` and :mod:`.call_checks`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from airflow_llm_router.names import DEFAULT_KIND

log = logging.getLogger("airflow_llm_router.store")

PENDING = "pending"
CLAIMED = "claimed"
SOLVED = "solved"
DEAD = "dead"
STATUSES: tuple[str, ...] = (PENDING, CLAIMED, SOLVED, DEAD)

HOT = "hot"
BULK = "bulk"
PRIORITIES: tuple[str, ...] = (HOT, BULK)

#: ``last_error`` is diagnostics, not a log: anything longer is cut to this many characters.
MAX_ERROR_CHARS = 4000


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


@dataclass(frozen=True)
class ClaimedTask:
    """One task handed to a worker by :meth:`TaskStore.claim`.

    ``claim_token`` is the proof of this claim: every write back (complete, fail, release,
    extend) must present it, and is refused once the task was claimed again by someone else.
    The object round-trips through :meth:`to_dict`/:meth:`from_dict` as plain JSON, so it
    can travel in Airflow trigger kwargs and XCom.
    """

    id: int
    prompt: str
    kind: str
    priority: str
    allowed_models: tuple[str, ...] | None
    attempts: int
    max_attempts: int
    claim_token: str
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)
    #: over its preferred model's spend budget: "overflow" to the next model, or "wait"
    on_budget: str = "overflow"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; ``allowed_models`` becomes a list (or None)."""
        data = asdict(self)
        data["allowed_models"] = (
            list(self.allowed_models) if self.allowed_models is not None else None
        )
        return data

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ClaimedTask:
        """From a row of the claim statements (``queries.CLAIMED_COLUMNS``, in field order)."""
        return cls(id=row[0], prompt=row[1], kind=row[2], priority=row[3],
                   allowed_models=tuple(row[4]) if row[4] is not None else None,
                   attempts=row[5], max_attempts=row[6], claim_token=row[7],
                   metadata=row[8] or {}, on_budget=row[9])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClaimedTask:
        """Inverse of :meth:`to_dict`; unknown keys are ignored so newer producers stay readable."""
        models = data.get("allowed_models")
        return cls(
            id=int(data["id"]),
            prompt=str(data["prompt"]),
            kind=str(data["kind"]),
            priority=str(data["priority"]),
            allowed_models=tuple(models) if models is not None else None,
            attempts=int(data["attempts"]),
            max_attempts=int(data["max_attempts"]),
            claim_token=str(data["claim_token"]),
            metadata=dict(data.get("metadata") or {}),
            on_budget=str(data.get("on_budget", "overflow")),
        )


@dataclass(frozen=True)
class TaskRow:
    """A full row of the tasks table, as returned by :meth:`TaskStore.get`."""

    id: int
    prompt: str
    kind: str
    priority: str
    allowed_models: tuple[str, ...] | None
    status: str
    attempts: int
    max_attempts: int
    claim_token: str | None
    claimed_by: str | None
    claim_expires_at: datetime | None
    answer: str | None
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    solved_at: datetime | None
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)
    on_budget: str = "overflow"

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> TaskRow:
        """From a row of ``queries.ROW_COLUMNS`` (in field order)."""
        values = list(row)
        values[4] = tuple(values[4]) if values[4] is not None else None
        return cls(*values)

    def to_dict(self) -> dict[str, Any]:
        """A dict of the row; timestamps stay ``datetime`` objects."""
        data = asdict(self)
        data["allowed_models"] = (
            list(self.allowed_models) if self.allowed_models is not None else None
        )
        return data


@dataclass(frozen=True)
class TaskResult:
    """An answer to write back with :meth:`TaskStore.complete_many`."""

    task_id: int
    claim_token: str
    answer: str
    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class TaskFailure:
    """A failed attempt to write back with :meth:`TaskStore.fail_many`."""

    task_id: int
    claim_token: str
    error: str
    retryable: bool = True
    #: the model whose call failed (None: no call was made); recorded in ``model``, so
    #: the dead letters of a model are found by it
    model: str | None = None


@dataclass(frozen=True)
class ClaimsInProgress:
    """Live claims, as :meth:`TaskStore.claims_in_progress` reports them: others are still
    working on ``count`` tasks, and the first of those claims lapses at ``next_expires_at``
    (``next_expiry_s`` from now, by the database's clock) unless its worker extends it or
    finishes. An empty backlog with claims in progress is not a drained backlog."""

    count: int
    next_expires_at: datetime | None
    next_expiry_s: float | None


@dataclass(frozen=True)
class Reclaimed:
    """What one pass of returning expired claims did: the tasks back in pending, and how
    many were dead-lettered because their last attempt expired."""

    pending: frozenset[int]
    dead: int

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[Any]]) -> Reclaimed:
        """From the ``(id, status)`` rows the reclaim statement returns."""
        pending: set[int] = set()
        dead = 0
        for task_id, status in rows:
            if status == PENDING:
                pending.add(int(task_id))
            else:
                dead += 1
        return cls(frozenset(pending), dead)

    def log(self, schema: str, table: str) -> None:
        """Say what the pass did (counts only, never a prompt)."""
        if self.pending:
            log.info("Returned %d expired claims to pending in %s.%s", len(self.pending),
                     schema, table)
        if self.dead:
            log.warning("Dead-lettered %d tasks whose last claim expired in %s.%s", self.dead,
                        schema, table)

