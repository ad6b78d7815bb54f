"""Windows, percentiles, peaks against targets and following a lowered target."""

from __future__ import annotations

import pytest

from bench.e2e.metrics import (
    follow_change,
    last_arrival_s,
    percentile,
    rolling,
    target_ratios,
    time_to_answer,
    tumbling,
)


def test_rolling_and_tumbling_sums() -> None:
    assert rolling([1, 2, 3, 4], 2) == [1, 3, 5, 7]
    assert tumbling([1, 2, 3, 4, 5], 2) == [3, 7, 5]
    assert tumbling([1, 2, 3, 4, 5], 2, start=1, stop=4) == [5, 4]


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([3, 1, 2], 50) == 2
    assert percentile([0, 10], 95) == pytest.approx(9.5)


def test_time_to_answer_skips_unsolved_and_filters_priority() -> None:
    rows = [{"created": 1.0, "solved": 4.0, "priority": "hot"},
            {"created": 1.0, "solved": None, "priority": "hot"},
            {"created": 0.0, "solved": 10.0, "priority": "bulk"}]
    assert time_to_answer(rows) == [3.0, 10.0]
    assert time_to_answer(rows, "hot") == [3.0]


def test_target_ratios_accepted_and_offered() -> None:
    stats = {"limits": {"rpm": 10, "tpm": None, "max_concurrency": 4},
             "peak_accepted_requests_in_window": 10, "peak_offered_requests_in_window": 25,
             "peak_accepted_tokens_in_window": 999, "peak_offered_tokens_in_window": 999,
             "peak_concurrency": 2}
    assert target_ratios(stats) == {"rpm": 1.0, "concurrency": 0.5}
    assert target_ratios(stats, offered=True) == {"rpm": 2.5}


def series(requests: list[int]) -> dict[str, list[int]]:
    return {"requests": requests, "tokens": [0] * len(requests)}


def test_traffic_that_follows_a_lowered_target_within_one_window() -> None:
    # Buckets of 1 s, windows of 2; rpm lowered from 4 to 2 at 3 s.
    follow = follow_change(series([2, 2, 2, 1, 1, 1, 1, 1]), 1.0, 2, 3.0, 8.0, {"rpm": 2})
    assert follow.peak_transition == pytest.approx(1.5)  # [2 s, 4 s) holds 3
    assert follow.peak_after == pytest.approx(1.0)  # every window from 3 s holds 2
    assert follow.settled_after_windows == pytest.approx(0.5)  # over until 4 s
    assert follow.windows_after == pytest.approx(2.5)


def test_traffic_over_a_lowered_target_after_a_window_is_reported() -> None:
    follow = follow_change(series([2, 2, 2, 2, 1, 1, 1, 1]), 1.0, 2, 3.0, 8.0, {"rpm": 2})
    assert follow.peak_after == pytest.approx(1.5)  # [3 s, 5 s) holds 3
    assert follow.settled_after_windows == pytest.approx(1.0)  # over until 5 s


def test_last_arrival_is_the_end_of_the_last_busy_bucket() -> None:
    timeline = {"bucket_s": 0.5, "models": {"a": {"requests": [1, 0, 0]},
                                             "b": {"requests": [0, 2, 0]}}}
    assert last_arrival_s(timeline) == 1.0
    assert last_arrival_s({"bucket_s": 1, "models": {"a": {"requests": [0]}}}) is None
