"""Values that cross the router's API: requests, decisions, settings."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Priority = Literal["bulk", "hot"]
Outcome = Literal["ok", "rate_limited", "error", "unknown_model", "abandoned"]
OnBudget = Literal["overflow", "wait"]

__all__ = [
    "ROUTING_FIELDS",
    "Admission",
    "AdmitRequest",
    "OnBudget",
    "Outcome",
    "Priority",
    "Rejection",
    "RouterSettings",
    "Wait",
    "as_on_budget",
    "as_priority",
]


def as_priority(value: object, field_name: str = "priority") -> Priority:
    """``value`` as a :data:`Priority`, or a ValueError naming ``field_name``."""
    if value not in ("bulk", "hot"):
        raise ValueError(f"{field_name}: {value!r} must be 'hot' or 'bulk'")
    return value


def as_on_budget(value: object, field_name: str = "on_budget") -> OnBudget:
    """``value`` as an :data:`OnBudget`, or a ValueError naming ``field_name``."""
    if value not in ("overflow", "wait"):
        raise ValueError(f"{field_name}: {value!r} must be 'overflow' or 'wait'")
    return value


class RouterSettings(BaseModel):
    """How one router namespace behaves; every caller of a namespace should agree.

    :param namespace: the Redis key namespace (one router = one namespace).
    :param lease_ttl_s: a lease not heartbeated or completed within this frees its slot.
    :param guard_ms: extra time an admission stays in a window, covering the variation of
        the delay between a call's send and the backend counting it (costs guard/window of
        utilisation). The least guard: each model's grows with its window (``guard_share``)
        and with what the engine learns (measured delays, 429s; docs/engine.md, "Guard").
    :param guard_share: the base guard of a model is at least this share of its window.
    :param max_wait_ms: the longest wait ``admit`` tells a caller to sleep before retrying
        when only a release (announced on the channel) could make room.
    :param starve_ms: after waiting this long, a request holds back capacity from requests
        ranked behind it, so large prompts are not passed forever.
    :param waiter_ttl_ms: a waiter that does not retry within its wait plus this drops out.
    :param cooldown_ms: cooldown after a 429 that carried no Retry-After.
    :param recovery_share: after Redis lost its data (found when the quotas are restored
        from their durable source), each model is admitted at this share of its quota for
        one window + guard: the calls sent just before the loss are unknown to the new
        Redis, so 0 (the default: a pause of one window) keeps every window within its
        target; a share s lets a window that straddles the loss reach up to (1 + s) times
        the target.
    :param hot_share: while hot requests wait, they hold back from bulk requests at most
        this share of each model's limits (calls: of the smaller of rpm and concurrency,
        rounded up; at least one hot request's need), so bulk keeps the rest: hot work is
        admitted first within its share and bulk is never starved by a stream of hot work.
        1 lets hot waiters hold back all they need.
    :param replicas_to_wait: after an admission or a quota change, wait (Redis ``WAIT``)
        until this many replicas hold it before handing it to the caller, so a failover
        loses no admission a caller acted on; fewer in ``replica_wait_ms`` raises
        :class:`~airflow_llm_router.exceptions.ReplicationLagError`. 0 (the default): no
        wait. For one node with replicas or a Sentinel-watched master, not a cluster.
    :param replica_wait_ms: how long such a wait may take.
    :param breaker_failures: consecutive errors that open a model's circuit breaker.
    :param breaker_open_ms: how long an open breaker refuses calls before a probe.
    :param jitter: waits are stretched by up to this fraction, so waiters don't stampede.
    :param http_hop_ms: the HTTP API's allowance for its callers' hop (``/schedule``'s answer
        travelling back, then the call travelling to the backend): each admission it makes
        counts in its model's window from this long after it was made
        (:attr:`AdmitRequest.hop_ms`). Costs hop/window of the throughput of HTTP
        admissions only. A caller that reports ``arrival_delay_s`` on ``/complete`` also
        widens the model's guard to what it measured.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = "default"
    lease_ttl_s: float = Field(30.0, gt=0)
    guard_ms: int = Field(50, ge=0)
    guard_share: float = Field(0.01, ge=0, le=0.25)
    max_wait_ms: int = Field(2000, gt=0)
    starve_ms: int = Field(10_000, ge=0)
    waiter_ttl_ms: int = Field(5000, gt=0)
    cooldown_ms: int = Field(1000, gt=0)
    breaker_failures: int = Field(5, ge=1)
    breaker_open_ms: int = Field(30_000, gt=0)
    jitter: float = Field(0.1, ge=0, le=1)
    recovery_share: float = Field(0.0, ge=0, le=1)
    hot_share: float = Field(0.8, gt=0, le=1)
    replicas_to_wait: int = Field(0, ge=0, le=16)
    replica_wait_ms: int = Field(100, gt=0, le=60_000)
    http_hop_ms: int = Field(250, ge=0, le=60_000)


