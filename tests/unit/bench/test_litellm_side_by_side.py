"""The side by side's own arithmetic: calls over a window's rpm, the earliest last send,
and the workload (every call once, the models in proportion)."""

from __future__ import annotations

from collections import Counter

from bench.litellm_side_by_side import MODELS, calls_over, earliest_last_send_s, workload


def test_calls_over_counts_the_calls_past_the_limit_in_each_sliding_window() -> None:
    # a window of 3 buckets, rpm 2
    assert calls_over([1, 1, 0, 1, 1, 0], 3, 2) == 0  # 2 in any 3 consecutive buckets
    assert calls_over([2, 1, 0, 0], 3, 2) == 1  # the third call of the first window
    assert calls_over([3, 0, 0, 3], 3, 2) == 2  # each burst: its third call
    assert calls_over([0, 2, 0, 2], 3, 2) == 2  # the window (1..3] holds 4


def test_the_workload_and_its_earliest_last_send() -> None:
    calls = workload(1500)
    assert len(calls) == len(set(calls)) == 1500
    count = Counter(model for model, _ in calls)
    assert {m: count[m] / 1500 for m in MODELS} == {m: s for m, (s, _) in MODELS.items()}
    # interleaved: the first tenth already holds every model
    assert set(model for model, _ in calls[:150]) == set(MODELS)
    # each model has three windows of calls: the last can go two windows after the first
    assert earliest_last_send_s(calls) == 120.0
