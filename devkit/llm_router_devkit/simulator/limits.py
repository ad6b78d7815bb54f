"""Provider limits over a strict sliding window, and the peak traffic seen in any window.

A window of length ``W`` ending at ``t`` holds the events with time in ``(t - W, t]``: an event
at ``t0`` stops counting at exactly ``t0 + W``. The provider refuses a request when, counting
it, the window ending at its arrival would hold more than ``rpm`` accepted requests or
``tpm`` accepted tokens, or when ``max_concurrency`` accepted calls are in flight. This is the
strict reading a router must honour; a per-minute token bucket would let twice as much through.

Each window is a deque of ``(t, tokens)`` with a running count and token sum, so an arrival costs
amortised O(1) however many thousands of requests per second come in. The peak over all windows
is found incrementally: the busiest window always ends at some arrival, so it is the maximum,
over arrivals, of the window ending at that arrival.

Times are wall-clock seconds from an injected clock (``time.monotonic`` in the app), so the
window here is already divided by ``time_scale``.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from llm_router_devkit.simulator.profile import ProviderLimits

#: Reasons for a 429, also the keys of ``violations`` in ``/stats``.
RPM = "rpm"
TPM = "tpm"
CONCURRENCY = "concurrency"
REASONS = (RPM, TPM, CONCURRENCY)

# Never tell a client to retry sooner than this (seconds): a zero would invite a hot loop.
_MIN_RETRY_S = 0.001


class SlidingWindow:
    """Events in ``(now - window_s, now]`` with their count and token sum."""

    __slots__ = ("_events", "tokens", "window_s")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._events)

    def evict(self, now: float) -> None:
        """Drop events at or before ``now - window_s``: they no longer count."""
        events = self._events
        horizon = now - self.window_s
        while events and events[0][0] <= horizon:
            self.tokens -= events.popleft()[1]

    def add(self, now: float, tokens: int) -> None:
        """Record an event at ``now`` (callers pass non-decreasing times)."""
        self._events.append((now, tokens))
        self.tokens += tokens

    def clear(self) -> None:
        self._events.clear()
        self.tokens = 0

    def wait_for_count(self, now: float, limit: int) -> float:
        """Seconds until the window holds fewer than ``limit`` events (0 if it already does)."""
        excess = len(self._events) - limit
        if excess < 0:
            return 0.0
        return self._events[excess][0] + self.window_s - now

    def wait_for_tokens(self, now: float, limit: int, extra: int) -> float:
        """Seconds until ``extra`` more tokens fit under ``limit`` (a window if they never fit)."""
        if extra > limit:
            return self.window_s
        excess = self.tokens + extra - limit
        if excess <= 0:
            return 0.0
        freed = 0
        for t, tokens in self._events:
            freed += tokens
            if freed >= excess:
                return t + self.window_s - now
        return self.window_s  # unreachable when the sums are consistent


@dataclass(frozen=True)
class Decision:
    """The provider's answer to one arrival.

    :param reason: ``None`` when accepted, else the first limit hit (``rpm``, ``tpm`` or
        ``concurrency``, checked in that order).
    :param retry_after_s: wall-clock seconds until every limit that refused it has room.
    :param call_id: set when accepted; pass it to :meth:`ModelLimiter.release`.
    """

    accepted: bool
    reason: str | None = None
    retry_after_s: float = 0.0
    call_id: int | None = None


@dataclass
class PeakCounters:
    """Peaks over every sliding window since the last reset."""

    offered_requests: int = 0
    offered_tokens: int = 0
    accepted_requests: int = 0
    accepted_tokens: int = 0
    concurrency: int = 0


@dataclass
class ModelLimiter:
    """One model's admission state: accepted and offered windows, calls in flight, peaks.

    Not thread-safe: the app calls it from one event loop, with no ``await`` between a check
    and its bookkeeping, which is what makes each decision atomic.
    """

    limits: ProviderLimits
    window_s: float
    clock: Callable[[], float]
    peaks: PeakCounters = field(default_factory=PeakCounters)

    def __post_init__(self) -> None:
        self._accepted = SlidingWindow(self.window_s)
        self._offered = SlidingWindow(self.window_s)
        # call id -> expected wall-clock end, to tell a refused caller when a slot frees up.
        self._in_flight: dict[int, float] = {}
        self._ids = itertools.count(1)

    @property
    def in_flight(self) -> int:
        """Accepted calls not yet released."""
        return len(self._in_flight)

    def offer(
        self, tokens: int, expected_duration_s: float = 0.0, now: float | None = None
    ) -> Decision:
        """Admit or refuse one arrival costing ``tokens`` (input + output), charged now.

        :param expected_duration_s: wall-clock seconds the call will run if accepted; only
            used to compute ``Retry-After`` for callers refused on concurrency.
        :param now: the arrival time; read from the clock when omitted.
        """
        if now is None:
            now = self.clock()
        self._record_offered(now, tokens)
        accepted = self._accepted
        accepted.evict(now)
        reason: str | None = None
        wait = 0.0
        limits = self.limits
        if limits.rpm is not None and len(accepted) >= limits.rpm:
            reason = RPM
            wait = accepted.wait_for_count(now, limits.rpm)
        if limits.tpm is not None and accepted.tokens + tokens > limits.tpm:
            reason = reason or TPM
            wait = max(wait, accepted.wait_for_tokens(now, limits.tpm, tokens))
        max_conc = limits.max_concurrency
        if max_conc is not None and len(self._in_flight) >= max_conc:
            reason = reason or CONCURRENCY
            wait = max(wait, self._wait_for_slot(now, max_conc))
        if reason is not None:
            return Decision(accepted=False, reason=reason, retry_after_s=max(wait, _MIN_RETRY_S))
        accepted.add(now, tokens)
        call_id = next(self._ids)
        self._in_flight[call_id] = now + expected_duration_s
        peaks = self.peaks
        peaks.accepted_requests = max(peaks.accepted_requests, len(accepted))
        peaks.accepted_tokens = max(peaks.accepted_tokens, accepted.tokens)
        peaks.concurrency = max(peaks.concurrency, len(self._in_flight))
        return Decision(accepted=True, call_id=call_id)

    def headroom_numbers(self, now: float) -> dict[str, tuple[int, int, float]]:
        """For ``"requests"`` and ``"tokens"`` (only the limits the model has): the limit,
        what remains of it in the window at ``now``, and seconds until one more fits."""
        accepted = self._accepted
        accepted.evict(now)
        out: dict[str, tuple[int, int, float]] = {}
        rpm, tpm = self.limits.rpm, self.limits.tpm
        if rpm is not None:
            out["requests"] = (rpm, max(0, rpm - len(accepted)),
                               accepted.wait_for_count(now, rpm))
        if tpm is not None:
            out["tokens"] = (tpm, max(0, tpm - accepted.tokens),
                             accepted.wait_for_tokens(now, tpm, 1))
        return out

    def headroom(self, now: float) -> dict[str, str]:
        """Rate-limit headers as OpenAI-style providers send them, for the window at ``now``:
        limit, remaining, and time until one more fits (``"0.25s"``), for requests and
        tokens (only the limits the model has)."""
        out: dict[str, str] = {}
        for kind, (limit, remaining, reset_s) in self.headroom_numbers(now).items():
            out[f"x-ratelimit-limit-{kind}"] = str(limit)
            out[f"x-ratelimit-remaining-{kind}"] = str(remaining)
            out[f"x-ratelimit-reset-{kind}"] = f"{reset_s:.3f}s"
        return out

    def release(self, call_id: int) -> None:
        """Free the concurrency slot of a finished call (idempotent)."""
        self._in_flight.pop(call_id, None)

    def reset(self) -> None:
        """Forget both windows and the peaks; calls in flight stay in flight."""
        self._accepted.clear()
        self._offered.clear()
        self.peaks = PeakCounters(concurrency=len(self._in_flight))

    def _record_offered(self, now: float, tokens: int) -> None:
        offered = self._offered
        offered.evict(now)
        offered.add(now, tokens)
        peaks = self.peaks
        peaks.offered_requests = max(peaks.offered_requests, len(offered))
        peaks.offered_tokens = max(peaks.offered_tokens, offered.tokens)

    def _wait_for_slot(self, now: float, max_conc: int) -> float:
        """Seconds until enough in-flight calls end to leave a free slot."""
        ends = sorted(self._in_flight.values())
        return ends[len(ends) - max_conc] - now


def retry_after_header(retry_after_s: float) -> str:
    """``Retry-After`` is whole seconds (RFC 9110): round up so a client never retries early."""
    return str(max(1, math.ceil(retry_after_s)))
