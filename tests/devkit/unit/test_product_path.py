"""How a run is timed (the benchmark's headline and the demo's report share it)."""

from __future__ import annotations

import pytest

from llm_router_devkit.product_path import first_arrival_s, speed_share, timed


def test_first_arrival_counts_refused_calls_too() -> None:
    timeline = {"bucket_s": 0.5, "models": {
        "a": {"requests": [0, 0, 0, 1], "rejected": [0, 0, 0, 0]},
        "b": {"requests": [0, 0, 0, 0], "rejected": [0, 2, 0, 0]}}}
    assert first_arrival_s(timeline) == 0.5
    assert first_arrival_s(timeline, after_s=1.0) == 1.5
    assert first_arrival_s({"bucket_s": 1, "models": {}}) is None


def test_each_start_is_timed_to_the_same_end() -> None:
    t = timed(130.0, first_call=104.5, run_start=101.0, first_claim=103.25)
    assert t.from_run_start_s == pytest.approx(29.0)
    assert t.from_first_claim_s == pytest.approx(26.75)
    assert t.from_first_call_s == pytest.approx(25.5)
    assert t.before_first_call_s == pytest.approx(3.5)  # what the makespan leaves out
    unknown = timed(130.0, first_call=104.5, run_start=None, first_claim=None)
    assert unknown.from_run_start_s is None and unknown.from_first_claim_s is None
    assert unknown.before_first_call_s is None


def test_speed_share_of_a_yardstick() -> None:
    assert speed_share(21.1, 29.52, finished=True) == pytest.approx(0.7148, abs=1e-4)
    assert speed_share(21.1, 29.52, finished=False) is None  # cut short: no share
    assert speed_share(21.1, 0.0, finished=True) is None
