"""Each recorded run is measured against the quota change and arrivals it really had, on
the side that keeps the LP bound a bound (bench/e2e/yardstick.py)."""

from __future__ import annotations

import pytest

from bench.e2e.run import CUT_GRACE_S
from bench.e2e.workloads import Arrival, QuotaChange, Workload
from bench.e2e.yardstick import (
    NOMINAL,
    Timing,
    Yardstick,
    _table,
    calls_per_window,
    direct_runs,
    instance_of,
    relevant,
    timing_of,
    windows_table,
)
from llm_router_devkit.demo.seed import SeedTask
from llm_router_devkit.simulator import SimulatorProfile

RAW = {"events": [
    {"at": 0.09, "event": "trigger"},
    {"at": 7.36, "event": "first_call_seen"},
    {"at": 27.79, "event": "quota_change", "model": "flash-mini"},
]}


def _tasks(n: int) -> tuple[SeedTask, ...]:
    return tuple(SeedTask(f"prompt {i}", "qa", None, "bulk") for i in range(n))


def test_the_change_is_placed_at_its_stamp_and_arrivals_at_their_earliest() -> None:
    timing = timing_of(RAW, first_call_s=7.0)  # the first call's 0.2 s bucket
    # when the router was told: the provider's stamp less the grace, not the nominal 20 s
    assert timing.change_s == pytest.approx(20.79 - CUT_GRACE_S)
    assert timing.seen_s == pytest.approx(0.36)
    assert timing_of({"events": []}, first_call_s=3.0) == Timing(0.0, None)


def test_the_instance_uses_the_recorded_times() -> None:
    profile = SimulatorProfile.default(time_scale=3.0)
    window = profile.scaled_window_s  # 20 s
    changed = Workload("W3-like", "", _tasks(3), quota_change=QuotaChange(at_windows=1.0))
    assert instance_of(changed, profile).change_at_s == pytest.approx(window)
    late = instance_of(changed, profile, timing_of(RAW, first_call_s=7.0))
    assert late.change_at_s == pytest.approx(20.79 - CUT_GRACE_S)
    arriving = Workload("W4-like", "", _tasks(2), arrivals=(Arrival(0.5, _tasks(1)),))
    got = instance_of(arriving, profile, Timing(seen_s=0.36))
    assert got.arrivals_s == pytest.approx((0.0, 0.0, 0.36 + 0.5 * window))


def test_runs_without_a_change_or_arrivals_share_one_yardstick() -> None:
    plain = Workload("W1-like", "", _tasks(1))
    assert relevant(Timing(0.4, 21.0), plain) == NOMINAL


def test_ordered_lists_are_kept_as_the_drain_admits_them() -> None:
    """The drain admits a task's allowed models with ordered=True: the instance keeps each
    list in order, for the reference that keeps preferences."""
    tasks = (SeedTask("p 0", "reasoning", ("reasoner-small", "reasoner-large", "chat-large"),
                      "bulk"), SeedTask("p 1", "qa", None, "bulk"))
    got = instance_of(Workload("W2-like", "", tasks), SimulatorProfile.default(time_scale=3.0))
    assert got.preference == (("reasoner-small", "reasoner-large", "chat-large"), ())
    assert not instance_of(Workload("W1-like", "", _tasks(2)),
                           SimulatorProfile.default(time_scale=3.0)).ordered


def test_the_table_adds_the_preference_keeping_reference_where_there_is_one() -> None:
    runs = [{"workload": w, "design": "router", "makespan_s": 100.0, "solved": 5, "tasks": 5}
            for w in ("W1", "W2")]
    sticks = [Yardstick("W1", 20.0, 25.0, 1.0), Yardstick("W2", 40.0, 50.0, 1.0, kept_s=80.0)]
    header, _, w1, w2 = _table(runs, sticks).splitlines()
    assert "| reference, preferences kept s (% speed) |" in header
    assert w1 == "| W1 | 20.0 | 25.0 | router | 100.0 | 25% | 20% | - | - |"
    assert w2 == "| W2 | 40.0 | 50.0 | router | 100.0 | 50% | 40% | 80.0 (80%) | - |"


