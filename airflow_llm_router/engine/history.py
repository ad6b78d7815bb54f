"""Traffic over time per model, as the engine recorded it (``lua/lib/history.lua``).

The admission scripts themselves write it, into buckets of the Redis clock, so every
caller's traffic is in it once, whatever process reads it (an API server keeps nothing).
Each bucket holds what admission saw in it: admissions, the most requests and tokens the
sliding window held (what ``rpm``/``tpm`` limit), the most calls in flight, the 429s,
errors and breaker openings settled, and the targets and learned effective limits in
force. The bucket length and the span kept come from the script, not from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["HISTORY_MODELS_PER_CALL", "MAX_HISTORY_MINUTES", "ModelHistory",
           "RouterHistory", "TrafficBucket", "history_span_ms"]

#: The span the engine keeps (lib/history.lua keeps 360 buckets of 10 s).
MAX_HISTORY_MINUTES = 60
#: Models read per script call: each is one HGETALL of up to 360 fields on the Redis
#: thread, so a page of many models is read in several short calls, not one long one.
HISTORY_MODELS_PER_CALL = 32

_SUMS = ("admitted", "rate_limited", "errors", "breaker_opened")


def history_span_ms(minutes: int) -> int:
    """``minutes`` as the span to read, in ms.

    :raises ValueError: naming ``minutes`` unless it is a whole number from 1 to 60.
    """
    if isinstance(minutes, bool) or not isinstance(minutes, int) \
            or not 1 <= minutes <= MAX_HISTORY_MINUTES:
        raise ValueError(f"minutes: {minutes!r} must be a whole number from 1 to "
                         f"{MAX_HISTORY_MINUTES} (the engine keeps one hour of traffic)")
    return minutes * 60_000


@dataclass(frozen=True)
class TrafficBucket:
    """One model's traffic in one bucket. A value the bucket did not record is None
    (requests, tokens and in-flight are sampled at admissions; a bucket with only a quota
    change or a 429 has no sample), counts default to 0."""

    #: when the bucket starts (ms, Redis clock)
    start_ms: int
    admitted: int
    #: the most admissions and tokens the model's sliding window held during the bucket
    requests: int | None
    tokens: int | None
    in_flight: int | None
    rate_limited: int
    errors: int
    breaker_opened: int
    #: the targets (the quota) in force
    rpm: int | None
    tpm: int | None
    max_concurrency: int | None
    #: the learned effective limits in force, None where admission held the target itself
    eff_rpm: int | None
    eff_tpm: int | None
    eff_max_concurrency: int | None
    window_ms: int | None


def _bucket(start_ms: int, fields: Sequence[str], packed: str) -> TrafficBucket:
    raw = dict(zip(fields, (int(x) for x in packed.split(",")), strict=False))
    doc: dict[str, Any] = {}
    for name in TrafficBucket.__dataclass_fields__:
        if name == "start_ms":
            continue
        value = raw.get(name, -1)
        doc[name] = max(0, value) if name in _SUMS else (None if value < 0 else value)
    return TrafficBucket(start_ms=start_ms, **doc)


@dataclass(frozen=True)
class ModelHistory:
    """One model's recorded buckets, oldest first (buckets with nothing recorded are
    absent: see :meth:`columns` for a dense series)."""

    model: str
    buckets: tuple[TrafficBucket, ...]

    def columns(self, first_ms: int, last_ms: int, bucket_ms: int) -> dict[str, list[Any]]:
        """Every bucket from ``first_ms`` to ``last_ms`` as columns (``t``: bucket start in
        s), None where nothing was recorded: the shape a time-series chart draws."""
        by_start = {b.start_ms: b for b in self.buckets}
        names = [n for n in TrafficBucket.__dataclass_fields__ if n != "start_ms"]
        out: dict[str, list[Any]] = {"t": []}
        for name in names:
            out[name] = []
        for start in range(first_ms, last_ms + 1, bucket_ms):
            out["t"].append(start / 1000)
            b = by_start.get(start)
            for name in names:
                out[name].append(None if b is None else getattr(b, name))
        return out

    def totals(self) -> dict[str, int]:
        """Admissions, 429s, errors and breaker openings over the buckets read."""
        return {name: sum(getattr(b, name) for b in self.buckets) for name in _SUMS}


@dataclass(frozen=True)
class RouterHistory:
    """The history of some models over a span ending at ``now_ms`` (Redis clock)."""

    now_ms: int
    bucket_ms: int
    span_ms: int
    models: dict[str, ModelHistory]

    @property
    def first_ms(self) -> int:
        """Start of the oldest bucket of the span."""
        return ((self.now_ms - self.span_ms) // self.bucket_ms + 1) * self.bucket_ms

    @property
    def last_ms(self) -> int:
        """Start of the current bucket."""
        return self.now_ms // self.bucket_ms * self.bucket_ms

    @classmethod
    def from_replies(cls, replies: Sequence[Sequence[Any]], span_ms: int) -> RouterHistory:
        """Decode the history script's replies (one per call of up to
        :data:`HISTORY_MODELS_PER_CALL` models); the clock is the last call's."""
        models: dict[str, ModelHistory] = {}
        now_ms, bucket_ms = 0, 1
        for reply in replies:
            now_ms, bucket_ms = int(reply[0]), int(reply[1])
            fields = [_text(f) for f in reply[3]]
            flat = reply[4]
            for k in range(0, len(flat), 2):
                rows = flat[k + 1]
                buckets = [_bucket(int(rows[j]) * bucket_ms, fields, _text(rows[j + 1]))
                           for j in range(0, len(rows), 2)]
                name = _text(flat[k])
                models[name] = ModelHistory(
                    name, tuple(sorted(buckets, key=lambda b: b.start_ms)))
        return cls(now_ms=now_ms, bucket_ms=bucket_ms, span_ms=span_ms, models=models)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: span and clock, and per model its columns and totals."""
        return {
            "now_ms": self.now_ms,
            "bucket_ms": self.bucket_ms,
            "span_ms": self.span_ms,
            "models": {
                name: {"totals": h.totals(),
                       "series": h.columns(self.first_ms, self.last_ms, self.bucket_ms)}
                for name, h in self.models.items()
            },
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
