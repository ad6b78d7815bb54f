"""Value objects of the task store and the validation of what callers hand to it.

Everything here is pure Python (no database), so the operator and the trigger can build,
check and serialise these objects without a connection.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from airflow_llm_router.exceptions import TaskValidationError

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


# --- validation -------------------------------------------------------------------------


def validate_claim_args(n: object, worker_id: object, claim_ttl_s: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise TaskValidationError("n", f"must be an integer >= 0, got {n!r}")
    if not isinstance(worker_id, str) or not worker_id.strip():
        raise TaskValidationError(
            "worker_id", "must be a non-empty string naming the claimer, e.g. the task instance"
        )
    validate_ttl(claim_ttl_s)


def validate_ttl(claim_ttl_s: object) -> float:
    if (
        isinstance(claim_ttl_s, bool)
        or not isinstance(claim_ttl_s, (int, float))
        or not math.isfinite(claim_ttl_s)
        or claim_ttl_s <= 0
    ):
        raise TaskValidationError(
            "claim_ttl_s", f"must be a positive number of seconds, got {claim_ttl_s!r}"
        )
    return float(claim_ttl_s)


def validate_task_id(field_name: str, task_id: object) -> int:
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise TaskValidationError(field_name, f"must be an integer task id, got {task_id!r}")
    return task_id


def validate_token(field_name: str, token: object) -> str:
    """Claim tokens are UUIDs; a malformed one is a caller bug, not a stale claim."""
    try:
        return str(uuid.UUID(str(token)))
    except ValueError as err:
        raise TaskValidationError(
            field_name, f"is not a claim token (a UUID from claim()), got {token!r}"
        ) from err


def validate_tokens(field_name: str, count: object) -> int | None:
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise TaskValidationError(field_name, f"must be None or an integer >= 0, got {count!r}")
    return count


def clean_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL; replace it rather than fail a whole chunk."""
    return value.replace("\x00", "\ufffd")


def clean_error(error: object) -> str:
    """Make an error message storable: a string, no NUL, at most ``MAX_ERROR_CHARS``."""
    text = clean_text(str(error))
    if len(text) > MAX_ERROR_CHARS:
        cut = len(text) - MAX_ERROR_CHARS
        text = f"{text[:MAX_ERROR_CHARS]}... [{cut} more characters truncated]"
    return text


def claim_pairs(claims: object, field_name: str = "claims") -> list[tuple[int, str]]:
    """Normalise claims given as ``{id: token}``, ``[(id, token)]`` or ``[ClaimedTask]``."""
    if isinstance(claims, Mapping):
        items: Iterable[object] = list(claims.items())
    elif isinstance(claims, Iterable) and not isinstance(claims, (str, bytes)):
        items = claims
    else:
        raise TaskValidationError(
            field_name, "must be a dict {task_id: claim_token}, (id, token) pairs or ClaimedTasks"
        )
    pairs: list[tuple[int, str]] = []
    seen: set[int] = set()
    for i, item in enumerate(items):
        if isinstance(item, ClaimedTask):
            task_id, token = item.id, item.claim_token
        elif isinstance(item, tuple) and len(item) == 2:
            task_id, token = item
        else:
            raise TaskValidationError(
                f"{field_name}[{i}]", "must be an (id, claim_token) pair or a ClaimedTask"
            )
        task_id = validate_task_id(f"{field_name}[{i}].task_id", task_id)
        if task_id in seen:
            raise TaskValidationError(
                f"{field_name}[{i}]", f"task {task_id} appears twice; give each task once"
            )
        seen.add(task_id)
        pairs.append((task_id, validate_token(f"{field_name}[{i}].claim_token", token)))
    return pairs