def test_the_table_adds_the_reference_with_costs_unknown() -> None:
    """Its own column, with the preferences kept too where the workload has ordered lists;
    a run faster than it shows above 100 %."""
    runs = [{"workload": w, "design": "router", "makespan_s": 100.0, "solved": 5, "tasks": 5}
            for w in ("W1", "W2")]
    sticks = [Yardstick("W1", 20.0, 25.0, 1.0, blind_s=40.0),
              Yardstick("W2", 40.0, 50.0, 1.0, kept_s=80.0, blind_s=90.0, blind_kept_s=120.0)]
    header, _, w1, w2 = _table(runs, sticks).splitlines()
    assert header.endswith("| reference, costs unknown s (% speed) |")
    assert w1.endswith("| - | 40.0 (40%) |")
    assert w2.endswith("| 80.0 (80%) | 90.0 (90%); preferences kept 120.0 (120%) |")


def test_a_direct_run_is_measured_at_its_own_change_stamp() -> None:
    """bench.direct's runs.json: each run's change when the router was told (its recorded
    stamp less the grace), rounded up to a tenth (never in the run's favour); a run
    without one at the nominal change; a record that names no workload gives no rows (the
    caller says why)."""
    def run(fired: list[dict[str, object]]) -> dict[str, object]:
        return {"makespan_s": 68.4, "fired": fired,
                "counts": {"pending": 0, "claimed": 0, "solved": 3990, "dead": 10}}

    record = {"command": "python -m bench.direct --workload W3 --runs 2 --warm",
              "workload": "W3", "time_scale": 3.0, "runs": [
                  run([{"at_s": 20.0, "event": "quota_change", "change_s": 20.03}]),
                  run([{"at_s": 20.0, "event": "quota_change", "change_s": 20.1}]),
                  run([])]}
    rows, timings = direct_runs(record)
    assert CUT_GRACE_S == 1.0  # told a second before the provider's stamp
    assert timings == [Timing(change_s=19.1), Timing(change_s=19.1), NOMINAL]
    assert rows[0] == {"workload": "W3", "design": "router (bench.direct, warm)",
                       "makespan_s": 68.4, "solved": 3990, "tasks": 4000, "time_scale": 3.0,
                       "calls_per_window": {}}
    assert direct_runs({"command": "python -m bench.direct", "runs": [run([])]}) == ([], [])


def test_the_references_calls_are_counted_per_model_and_window() -> None:
    """Window k holds the sends at [k W, (k+1) W) from time 0; every model has a count for
    every window out to the last one any model sends in."""
    sends = [("a", 0.0), ("a", 19.99), ("b", 20.0), ("a", 45.0)]
    assert calls_per_window(sends, 20.0) == {"a": (2, 0, 1), "b": (0, 1, 0)}
    assert calls_per_window([], 20.0) == {}


def test_a_direct_run_shows_its_calls_per_window_against_the_references() -> None:
    """Each cell is the run's calls (the reference's), a model the reference did not use
    and windows the run went past included; the last row totals each window."""
    run = {"a": [2, 1, 0, 1], "c": [0, 0, 0, 5]}
    reference = {"a": (2, 0, 1), "b": (0, 1, 0)}
    head, rule, a, b, c, total = windows_table(run, reference).splitlines()
    assert head == "| model | window 1 | window 2 | window 3 | window 4 |"
    assert rule == "|---|---|---|---|---|"
    assert a == "| a | 2 (2) | 1 (0) | 0 (1) | 1 (0) |"
    assert b == "| b | 0 (0) | 0 (1) | 0 (0) | 0 (0) |"
    assert c == "| c | 0 (0) | 0 (0) | 0 (0) | 5 (0) |"
    assert total == "| all | 2 (2) | 1 (1) | 0 (1) | 6 (0) |"
    record = {"command": "python -m bench.direct --workload W4", "workload": "W4",
              "time_scale": 3.0, "runs": [{
                  "makespan_s": 72.0, "calls_per_window": run,
                  "counts": {"pending": 0, "claimed": 0, "solved": 5100, "dead": 0}}]}
    rows, _ = direct_runs(record)
    assert rows[0]["calls_per_window"] == run
