"""Backpressure advice: how many solvers saturate the quotas, a window's burst included.
No I/O.

Per model m with window W (s), quota rpm/tpm, tokens per call t and latency L (s):

- ``rate_per_s = min(rpm / W, tpm / (W * t))`` (and ``input_tpm`` / ``output_tpm`` with the
  input and output tokens per call, when set): the admission rate the window limits allow;
  ``binding`` names the smallest of them. ``rate_per_s * W`` is the binding limit in calls
  per window (rpm, or tpm / t, ...).
- ``steady_in_flight = min(max_concurrency, rate_per_s * L)``: calls that must be in flight
  to keep that rate on average (Little's law). When the concurrency cap is the smaller, it
  binds (``binding = "concurrency"``) and ``sustainable_rate_per_s = max_concurrency / L``.
- ``needed_in_flight = min(max_concurrency, rate_per_s * W * max(1, L / W))``: calls that
  must be in flight to send a window's whole quota at once. The sliding window admits its
  quota the moment it opens, and the engine does not smooth it out (a window's quota is
  there to be used at once); a model whose calls take less than the window (L < W) then has all
  of a window's calls in flight together, far more than the steady ``rate_per_s * L``, and
  with fewer slots the burst trickles out and the next window opens that much later. From
  ``L >= W`` on it is Little's law again, so ``needed_in_flight >= steady_in_flight``.
  A model with no concurrency cap (a huge ``max_concurrency``) needs its window's calls.
- Without any latency (no prior, nothing observed) a model is assumed to need its whole
  ``max_concurrency``, both figures (``binding`` still names the rate limit): an
  overestimate only makes solvers wait.
- A disabled model needs nothing (``binding = "disabled"``).

``rate_per_s``, ``binding`` and ``sustainable_rate_per_s`` (and the totals'
``capacity_per_s``) stay the steady rate: the burst changes how many slots a window's start
needs, not how many calls a window admits.

Totals: ``in_flight_needed`` is the sum of ``needed_in_flight``; ``solvers =
clamp(ceil(in_flight_needed / per_solver_in_flight), 1, max_solvers)``, but never more than
the backlog can keep busy, ``ceil(backlog / per_solver_in_flight)`` (0 for an empty backlog).

``backpressure = waiting / (waiting + in_flight)`` in [0, 1]: the share of the callers
currently asking for capacity that are queued rather than calling (0 when nobody is);
near 1, the quotas, not the solvers, are what limits the drain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.stats import ModelStats, RouterStats

__all__ = ["Advice", "ModelAdvice", "ModelLoad", "advise", "advise_from_stats", "loads_from_stats"]

#: Float noise allowed before rounding a solver count up (10.000000001 / 10 is still 1).
_EPS = 1e-9


@dataclass(frozen=True)
class ModelLoad:
    """What the advice needs to know of one model (from :meth:`RouterClient.stats`).

    :param latency_s: seconds per call (observed, or the quota's prior), None if unknown.
    :param tokens_per_call: mean tokens (input + output) per call.
    :param input_tokens_per_call: mean input tokens per call (for ``input_tpm``); None:
        ``tokens_per_call``.
    :param output_tokens_per_call: mean output tokens per call (for ``output_tpm``); None:
        ``tokens_per_call``.
    """

    quota: ModelQuota
    latency_s: float | None
    tokens_per_call: float
    input_tokens_per_call: float | None = None
    output_tokens_per_call: float | None = None
    in_flight: int = 0


@dataclass(frozen=True)
class ModelAdvice:
    """One model's share of the advice; rates in calls per second.

    ``needed_in_flight`` is what the solvers are sized for (a window's burst included);
    ``steady_in_flight`` the Little's-law figure for the steady rate alone, reported so
    the two can be compared.
    """

    model: str
    enabled: bool
    latency_s: float | None
    tokens_per_call: float
    rate_per_s: float
    binding: str
    needed_in_flight: float
    sustainable_rate_per_s: float
    in_flight: int
    steady_in_flight: float


@dataclass(frozen=True)
class Advice:
    """The parallelism that saturates the quotas, and how hard callers are pushing."""

    models: dict[str, ModelAdvice]
    backlog: int
    waiting: int
    in_flight: int
    in_flight_needed: float
    per_solver_in_flight: int
    max_solvers: int
    solvers: int
    capacity_per_s: float
    backpressure: float

    @property
    def any_enabled(self) -> bool:
        return any(m.enabled for m in self.models.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (an XCom value). Built field by field: every value is a scalar, and
        ``dataclasses.asdict`` deep-copies each one (a third of ``/advice`` over 1,000
        models)."""
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        doc["models"] = {k: {f.name: getattr(v, f.name) for f in _MODEL_FIELDS}
                         for k, v in self.models.items()}
        return doc


_MODEL_FIELDS = fields(ModelAdvice)


def _model_advice(name: str, load: ModelLoad) -> ModelAdvice:
    q = load.quota
    tokens = max(0.0, load.tokens_per_call)
    if not q.enabled:
        return ModelAdvice(name, False, load.latency_s, tokens, 0.0, "disabled", 0.0, 0.0,
                           load.in_flight, 0.0)
    w = q.window_s
    inp = tokens if load.input_tokens_per_call is None else load.input_tokens_per_call
    out = tokens if load.output_tokens_per_call is None else load.output_tokens_per_call
    limits = {"rpm": q.rpm / w}
    for limit, per_window, per_call in (("tpm", q.tpm, tokens), ("input_tpm", q.input_tpm, inp),
                                        ("output_tpm", q.output_tpm, out)):
        if per_window is not None and per_call > 0:
            limits[limit] = per_window / (w * per_call)
    binding = min(limits, key=lambda k: limits[k])  # ties: the first (rpm before tpm)
    rate = limits[binding]
    cap = float(q.max_concurrency)
    latency = load.latency_s
    if latency is None:
        return ModelAdvice(name, True, latency, tokens, rate, binding, cap, rate,
                           load.in_flight, cap)
    elapsed = max(0.0, latency)
    if rate * elapsed > cap:
        binding, sustainable = "concurrency", cap / elapsed
    else:
        sustainable = rate
    steady = min(cap, rate * elapsed)
    # a window's calls sent at once, or from L >= W on Little's law (max: float noise)
    burst = min(cap, rate * w * max(1.0, elapsed / w))
    return ModelAdvice(name, True, latency, tokens, rate, binding, burst,  # >= steady
                       sustainable, load.in_flight, steady)


def advise(
    models: Mapping[str, ModelLoad],
    *,
    backlog: int,
    waiting: int = 0,
    per_solver_in_flight: int = 100,
    max_solvers: int = 16,
) -> Advice:
    """The advice for these models and this backlog (see the module's docstring)."""
    for name, value in (("backlog", backlog), ("waiting", waiting)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: {value!r} must be a whole number >= 0")
    for name, value in (("per_solver_in_flight", per_solver_in_flight),
                        ("max_solvers", max_solvers)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: {value!r} must be a whole number >= 1")
    per_model = {name: _model_advice(name, load) for name, load in sorted(models.items())}
    needed = sum(m.needed_in_flight for m in per_model.values())
    in_flight = sum(m.in_flight for m in per_model.values())
    if backlog == 0:
        solvers = 0
    else:
        solvers = min(max(1, math.ceil(needed / per_solver_in_flight - _EPS)), max_solvers)
        solvers = min(solvers, math.ceil(backlog / per_solver_in_flight))
    asking = waiting + in_flight
    return Advice(
        models=per_model,
        backlog=backlog,
        waiting=waiting,
        in_flight=in_flight,
        in_flight_needed=needed,
        per_solver_in_flight=per_solver_in_flight,
        max_solvers=max_solvers,
        solvers=solvers,
        capacity_per_s=sum(m.sustainable_rate_per_s for m in per_model.values()),
        backpressure=waiting / asking if asking else 0.0,
    )


def _mix(m: ModelStats, kinds: Mapping[str, int]) -> tuple[float, float | None]:
    """Output tokens and latency (ms) per call of model m on a backlog of this mix of task
    kinds: each kind's own estimates where the model has learned them, else the model's."""
    total = sum(kinds.values())
    output, latency, timed = 0.0, 0.0, 0
    for kind, count in kinds.items():
        k = m.kinds.get(kind)
        out = k.output_estimate if k is not None and k.output_estimate is not None \
            else m.output_estimate
        lat = k.latency_ms if k is not None and k.latency_ms is not None else m.latency_ms
        output += count * out
        if lat is not None:
            latency += count * lat
            timed += count
    return output / total, (latency / timed if timed else m.latency_ms)


def loads_from_stats(stats: RouterStats, input_tokens_per_call: float = 0,
                     backlog_kinds: Mapping[str, int] | None = None) -> dict[str, ModelLoad]:
    """Each model's load from its stats: tokens per call of its current window when it has
    requests in it (estimates until settled), else its learned output tokens per call plus
    ``input_tokens_per_call`` (a cold-start guess: too low errs towards more solvers).

    ``backlog_kinds`` (tasks waiting per kind): the backlog's mix decides instead, each
    kind weighing its own learned output and latency on the model (``ModelStats.kinds``;
    the model's own where it has not learned the kind), with ``input_tokens_per_call``.
    """
    if backlog_kinds is not None:
        bad = {k: v for k, v in backlog_kinds.items() if not isinstance(v, int) or v < 0}
        if bad or not any(backlog_kinds.values()):
            raise ValueError(f"backlog_kinds: {dict(backlog_kinds)!r} must map kinds to whole "
                             "numbers >= 0, at least one above 0")
    loads = {}
    for name, m in stats.models.items():
        if m.quota is None:
            continue
        if backlog_kinds is not None:
            output, latency_ms = _mix(m, backlog_kinds)
            guess = float(input_tokens_per_call)
            loads[name] = ModelLoad(m.quota, None if latency_ms is None else latency_ms / 1000,
                                    guess + output, guess, output, in_flight=m.in_flight)
            continue
        if m.requests > 0:
            n = m.requests
            per_call = (m.tokens / n, m.input_tokens / n, m.output_tokens / n)
        else:
            guess = float(input_tokens_per_call)
            per_call = (guess + m.output_estimate, guess, float(m.output_estimate))
        latency = None if m.latency_ms is None else m.latency_ms / 1000
        loads[name] = ModelLoad(m.quota, latency, *per_call, in_flight=m.in_flight)
    return loads


def advise_from_stats(
    stats: RouterStats,
    *,
    backlog: int,
    per_solver_in_flight: int = 100,
    max_solvers: int = 16,
    input_tokens_per_call: float = 0,
    backlog_kinds: Mapping[str, int] | None = None,
) -> Advice:
    """:func:`advise` on the engine's stats (its waiting requests included); see
    :func:`loads_from_stats` for ``backlog_kinds``."""
    return advise(loads_from_stats(stats, input_tokens_per_call, backlog_kinds),
                  backlog=backlog,
                  waiting=stats.waiting, per_solver_in_flight=per_solver_in_flight,
                  max_solvers=max_solvers)