#: The :class:`RouterSettings` that decide which model a request takes and when it waits:
#: the routing a deployment gets. A benchmark leaves each at its default, so what it
#: measures is what a deployment that sets none gets (tests/unit/bench/test_as_deployed.py).
#: Not among them: the namespace; the margins that keep each window under its target
#: (``guard_ms``, ``guard_share``, ``http_hop_ms``); what a failure costs (``lease_ttl_s``,
#: ``replicas_to_wait``, ``replica_wait_ms``).
ROUTING_FIELDS: frozenset[str] = frozenset({
    "max_wait_ms", "starve_ms", "waiter_ttl_ms", "cooldown_ms", "breaker_failures",
    "breaker_open_ms", "jitter", "recovery_share", "hot_share",
})


@dataclass(frozen=True)
class AdmitRequest:
    """One prompt asking for capacity: give ``estimated_tokens`` (input + output) or
    ``input_tokens`` alone, and the engine adds the chosen model's learned output per call
    (the 95th percentile of its recent calls, ``expected_output_tokens`` before any; with a
    ``kind``, of that kind's recent calls on the model once it has a few).

    :param estimated_tokens: input + output tokens expected (settled later with actuals).
    :param estimated_output_tokens: the output share of the estimate, when known; needed only
        for models with separate input/output limits (without it the whole estimate counts
        against each).
    :param input_tokens: the prompt's tokens, when the output is left to the engine.
    :param models: ``None`` for any model, else the allowed models.
    :param ordered: with ``models``, try them in order (overflow); otherwise share by weight.
    :param priority: ``"hot"`` is admitted ahead of ``"bulk"``.
    :param request_id: makes a retried admission idempotent; also the prompt's place in the
        wait queue, so reuse it for every retry of the same prompt.
    :param kind: the task's type (``"summary"``, ``"essay"``): the engine learns output
        tokens and latency per model and kind from the calls admitted with it (bounded:
        32 kinds per model, each forgotten a day after it was last seen). ``None``: the
        model's estimates only.
    :param on_budget: when a model it tries is over its spend budget (or the router's
        total: docs/budgets.md), ``"overflow"`` (the default) lets the request go to a
        later model of ``models`` still in budget; ``"wait"`` makes an ordered request wait
        for that model's budget period to reset rather than take a model it prefers less
        (e.g. a cheaper one). Requests for any model or shared by weight treat every
        allowed model alike, so an over-budget one is skipped either way.
    :param hop_ms: the call may reach the backend up to this long after the admission is
        answered, beyond what the guard covers (``guard_ms``): its window entry counts from
        then, so no later admission, whoever makes it, can share the call's backend window
        over the limit. The HTTP API sets it for every ``/schedule``
        (:attr:`RouterSettings.http_hop_ms`): the answer travels back to the caller before
        the call is sent. 0 (the default) for a caller that sends its call at once.
    :param hedges_late: the caller hedges a late call: once it runs past
        :attr:`Admission.late_after_s` (and nothing of its backlog is left to admit), it
        sends the prompt to another allowed model as well and keeps the first answer (the
        drain's solver does, with ``hedge_late_calls``). The engine then judges a slow
        model by its late point plus a fast model's call, not by its 99th percentile, so
        slow models take work closer to the backlog's end (docs/engine.md, "Finish-time
        choice").
    """

    estimated_tokens: int | None = None
    estimated_output_tokens: int | None = None
    input_tokens: int | None = None
    models: tuple[str, ...] | None = None
    ordered: bool = True
    priority: Priority = "bulk"
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    kind: str | None = None
    on_budget: OnBudget = "overflow"
    hop_ms: int = 0
    hedges_late: bool = False


@dataclass(frozen=True)
class Admission:
    """Capacity reserved on ``model``; call it now and then ``complete(lease_id, ...)``."""

    model: str
    lease_id: str
    lease_ttl_s: float
    request_id: str
    reused: bool = False
    #: seconds after admission past which a call on ``model`` is late (its mean latency
    #: plus one mean deviation, about the 85th percentile), or None when nothing is known
    #: of its latency: a caller may then send the prompt elsewhere too and keep the first
    #: answer (``solver/hedging.py``; the call that loses runs on to its end, as the
    #: provider counts it until then, and is settled as any call)
    late_after_s: float | None = None


@dataclass(frozen=True)
class Wait:
    """No capacity now: retry after ``retry_after_ms`` (already jittered) or on a release."""

    retry_after_ms: int
    reason: str
    request_id: str


@dataclass(frozen=True)
class Rejection:
    """No allowed model could ever admit the request (``reason`` says why)."""

    reason: str
    detail: str
    request_id: str

    def message(self) -> str:
        return {
            "unknown_model": f"model {self.detail!r} has no quota: set one with set_quota(), "
            "or remove it from the request's models",
            "too_large": f"the estimate exceeds the token limit of every allowed model "
            f"(e.g. {self.detail!r}): split the prompt or raise the model's tpm",
            "all_disabled": "every allowed model is disabled: enable one or allow others",
            "too_costly": f"the estimated cost exceeds the whole spend budget of every "
            f"allowed model or the router's total (e.g. {self.detail!r}): split the prompt "
            "or raise the budget",
            "no_models": "no model has a quota yet: set one with set_quota()",
        }.get(self.reason, f"rejected: {self.reason} {self.detail}")
