"""What a backend says about its own limits and timing, read from a response's headers.

Providers that state their rate limits do it in headers. OpenAI's and many gateways'
spelling, which the simulator speaks too, is read here; another protocol reads its own
(:mod:`airflow_llm_router.backend.protocols`) into the same :class:`BackendSignals`::

    x-ratelimit-limit-requests: 500        x-ratelimit-limit-tokens: 30000
    x-ratelimit-remaining-requests: 0      x-ratelimit-remaining-tokens: 1200
    x-ratelimit-reset-requests: 1.2s       x-ratelimit-reset-tokens: 250ms

and a backend may say when a call reached it (``x-received-ms``, wall-clock epoch ms). The
engine uses them (``Completion`` in :mod:`airflow_llm_router.engine.core`): the stated limits
cap the model's effective limit, "nothing remaining until the reset" cools the model down
without waiting for a 429, and the arrival delay widens the model's guard. Unreadable
values are ignored: a header is advice, never a reason to fail a call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RECEIVED_HEADER", "BackendSignals", "parse_duration_s", "read_received",
           "read_signals", "whole_header"]

#: the header in which a backend says when it received a call (epoch ms, wall clock)
RECEIVED_HEADER = "x-received-ms"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True)
class BackendSignals:
    """What one response said (None: not said).

    :param limit_requests: requests the backend allows per its window.
    :param limit_tokens: tokens it allows per its window.
    :param hold_s: it has nothing left for this long (remaining 0 until the reset).
    :param received_at_s: when the call reached it (epoch seconds).
    """

    limit_requests: int | None = None
    limit_tokens: int | None = None
    hold_s: float | None = None
    received_at_s: float | None = None


def parse_duration_s(text: str) -> float | None:
    """``"1.5s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m3s"`` or plain seconds (``"0.25"``)."""
    text = text.strip().lower()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def whole_header(headers: Mapping[str, str], name: str) -> int | None:
    """A header's whole number >= 0 (None: absent or not one)."""
    value = headers.get(name)
    if value is None:
        return None
    try:
        number = int(float(value))
    except (ValueError, OverflowError):  # not a number, nan, inf
        return None
    return number if number >= 0 else None


def read_received(headers: Mapping[str, str]) -> float | None:
    """When the backend says the call reached it (epoch seconds; None: unsaid)."""
    raw = headers.get(RECEIVED_HEADER)
    if raw is None:
        return None
    try:
        return float(raw) / 1000
    except ValueError:
        return None


def read_signals(headers: Mapping[str, str]) -> BackendSignals:
    """The signals in ``headers`` (a case-insensitive mapping), in OpenAI's spelling."""
    hold: float | None = None
    for kind in ("requests", "tokens"):
        remaining = whole_header(headers, f"x-ratelimit-remaining-{kind}")
        reset = headers.get(f"x-ratelimit-reset-{kind}")
        if remaining == 0 and reset is not None:
            seconds = parse_duration_s(reset)
            if seconds is not None and seconds > 0:
                hold = max(hold or 0.0, seconds)
    return BackendSignals(
        limit_requests=whole_header(headers, "x-ratelimit-limit-requests") or None,
        limit_tokens=whole_header(headers, "x-ratelimit-limit-tokens") or None,
        hold_s=hold,
        received_at_s=read_received(headers),
    )
