"""What the solver is given and what it gives back, as JSON-safe values.

They travel through Airflow (trigger kwargs, trigger events, XCom), so each has
``to_dict``/``from_dict``; prompts travel, but are never logged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from airflow_llm_router.engine.types import OnBudget, Priority, as_on_budget, as_priority

__all__ = ["ResultStatus", "SolveItem", "SolveResult"]

ResultStatus = Literal["solved", "failed", "unfinished"]


@dataclass(frozen=True)
class SolveItem:
    """One prompt to solve.

    :param key: the caller's id for it (task id in the store, index for direct prompts).
    :param request_id: stable per attempt of the task (e.g. task id + claim token); each
        call's request id adds the solver run's mark and the call's number, so a retried
        admission finds its lease again and a restarted run counts its calls afresh.
    :param kind: the task's type; the engine learns output tokens per model and kind
        (``AdmitRequest.kind``). None: the model's estimates only.
    :param on_budget: over a model's spend budget, ``"overflow"`` to the next allowed
        model or ``"wait"`` for the budget (``AdmitRequest.on_budget``).
    :param options: call options passed to the backend protocol (a stored task's
        ``metadata.llm_call``, :mod:`airflow_llm_router.llm_call`); None: none.
    """

    key: str
    prompt: str
    request_id: str
    models: tuple[str, ...] | None = None
    ordered: bool = True
    priority: Priority = "bulk"
    max_output_tokens: int | None = None
    kind: str | None = None
    on_budget: OnBudget = "overflow"
    options: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        as_priority(self.priority)
        as_on_budget(self.on_budget)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["models"] = list(self.models) if self.models is not None else None
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SolveItem:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in doc.items() if k in known}
        if data.get("models") is not None:
            data["models"] = tuple(data["models"])
        return cls(**data)


@dataclass(frozen=True)
class SolveResult:
    """How one prompt ended: ``solved``; ``failed`` (``retryable`` says whether another
    attempt could help); or ``unfinished`` (time ran out before it was admitted). ``calls``
    counts every call made for it, a hedge's too."""

    key: str
    status: ResultStatus
    answer: str | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    retryable: bool = True
    calls: int = 0
    rate_limited: int = 0
    #: whether a late call of the prompt was hedged: sent to a second model as well
    hedged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SolveResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})
