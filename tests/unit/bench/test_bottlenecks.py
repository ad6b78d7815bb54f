"""Batch tails, fan-out mismatch, restarts and the tail, on hand-computed records."""

from __future__ import annotations

import pytest

from bench.e2e.bottlenecks import (
    batch_tails,
    calls_per_window,
    fan_out,
    milestones,
    restarts,
    tail,
)


def test_batches_are_rebuilt_from_one_write_back_instant() -> None:
    rows = [{"solved": 10.0, "latency_s": 1.0}, {"solved": 10.0, "latency_s": 3.0},
            {"solved": 20.0, "latency_s": 2.0}, {"solved": None, "latency_s": None}]
    tails = batch_tails(rows)
    assert tails["batches"] == 2 and tails["items"] == 3
    # Held: 2 items x 3 s + 1 x 2 s = 8 item-seconds; the 1 s item waited 2 of them.
    assert tails["slot_idle_share"] == pytest.approx(2 / 8)
    assert tails["wait_s"] == pytest.approx(1.0)  # 3 s call vs its items' mean of 2 s
    assert tails["mean_call_s"] == pytest.approx(2.5)
    assert tails["mean_item_s"] == pytest.approx(2.0)
    assert batch_tails([])["batches"] == 0


def test_fan_out_finds_a_model_idle_while_another_is_refused() -> None:
    timeline = {"bucket_s": 1.0, "models": {
        "a": {"requests": [2, 2, 0, 0], "rejected": [0, 0, 0, 0]},
        "b": {"requests": [0, 0, 1, 1], "rejected": [0, 0, 3, 0]}}}
    out = fan_out(timeline, {"a": 1.0, "b": 1.0}, 2, 0.0, 3.9)
    # Window 1: b idle, nobody refused; window 2: a idle while b is refused.
    assert out["mismatch_windows"] == pytest.approx(0.5)
    assert out["models"]["b"]["flooded_windows"] == pytest.approx(0.5)
    assert out["models"]["a"]["idle_windows"] == pytest.approx(0.5)
    # Offered 4 : 5 against capacity 1 : 1.
    assert out["models"]["b"]["offered_share"] == pytest.approx(5 / 9)
    assert out["share_distance"] == pytest.approx(1 / 18)
    assert out["models"]["a"]["utilisation"] == pytest.approx(4 / 3.9)


def test_restarts_measure_cold_start_and_worker_occupancy() -> None:
    timeline = {"bucket_s": 1.0, "models": {
        "x": {"requests": [0, 0, 1, 0, 0, 0, 1], "rejected": [0] * 7}}}
    airflow = {
        "runs": [{"run_id": "r1", "state": "success", "queued": 1000.5, "end": 1003.5},
                 {"run_id": "r2", "state": "failed", "queued": 1004.2, "end": None}],
        "task_instances": [
            {"run_id": "r1", "task_id": "w", "map_index": 0, "state": "success",
             "start": 1001.0, "end": 1003.0},
            {"run_id": "r1", "task_id": "w", "map_index": 1, "state": "failed",
             "start": 1001.5, "end": 1002.0},
            {"run_id": "r1", "task_id": "fetch", "map_index": -1, "state": "success",
             "start": 1000.6, "end": 1000.9}]}
    first, second = restarts(airflow, timeline, 1000.0, "w")
    assert first["cold_start_s"] == pytest.approx(1.5)
    assert first["workers"] == 2 and first["failed_workers"] == 1
    assert first["worker_occupancy"] == pytest.approx(2.5 / 4)
    assert first["worker_start_spread_s"] == pytest.approx(0.5)
    assert second["cold_start_s"] == pytest.approx(1.8)
    assert second["workers"] == 0 and "worker_occupancy" not in second


def test_tail_names_the_models_of_the_last_answers() -> None:
    rows = [{"solved": float(i), "model": "fast", "latency_s": 0.1} for i in range(1, 20)]
    rows.append({"solved": 25.0, "model": "slow", "latency_s": 9.0})
    out = tail(rows, 0.0)
    assert out["tail_s"] == pytest.approx(25.0 - 19.0)
    assert out["models"] == {"slow": {"answers": 1, "mean_latency_s": 9.0}}


def test_milestones_are_the_times_shares_of_the_tasks_were_answered() -> None:
    rows = [{"solved": 100.0 + i} for i in range(1, 11)] + [{"solved": None}] * 10
    out = milestones(rows, 100.0, 20)
    assert out == {"50%": 10.0}  # the 10th answer; 90 % and more were never reached


def test_calls_per_window_count_from_the_first_calls_bucket() -> None:
    timeline = {"bucket_s": 0.5, "models": {
        "a": {"requests": [0, 3, 1, 0, 2, 0, 0, 0], "rejected": [0] * 8},
        "b": {"requests": [0, 0, 0, 1, 0, 0, 0, 0], "rejected": [0] * 8},
        "idle": {"requests": [0] * 8, "rejected": [0] * 8}}}
    # windows of 2 buckets (1 s) from the first call's bucket (0.5 s): [0.5, 1.5), ...
    # up to the last window anyone called in
    assert calls_per_window(timeline, 0.5, 2) == {"a": [4, 2], "b": [0, 1]}
