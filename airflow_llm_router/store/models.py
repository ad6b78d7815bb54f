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


# --- the backlog as operators see it (TaskStore.backlog_summary, dead_tasks, requeue) -------

#: Most rows a status is counted up to in :class:`BacklogSummary` (each count reads at most
#: this many index entries, so the summary stays cheap however long the history grows);
#: a status at the cap is reported with ``capped`` and its count is a lower bound.
COUNT_CAP = 100_000
#: The throughput of :class:`BacklogSummary` counts tasks solved over this many seconds.
THROUGHPUT_WINDOW_S = 300
#: Most dead tasks one :meth:`TaskStore.requeue` call moves (by ids or by filter); the
#: answer says how many matching ones remain, to requeue with the next call.
REQUEUE_MAX = 10_000
#: Most dead tasks one page of :meth:`TaskStore.dead_tasks` returns.
DEAD_PAGE_MAX = 500
#: Deepest ``offset`` :meth:`TaskStore.dead_tasks` pages to (offset paging reads the
#: skipped rows; narrow the filter instead of paging further).
DEAD_OFFSET_MAX = 100_000
#: ``last_error`` as the dead-letter list shows it: cut to this many characters.
ERROR_PREVIEW_CHARS = 300


@dataclass(frozen=True)
class BacklogSummary:
    """The backlog at one instant, by the database's clock.

    :param counts: tasks per status and priority (``counts["pending"]["hot"]``), every
        status and priority present; exact unless the status is in ``capped``.
    :param capped: statuses with at least :data:`COUNT_CAP` tasks (their counts are lower
        bounds).
    :param oldest_pending_age_s: seconds since the oldest pending task was enqueued (the
        first of each lane in claim order); None with nothing pending.
    :param solved_recently: tasks solved in the last ``window_s`` seconds.
    :param window_s: the span of ``solved_recently`` (:data:`THROUGHPUT_WINDOW_S`).
    """

    counts: dict[str, dict[str, int]]
    capped: tuple[str, ...]
    oldest_pending_age_s: float | None
    solved_recently: int
    window_s: int = THROUGHPUT_WINDOW_S

    @property
    def throughput_per_min(self) -> float:
        """Tasks solved per minute over the last ``window_s`` seconds."""
        return self.solved_recently * 60.0 / self.window_s

    @property
    def remaining(self) -> int:
        """Tasks not yet done: pending and claimed (a claimed task is being worked on, but
        it is not solved until its answer is written)."""
        return sum(self.counts[PENDING].values()) + sum(self.counts[CLAIMED].values())

    @property
    def eta_s(self) -> float | None:
        """Seconds until :attr:`remaining` is solved at the recent throughput; None when
        nothing was solved recently (no rate to extrapolate) or nothing remains."""
        if self.solved_recently == 0 or self.remaining == 0:
            return None
        return self.remaining * self.window_s / self.solved_recently

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: counts, totals per status, age, throughput and ETA."""
        return {
            "counts": {s: dict(p) for s, p in self.counts.items()},
            "totals": {s: sum(p.values()) for s, p in self.counts.items()},
            "capped": list(self.capped),
            "oldest_pending_age_s": self.oldest_pending_age_s,
            "solved_recently": self.solved_recently,
            "window_s": self.window_s,
            "throughput_per_min": round(self.throughput_per_min, 2),
            "remaining": self.remaining,
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
        }


@dataclass(frozen=True)
class DeadTask:
    """A dead-lettered task as the dead-letter list shows it: never its prompt.

    ``last_error`` is cut to :data:`ERROR_PREVIEW_CHARS`; ``model`` is the model recorded
    on the row (often None: a failed call does not record one) and ``allowed_models`` the
    models the task may use (None: any).
    """

    id: int
    kind: str
    priority: str
    attempts: int
    max_attempts: int
    last_error: str | None
    model: str | None
    allowed_models: tuple[str, ...] | None
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON; timestamps in ISO 8601."""
        data = asdict(self)
        data["allowed_models"] = (
            list(self.allowed_models) if self.allowed_models is not None else None)
        data["created_at"] = self.created_at.isoformat()
        data["updated_at"] = self.updated_at.isoformat()
        return data


@dataclass(frozen=True)
class DeadPage:
    """One page of dead tasks, newest first, and how many match the filter in all
    (``total`` counts up to :data:`COUNT_CAP`; ``total_capped`` says it reached it)."""

    tasks: list[DeadTask]
    total: int
    total_capped: bool
    limit: int
    offset: int


@dataclass(frozen=True)
class DeadFilter:
    """Which dead tasks a list or a requeue means (None: no condition).

    :param kind: the task kind, exactly.
    :param model: tasks whose recorded ``model`` is this one or whose ``allowed_models``
        names it.
    :param error_contains: a substring of ``last_error``, case-insensitive.
    """

    kind: str | None = None
    model: str | None = None
    error_contains: str | None = None

    def params(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "error": self.error_contains}


@dataclass(frozen=True)
class Requeued:
    """What one :meth:`TaskStore.requeue` did.

    :param ids: the tasks moved back to pending, ascending.
    :param skipped: ids asked for that were not dead (unknown, or no longer dead).
    :param remaining: dead tasks still matching the filter (0 when requeuing by ids);
        requeue again to move them (at most :data:`REQUEUE_MAX` per call).
    """

    ids: list[int]
    skipped: list[int]
    remaining: int

    def to_dict(self) -> dict[str, Any]:
        return {"requeued": len(self.ids), "ids": self.ids, "skipped": self.skipped,
                "remaining": self.remaining, "max_per_call": REQUEUE_MAX}


@dataclass(frozen=True)
class RequeueRecord:
    """One requeue as its log keeps it: who, when, how (``source``), what was asked
    (``request``: ids or the filter) and what it did."""

    id: int
    at: datetime
    actor: str
    source: str
    request: dict[str, Any]
    requeued: int
    skipped: int
    remaining: int

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["at"] = self.at.isoformat()
        return data
