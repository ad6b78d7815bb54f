"""Live usage per model, as read from the engine (the router's view, not the backend's)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from airflow_llm_router.engine.quota import ModelQuota

__all__ = ["KindStats", "ModelStats", "RouterStats", "SpendStats"]


@dataclass(frozen=True)
class KindStats:
    """What the engine learned of one task kind on one model."""

    #: output tokens reserved per call of this kind (95th percentile of its recent calls)
    output_estimate: int | None
    #: latency per call (ms, EWMA), None before a call of it was released
    latency_ms: float | None
    #: outputs observed so far
    observed: int
    #: since the kind was last seen (ms)
    seen_ms_ago: int


@dataclass(frozen=True)
class SpendStats:
    """Spend in the current budget period, micro-dollars (docs/budgets.md)."""

    #: the budget of the period, None when none is set (spend is tracked all the same)
    budget_micro_usd: int | None
    #: settled cost of the calls completed in the period (actual usage x price)
    settled_micro_usd: int
    #: estimated cost reserved by the period's calls still in flight
    reserved_micro_usd: int
    period_s: float
    #: when the period began (ms, the engine's clock); it ends period_s later
    period_start_ms: int

    @property
    def committed_micro_usd(self) -> int:
        """What admission counts against the budget: settled + reserved."""
        return self.settled_micro_usd + self.reserved_micro_usd

    @classmethod
    def from_reply(cls, doc: Any) -> SpendStats | None:
        if not isinstance(doc, dict):
            return None
        committed, reserved = int(doc["committed"]), int(doc["reserved"])
        return cls(budget_micro_usd=None if doc.get("budget") is None else int(doc["budget"]),
                   settled_micro_usd=committed - reserved, reserved_micro_usd=reserved,
                   period_s=int(doc["period_ms"]) / 1000,
                   period_start_ms=int(doc["period_start_ms"]))


@dataclass(frozen=True)
class ModelStats:
    """One model's current window and counters since the namespace was created."""

    model: str
    quota: ModelQuota | None
    requests: int
    tokens: int
    input_tokens: int
    output_tokens: int
    in_flight: int
    output_estimate: int
    cooldown_ms: int
    breaker: str
    counters: dict[str, int]
    #: why the breaker is open or half open: ``"errors"`` (errors in a row) or
    #: ``"unknown_model"`` (the backend does not have the model); None when closed
    breaker_cause: str | None = None
    #: learned latency per call (ms), or the quota's prior before any call; None without.
    latency_ms: float | None = None
    #: the share of the quota admission holds the model to, learned from the provider's
    #: 429s (1.0: the quota itself; see docs/engine.md, "Effective limit").
    limit_share: float = 1.0
    #: below a share of 1, the limits in force: ``rpm``, ``tpm``, ``max_concurrency`` and,
    #: where the quota has them, ``input_tpm``/``output_tpm``; None at the quota.
    effective: dict[str, int] | None = None
    #: how long past its window an admission keeps counting (ms): the base guard, or more
    #: while the engine has learned that calls reach the provider late (docs/engine.md,
    #: "Guard"); 0 from an engine that predates it.
    guard_ms: int = 0
    #: what the engine learned per task kind (:class:`KindStats`), for kinds admitted with
    #: ``AdmitRequest.kind`` and seen in the last day.
    kinds: dict[str, KindStats] = field(default_factory=dict)
    #: by how many tokens a settled call exceeded its reservation, on average (an EWMA,
    #: 0 for calls within it); added to every reservation the engine estimates, so the
    #: calls in flight together cover their expected overrun
    excess_tokens: float = 0.0
    #: the largest overrun of one call lately (halving every minute since): admission keeps
    #: it free in the token window for requests whose output the engine estimates, so the
    #: one long answer among a full window's calls does not take it over the provider's limit
    excess_max_tokens: float = 0.0
    #: the output tail: the length one answer in about 700 exceeds, from a lognormal fit of
    #: the last 64 outputs (at least 3x the estimate before 64 were seen); admission keeps
    #: what it writes past a request's reservation free in the token window, like
    #: ``excess_max_tokens`` and with the larger of both
    output_tail_tokens: float = 0.0
    #: a priced model's spend in its current budget period; None when it has no price
    spend: SpendStats | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe. Built field by field: ``dataclasses.asdict`` deep-copies every value
        (the quota's fields too, only to replace them), which made this most of ``/stats``
        over 1,000 models."""
        doc = {f.name: getattr(self, f.name) for f in _MODEL_FIELDS}
        doc["quota"] = self.quota.model_dump() if self.quota else None
        doc["counters"] = dict(self.counters)
        doc["effective"] = None if self.effective is None else dict(self.effective)
        doc["kinds"] = {k: _flat(v) for k, v in self.kinds.items()}
        doc["spend"] = None if self.spend is None else _flat(self.spend)
        return doc


def _flat(record: KindStats | SpendStats) -> dict[str, Any]:
    """A dataclass of scalars as a dict, without ``asdict``'s deep copies."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


_MODEL_FIELDS = fields(ModelStats)

_EFFECTIVE_NAMES = {"rpm": "rpm", "tpm": "tpm", "conc": "max_concurrency",
                    "itpm": "input_tpm", "otpm": "output_tpm"}


def _effective(doc: dict[str, Any] | None) -> dict[str, int] | None:
    if not doc:
        return None
    return {_EFFECTIVE_NAMES[k]: int(v) for k, v in doc.items() if k in _EFFECTIVE_NAMES}


def _kinds(doc: Any) -> dict[str, KindStats]:
    if not isinstance(doc, dict):
        return {}
    return {
        kind: KindStats(
            output_estimate=None if k.get("output_estimate") is None
            else int(k["output_estimate"]),
            latency_ms=None if k.get("latency_ms") is None else float(k["latency_ms"]),
            observed=int(k.get("observed") or 0),
            seen_ms_ago=int(k.get("seen_ms_ago") or 0),
        )
        for kind, k in sorted(doc.items())
    }


@dataclass(frozen=True)
class RouterStats:
    """Every model's stats, the number of waiting requests and the engine's clock (ms).

    ``waiting`` counts the requests told to wait whose caller may still come back: one that
    does not ask again within its retry wait plus ``waiter_ttl_ms`` stops counting."""

    now_ms: int
    waiting: int
    models: dict[str, ModelStats]
    #: every priced model's spend together, in the router-wide budget's period (a UTC day
    #: without a budget; see ``set_budget``)
    total_spend: SpendStats | None = None

    @classmethod
    def from_reply(cls, doc: dict[str, Any], quotas: dict[str, ModelQuota]) -> RouterStats:
        models = {}
        for name, m in sorted((doc.get("models") or {}).items()):
            models[name] = ModelStats(
                model=name,
                quota=quotas.get(name),
                requests=int(m["requests"]),
                tokens=int(m["tokens"]),
                input_tokens=int(m["input_tokens"]),
                output_tokens=int(m["output_tokens"]),
                in_flight=int(m["in_flight"]),
                output_estimate=int(m["output_estimate"]),
                cooldown_ms=int(m["cooldown_ms"]),
                breaker=str(m["breaker"]),
                breaker_cause=None if m.get("breaker_cause") is None
                else str(m["breaker_cause"]),
                counters={k: int(v) for k, v in (m.get("counters") or {}).items()},
                latency_ms=None if m.get("latency_ms") is None else float(m["latency_ms"]),
                limit_share=float(m.get("share", 1.0)),
                effective=_effective(m.get("effective")),
                guard_ms=int(m.get("guard_ms") or 0),
                kinds=_kinds(m.get("kinds")),
                excess_tokens=float(m.get("excess") or 0.0),
                excess_max_tokens=float(m.get("excess_max") or 0.0),
                output_tail_tokens=float(m.get("output_tail") or 0.0),
                spend=SpendStats.from_reply(m.get("spend")),
            )
        return cls(now_ms=int(doc["now"]), waiting=int(doc["waiting"]), models=models,
                   total_spend=SpendStats.from_reply(doc.get("total")))

    def to_dict(self) -> dict[str, Any]:
        return {
            "now_ms": self.now_ms,
            "waiting": self.waiting,
            "models": {k: v.to_dict() for k, v in self.models.items()},
            "total_spend": None if self.total_spend is None else _flat(self.total_spend),
        }
