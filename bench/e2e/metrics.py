"""Pure arithmetic on a run's records: windows, percentiles, peaks against targets (the
first call and how a run is timed: :mod:`llm_router_devkit.product_path`).

Traffic comes from the simulator's ``/timeline`` (arrivals per bucket, on the clock of its
last stats reset) and ``/stats`` (exact sliding-window peaks); task times from the store
(epoch seconds). A window summed over whole buckets starts on a bucket edge, so it can miss
the true peak by at most one bucket's arrivals (a hundredth of a window in the benchmark).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ChangeFollow",
    "follow_change",
    "last_arrival_s",
    "percentile",
    "rolling",
    "target_ratios",
    "time_to_answer",
    "tumbling",
]


def rolling(counts: Sequence[float], k: int) -> list[float]:
    """Sum of the ``k`` buckets ending at each bucket (fewer at the start)."""
    out, acc = [], 0.0
    for i, c in enumerate(counts):
        acc += c
        if i >= k:
            acc -= counts[i - k]
        out.append(acc)
    return out


def tumbling(counts: Sequence[float], k: int, start: int = 0, stop: int | None = None
             ) -> list[float]:
    """Sums of consecutive, non-overlapping groups of ``k`` buckets in ``[start, stop)``
    (the last group may be shorter)."""
    stop = len(counts) if stop is None else stop
    return [float(sum(counts[i:min(i + k, stop)])) for i in range(start, stop, k)]


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), linear between closest ranks; None if empty."""
    data = sorted(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def last_arrival_s(timeline: Mapping[str, Any]) -> float | None:
    """End of the last bucket in which any model saw an arrival; None if none did."""
    bucket = float(timeline["bucket_s"])
    last = [max((i for i, n in enumerate(s["requests"]) if n), default=-1)
            for s in timeline["models"].values()]
    return None if max(last, default=-1) < 0 else (max(last) + 1) * bucket


def time_to_answer(rows: Iterable[Mapping[str, Any]], priority: str | None = None
                   ) -> list[float]:
    """Seconds from enqueue to answer of each solved task (of ``priority``, if given)."""
    return [r["solved"] - r["created"] for r in rows
            if r["solved"] is not None and (priority is None or r["priority"] == priority)]


_LIMIT_PEAKS = (("rpm", "peak_{}_requests_in_window"), ("tpm", "peak_{}_tokens_in_window"))


def target_ratios(model_stats: Mapping[str, Any], offered: bool = False) -> dict[str, float]:
    """A model's busiest window (and instant) over each set target, from ``/stats``:
    ``{"rpm": peak / rpm, "tpm": ..., "concurrency": ...}``. ``offered`` counts refused
    calls too (what the caller tried to send), else only what the backend accepted."""
    limits = model_stats.get("limits") or {}
    kind = "offered" if offered else "accepted"
    out = {}
    for limit, key in _LIMIT_PEAKS:
        if limits.get(limit):
            out[limit] = model_stats[key.format(kind)] / limits[limit]
    if limits.get("max_concurrency") and not offered:
        out["concurrency"] = model_stats["peak_concurrency"] / limits["max_concurrency"]
    return out


@dataclass(frozen=True)
class ChangeFollow:
    """How one model's traffic followed a lowered target.

    :param peak_after: the busiest window that started at or after the change, over the new
        target (requests or tokens, whichever is higher); <= 1 means the target held.
    :param peak_transition: the same for windows that began before the change and ended
        after it (they still hold traffic admitted under the old target).
    :param settled_after_windows: from the change, in windows, until every later window is
        within the new target (0 if none was ever over it).
    :param windows_after: how many windows of traffic the run had after the change.
    """

    peak_after: float
    peak_transition: float
    settled_after_windows: float
    windows_after: float


def follow_change(series: Mapping[str, Sequence[int]], bucket_s: float, k: int,
                  change_s: float, end_s: float, new_limits: Mapping[str, int | None]
                  ) -> ChangeFollow:
    """Judge a model's traffic against ``new_limits`` (rpm, tpm) after ``change_s``.

    :param series: the model's timeline (``requests``, ``tokens`` per bucket).
    :param k: buckets per window.
    :param end_s: the run's end (its last answer); windows past it are not judged.
    """
    reqs = rolling(series["requests"], k)
    toks = rolling(series["tokens"], k)
    rpm, tpm = new_limits.get("rpm"), new_limits.get("tpm")

    def ratio(i: int) -> float:
        parts = [reqs[i] / rpm if rpm else 0.0, toks[i] / tpm if tpm else 0.0]
        return max(parts)

    first_end = math.ceil(change_s / bucket_s)  # first window ending after the change
    last_end = min(int(end_s / bucket_s), len(reqs) - 1)
    after = [ratio(i) for i in range(first_end + k - 1, last_end + 1)]
    transition = [ratio(i) for i in range(first_end, min(first_end + k - 1, last_end + 1))]
    over = [i for i in range(first_end, last_end + 1) if ratio(i) > 1.0]
    settled = ((over[-1] + 1) * bucket_s - change_s) / (k * bucket_s) if over else 0.0
    return ChangeFollow(peak_after=max(after, default=0.0),
                        peak_transition=max(transition, default=0.0),
                        settled_after_windows=settled,
                        windows_after=max(0.0, (end_s - change_s) / (k * bucket_s)))
