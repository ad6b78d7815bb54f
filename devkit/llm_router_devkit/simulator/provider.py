"""The simulated Models Backend, without HTTP: admit a call, run it, count everything.

Admission (:meth:`SimulatedBackend.admit`) is synchronous and happens at arrival, so one
``/batch`` admits each item independently in order, exactly as separate ``/single`` calls
arriving at the same instant would be. Running an admitted call (:meth:`SimulatedBackend.run`)
only sleeps: the app runs on one event loop, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from llm_router_devkit.simulator import protocol as p
from llm_router_devkit.simulator.connections import ConnectionCounter
from llm_router_devkit.simulator.counters import MAX_TIMELINE_BUCKETS, ModelCounters
from llm_router_devkit.simulator.limits import ModelLimiter
from llm_router_devkit.simulator.profile import ProviderLimits, SimulatorProfile
from llm_router_devkit.simulator.workload import Draw, Fault, draw, draw_fault

log = logging.getLogger(__name__)

# Counters summed over models in ``/stats`` ``totals``.
_TOTALS = (
    "requests", "accepted", "completed", "rejected_429", "errors", "timeouts", "truncated",
    "tokens_accepted",
)


class UnknownModelError(KeyError):
    """The backend has no model by that name."""


@dataclass(frozen=True)
class Admission:
    """An accepted call, ready to run."""

    model: str
    draw: Draw
    fault: Fault
    call_id: int
    duration_s: float  # wall-clock seconds the call will take


@dataclass(frozen=True)
class Rejection:
    """A call refused with 429."""

    model: str
    reason: str
    retry_after_s: float  # wall-clock seconds


@dataclass(frozen=True)
class Outcome:
    """How a call ended: ``status`` is 200, 500 or 504.

    ``truncated``: a 200 whose body must reach the client cut short (the HTTP layer cuts it).
    """

    status: int
    body: dict[str, Any]
    truncated: bool = False


class SimulatedBackend:
    """Per-model limiters, counters and fault attempts for one simulated backend.

    :param profile: the models and the clock scale; its limits are copied, then changed only
        through :meth:`set_limits`.
    :param clock: wall-clock seconds; inject a fake one in tests.
    """

    def __init__(
        self, profile: SimulatorProfile, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.profile = profile
        self.clock = clock
        self.started_at = clock()
        #: the TCP connections callers opened (counted by the app's middleware)
        self.connections = ConnectionCounter()
        self.epoch = self.started_at
        self._models = {m.name: m for m in profile.models}
        window = profile.scaled_window_s
        self.limiters = {
            m.name: ModelLimiter(limits=m.limits, window_s=window, clock=clock)
            for m in profile.models
        }
        self.counters = {m.name: ModelCounters() for m in profile.models}
        # (model, prompt digest) -> accepted attempts so far; drives deterministic faults.
        self._attempts: dict[tuple[str, bytes], int] = {}
        self.calls = {"single": 0, "batch": 0, "batch_items": 0, "chat_completions": 0,
                      "messages": 0}

    def arrival_delay_s(self, now: float) -> float:
        """The delay the profile's arrival jitter gives a call reaching the simulator at
        ``now``: drawn anew (from the seed) for each quarter window, so calls sent a window
        apart meet different delays, as a queue that fills and drains gives them."""
        jitter = self.profile.arrival_jitter_s
        if jitter <= 0:
            return 0.0
        slot = math.floor((now - self.started_at) / (self.profile.scaled_window_s / 4))
        return random.Random(self.profile.seed * 1_000_003 + slot).uniform(0, jitter)

    async def arrive(self) -> float:
        """Wait as the profile's arrival jitter says; returns when the arrival counts
        (epoch ms), for the ``x-received-ms`` header."""
        delay = self.arrival_delay_s(self.clock())
        if delay > 0:
            await asyncio.sleep(delay)
        return time.time() * 1000

    def limit_headers(self, model: str, received_ms: float) -> dict[str, str]:
        """What the provider says after an arrival: when it was counted, and its limits'
        headroom if the profile asks for rate-limit headers (OpenAI's spelling)."""
        out = {"x-received-ms": f"{received_ms:.1f}"}
        if self.profile.rate_limit_headers and model in self.limiters:
            out.update(self.limiters[model].headroom(self.clock()))
        return out

    def headroom(self, model: str) -> dict[str, tuple[int, int, float]]:
        """A model's limit, remaining and seconds to the next room, for ``"requests"`` and
        ``"tokens"``, if the profile asks for rate-limit headers (else nothing): for a face
        that spells its headers its own way."""
        if not self.profile.rate_limit_headers or model not in self.limiters:
            return {}
        return self.limiters[model].headroom_numbers(self.clock())

    # -- calls ---------------------------------------------------------------------------

    def admit(
        self, model: str, prompt: str, max_output_tokens: int | None = None,
        extra_input_tokens: int = 0,
    ) -> Admission | Rejection:
        """Decide at arrival whether the provider takes this call (raises UnknownModelError).

        :param extra_input_tokens: input beyond the prompt (a system message), charged but
            not part of the draw: a prompt costs and lasts the same on every face.
        """
        spec = self._models.get(model)
        if spec is None:
            raise UnknownModelError(model)
        d = draw(self.profile, spec, prompt, max_output_tokens)
        if extra_input_tokens:
            d = replace(d, input_tokens=d.input_tokens + extra_input_tokens)
        attempt_key = (model, d.key)
        attempt = self._attempts.get(attempt_key, 0)
        fault = draw_fault(self.profile, d.key, attempt)
        duration = self._duration(d, fault)
        now = self.clock()
        decision = self.limiters[model].offer(d.total_tokens, duration, now=now)
        counters = self.counters[model]
        counters.arrival(now - self.epoch, d.total_tokens, decision.reason)
        if decision.reason is not None or decision.call_id is None:
            log.debug("429 model=%s reason=%s", model, decision.reason)
            return Rejection(model, decision.reason or "", decision.retry_after_s)
        self._attempts[attempt_key] = attempt + 1
        counters.input_tokens_accepted += d.input_tokens
        counters.output_tokens_accepted += d.output_tokens
        return Admission(model, d, fault, decision.call_id, duration)

    async def run(self, admission: Admission) -> Outcome:
        """Sleep the call's (scaled) duration, free its slot, and say how it ended."""
        counters = self.counters[admission.model]
        try:
            await asyncio.sleep(admission.duration_s)
        finally:
            self.limiters[admission.model].release(admission.call_id)
        if admission.fault is Fault.ERROR:
            counters.errors += 1
            return Outcome(500, {p.ERROR: p.ERR_INTERNAL, p.DETAIL: "simulated provider error"})
        if admission.fault is Fault.TIMEOUT:
            counters.timeouts += 1
            return Outcome(504, {p.ERROR: p.ERR_TIMEOUT, p.DETAIL: "simulated provider timeout"})
        d = admission.draw
        body = {
            p.MODEL: admission.model,
            p.ANSWER: f"[{admission.model}] simulated answer {d.key.hex()[:12]}",
            p.USAGE: {p.INPUT_TOKENS: d.input_tokens, p.OUTPUT_TOKENS: d.output_tokens},
            p.LATENCY_S: admission.duration_s,
        }
        if admission.fault is Fault.TRUNCATED:
            counters.truncated += 1
            return Outcome(200, body, truncated=True)
        counters.completed += 1
        counters.latency_sum_s += admission.duration_s
        return Outcome(200, body)

    def lost_with_batch(self, admission: Admission) -> None:
        """Recount a completed answer as truncated: its ``/batch`` body was cut.

        One body carries every item of a batch, so cutting it for one item loses them all;
        the provider still charged each, and ``completed`` must count only readable answers.
        """
        counters = self.counters[admission.model]
        counters.completed -= 1
        counters.latency_sum_s -= admission.duration_s
        counters.truncated += 1

    def _duration(self, d: Draw, fault: Fault) -> float:
        profile = self.profile
        if fault is Fault.ERROR:
            return profile.error_delay_s / profile.time_scale
        if fault is Fault.TIMEOUT:
            return profile.timeout_s / profile.time_scale
        return d.latency_s * profile.slowdown / profile.time_scale

    # -- limits and measurement -----------------------------------------------------------

    def limits(self, model: str) -> ProviderLimits:
        """A model's current provider limits (raises UnknownModelError)."""
        if model not in self.limiters:
            raise UnknownModelError(model)
        return self.limiters[model].limits

    def set_limits(self, model: str, changes: dict[str, int | None]) -> ProviderLimits:
        """Change some of a model's limits; they apply from the next arrival."""
        current = self.limits(model)
        updated = ProviderLimits.model_validate({**current.model_dump(), **changes})
        self.limiters[model].limits = updated
        log.info("limits of %s set to %s", model, updated.model_dump())
        return updated

    def reset(self) -> None:
        """Start a new measurement: zero counters, windows, peaks and fault attempts.

        Windows are forgotten too so the next run starts with a full quota; fault attempts so
        a rerun of the same workload meets the same faults. Calls in flight stay in flight.
        """
        self.epoch = self.clock()
        self.counters = {name: ModelCounters() for name in self.counters}
        for limiter in self.limiters.values():
            limiter.reset()
        self._attempts.clear()
        self.calls = dict.fromkeys(self.calls, 0)
        self.connections.reset()

    def stats(self) -> dict[str, Any]:
        """Everything ``GET /stats`` reports."""
        now = self.clock()
        models: dict[str, Any] = {}
        totals: dict[str, int] = {}
        for name, counters in self.counters.items():
            limiter = self.limiters[name]
            peaks = limiter.peaks
            entry = counters.as_dict()
            entry.update(
                {
                    "peak_offered_requests_in_window": peaks.offered_requests,
                    "peak_offered_tokens_in_window": peaks.offered_tokens,
                    "peak_accepted_requests_in_window": peaks.accepted_requests,
                    "peak_accepted_tokens_in_window": peaks.accepted_tokens,
                    "in_flight": limiter.in_flight,
                    "peak_concurrency": peaks.concurrency,
                    "limits": limiter.limits.model_dump(),
                }
            )
            models[name] = entry
            for key in _TOTALS:
                totals[key] = totals.get(key, 0) + entry[key]
            totals["violations"] = totals.get("violations", 0) + entry["violations"]["total"]
        arrivals = [c.times[0] for c in self.counters.values() if c.times]
        return {
            "uptime_s": now - self.started_at,
            "since_reset_s": now - self.epoch,
            # the first call's arrival, seconds after the reset (None: no call yet)
            "first_arrival_s": min(arrivals) if arrivals else None,
            "time_scale": self.profile.time_scale,
            "window_s": self.profile.window_s,
            "scaled_window_s": self.profile.scaled_window_s,
            "seed": self.profile.seed,
            "calls": dict(self.calls),
            "connections": self.connections.as_dict(),
            "totals": totals,
            "models": models,
        }

    def timeline(self, bucket_s: float) -> dict[str, Any]:
        """Arrivals since the last reset, bucketed by ``bucket_s`` wall-clock seconds."""
        elapsed = self.clock() - self.epoch
        n_buckets = max(1, int(elapsed / bucket_s) + 1)
        if n_buckets > MAX_TIMELINE_BUCKETS:
            raise ValueError(
                f"bucket_s too small: {n_buckets} buckets (max {MAX_TIMELINE_BUCKETS})"
            )
        return {
            "bucket_s": bucket_s,
            "bucket_provider_s": bucket_s * self.profile.time_scale,
            "n_buckets": n_buckets,
            "since_reset_s": elapsed,
            "models": {
                name: {
                    **counters.timeline(bucket_s, n_buckets),
                    "limits": self.limiters[name].limits.model_dump(),
                }
                for name, counters in self.counters.items()
            },
        }
