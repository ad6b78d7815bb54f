"""Check what callers send the router and encode it as the Lua scripts read it.

Kept apart from :mod:`~airflow_llm_router.engine.core` (the policy) because it is plain
validation with no state: the solver's admitter calls :func:`encode_request` on its own to
fail one bad request alone, before it is queued.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from airflow_llm_router.engine.quota import validate_model_name
from airflow_llm_router.engine.types import AdmitRequest, Outcome, as_on_budget
from airflow_llm_router.names import kind_problem
from airflow_llm_router.tokens import whole_number

__all__ = ["MAX_HOP_MS", "Completion", "encode_completion", "encode_request"]

#: The longest hop an admission may allow for (:attr:`AdmitRequest.hop_ms`): a minute.
MAX_HOP_MS = 60_000

_OUTCOMES = ("ok", "rate_limited", "error", "unknown_model", "abandoned")


@dataclass(frozen=True)
class Completion:
    """The end of one call: actual usage and how it went.

    :param input_tokens: actual input tokens, or ``None`` to keep the estimate.
    :param output_tokens: actual output tokens, or ``None`` to keep the estimate.
    :param outcome: ``"ok"``, ``"rate_limited"`` (a 429), ``"error"`` (5xx, timeout),
        ``"unknown_model"`` (the backend does not have the model: its breaker opens at
        once) or ``"abandoned"`` (the call was never made: its caller gave up between the
        admission and the send; frees the slot, keeps the estimate in the window, says
        nothing of the model's health or latency). A call that was sent is settled when it ends,
        even one whose answer is no longer wanted: the provider counts it in flight
        until then.
    :param retry_after_s: the backend's Retry-After, for ``rate_limited``.
    :param arrival_delay_s: when the backend said the call reached it, less when it was
        sent (both wall clocks); widens the model's guard (docs/engine.md, "Guard").
    :param hold_s: the backend said it has no room for this long (its rate-limit headers:
        nothing remaining until the reset), on any outcome: the model cools down, no 429
        needed.
    :param announced_rpm: the backend's stated request limit per window (rate-limit
        headers); caps the effective limit while stated. ``announced_tpm``: its tokens.
    :param latency_s: how long an ``ok`` call took, from its send to its answer, by the
        caller's clock. The model's learned latency takes it instead of the time from the
        admission to this settlement, which also counts the waits to send the call and to
        settle it: in a burst of hundreds of calls those are seconds, and they are the
        burst's, not the model's (docs/engine.md, "Finish-time choice").
    :param received_at_s: when the backend says it counted the call (its wall clock, epoch
        seconds: ``x-received-ms`` / 1000). The call's window entry then counts from there,
        not from its send plus the model's guard (docs/engine.md, "Guard"): the guard
        covers the delays of calls not answered yet.
    """

    lease_id: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    outcome: Outcome = "ok"
    retry_after_s: float | None = None
    arrival_delay_s: float | None = None
    hold_s: float | None = None
    announced_rpm: int | None = None
    announced_tpm: int | None = None
    latency_s: float | None = None
    received_at_s: float | None = None


def encode_request(r: AdmitRequest) -> list[Any]:
    """``r`` as the admit script reads it.

    :raises ValueError: naming the field of ``r`` that is invalid (a caller that queues
        requests checks each on its own with this, so one bad request fails alone).
    """
    models = _encode_models(r)
    hot = 1 if r.priority == "hot" else 0
    ordered = 1 if r.ordered else 0
    if not isinstance(r.request_id, str) or not r.request_id or not r.request_id.isprintable():
        raise ValueError(f"request_id: {r.request_id!r} must be non-empty printable text "
                         "(it is kept in the lease's record)")
    kind = _optional_tail(r)
    if r.input_tokens is not None:
        if r.estimated_tokens is not None:
            raise ValueError("input_tokens: give either estimated_tokens or input_tokens")
        if not whole_number(r.input_tokens) or r.input_tokens < 0:
            raise ValueError(f"input_tokens: {r.input_tokens!r} is not a whole number >= 0")
        return [r.request_id, hot, -1, r.input_tokens, -1, ordered, models, *kind]
    if not whole_number(r.estimated_tokens) or r.estimated_tokens < 1:
        raise ValueError(
            f"estimated_tokens: {r.estimated_tokens!r} is not a whole number >= 1 "
            "(estimate input + output tokens of the prompt)"
        )
    out = r.estimated_output_tokens
    if out is not None and (not whole_number(out) or not 0 <= out <= r.estimated_tokens):
        raise ValueError(
            f"estimated_output_tokens: {out!r} must be a whole number between 0 and "
            "estimated_tokens, or None"
        )
    total = r.estimated_tokens
    inp, outp = (total, total) if out is None else (total - out, out)
    return [r.request_id, hot, total, inp, outp, ordered, models, *kind]


def _optional_tail(r: AdmitRequest) -> list[str | int | None]:
    """The admit script's optional fields after the models, as short as they can be:
    the kind (null: none), the budget choice (1: wait), the hop (ms), hedging (1)."""
    if r.kind is not None:
        problem = kind_problem(r.kind)
        if problem:
            raise ValueError(f"kind: {problem}")
    as_on_budget(r.on_budget)
    if not whole_number(r.hop_ms) or not 0 <= r.hop_ms <= MAX_HOP_MS:
        raise ValueError(f"hop_ms: {r.hop_ms!r} is not a whole number of ms between 0 and "
                         f"{MAX_HOP_MS}")
    if not isinstance(r.hedges_late, bool):
        raise ValueError(f"hedges_late: {r.hedges_late!r} is not True or False")
    tail: list[str | int | None] = [r.kind, 1 if r.on_budget == "wait" else 0, r.hop_ms,
                                    1 if r.hedges_late else 0]
    while tail and not tail[-1]:
        tail.pop()
    return tail


def _encode_models(r: AdmitRequest) -> list[str] | int:
    if r.priority not in ("bulk", "hot"):
        raise ValueError(f"priority: {r.priority!r} is not 'bulk' or 'hot'")
    if r.models is None:
        return 0
    if not r.models:
        raise ValueError("models: an empty list allows nothing; pass None for any model")
    return [validate_model_name(m) for m in r.models]


#: the oldest receipt told apart (ms ago): older ones count from their send anyway
_OLDEST_RECEIPT_MS = 86_400_000


def _ms_ago(at_s: float) -> int:
    """How many whole ms ago, now, the epoch time ``at_s`` was: the script runs later, so
    its own time less this is no earlier than ``at_s``. A time ahead of ours (a backend
    clock ahead) reads as now; one more than a day ago as a day ago."""
    ago_s = time.time() - at_s
    if not ago_s > 0:
        return 0
    return math.floor(min(ago_s * 1000, _OLDEST_RECEIPT_MS))


def encode_completion(c: Completion) -> list[Any]:
    if c.outcome not in _OUTCOMES:
        raise ValueError(f"outcome: {c.outcome!r} is not one of {', '.join(_OUTCOMES)}")
    for name, value in (("input_tokens", c.input_tokens), ("output_tokens", c.output_tokens)):
        # the settle script would fail on a bool, and with it every settlement merged
        # into the same script call
        if value is not None and (not whole_number(value) or value < 0):
            raise ValueError(f"{name}: {value!r} must be a whole number >= 0 or None")
    got = c.received_at_s
    if got is not None and (isinstance(got, bool) or not isinstance(got, int | float)
                            or not math.isfinite(got)):
        raise ValueError(f"received_at_s: {got!r} must be epoch seconds or None")
    lat = c.latency_s
    if lat is not None and (isinstance(lat, bool) or not isinstance(lat, int | float)
                            or not 0 <= lat < math.inf):
        raise ValueError(f"latency_s: {lat!r} must be a number of seconds >= 0 or None")
    known = c.input_tokens is not None and c.output_tokens is not None
    retry_ms = 0 if c.retry_after_s is None else max(0, math.ceil(c.retry_after_s * 1000))
    item = [
        c.lease_id,
        c.input_tokens if known else -1,
        c.output_tokens if known else -1,
        c.outcome,
        retry_ms,
    ]
    said = (
        -1 if c.arrival_delay_s is None else max(0, math.ceil(c.arrival_delay_s * 1000)),
        0 if c.hold_s is None else max(0, math.ceil(c.hold_s * 1000)),
        -1 if c.announced_rpm is None else max(0, int(c.announced_rpm)),
        -1 if c.announced_tpm is None else max(0, int(c.announced_tpm)),
        -1 if lat is None else round(lat * 1000),
        -1 if got is None else _ms_ago(got),
    )
    if said != (-1, 0, -1, -1, -1, -1):
        item.extend(said)
    return item
