"""Value objects of the task store: claimed tasks, rows, results, failures, claim counts.

Everything here is pure Python (no database), so the operator and the trigger can build
and serialise these objects without a connection. Checks of what callers hand to the store
are in :mod:`.checks` and :mod:`.validation`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; ``allowed_models`` becomes a list (or None)."""
        data = asdict(self)
        data["allowed_models"] = (
            list(self.allowed_models) if self.allowed_models is not None else None
        )
        return data

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
