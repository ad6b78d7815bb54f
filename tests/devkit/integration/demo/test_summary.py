"""The closing report: per-model rows from /stats and the totals, on hand-computed numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llm_router_devkit.demo.fluid_bound import Bound, ModelCapacity
from llm_router_devkit.demo.summary import Totals, Yardstick, calls_from, format_report, model_rows
from llm_router_devkit.product_path import Timed


def _model_stats(**over):
    doc = {
        "accepted": 120, "rejected_429": 0, "tokens_accepted": 60_000,
        "peak_accepted_requests_in_window": 20, "peak_offered_requests_in_window": 20,
        "peak_accepted_tokens_in_window": 9_000, "peak_offered_tokens_in_window": 9_000,
        "peak_concurrency": 4,
        "limits": {"rpm": 20, "tpm": 10_000, "max_concurrency": 4},
    }
    doc.update(over)
    return doc


CAPACITY = {
    # 20 per 2 s window = 10/s; 10000/(2*500) = 10/s; 4 / 0.5 s = 8/s -> R = 8/s, 16/window
    "m": ModelCapacity("m", window_s=2.0, rpm=20, tpm=10_000, max_concurrency=4,
                       mean_tokens=500.0, mean_latency_s=0.5),
}


def test_rows_spread_accepted_traffic_over_the_makespan() -> None:
    (row,) = model_rows({"models": {"m": _model_stats()}}, CAPACITY, makespan_s=20.0)
    # 20 s = 10 windows of 2 s: 120 calls -> 12 per window, 60000 tokens -> 6000 per window
    assert row.avg_requests == pytest.approx(12.0)
    assert row.avg_tokens == pytest.approx(6000.0)
    assert row.rate_per_window == pytest.approx(16.0)
    assert row.binds == "concurrency"
    assert row.utilisation == pytest.approx(0.75)
    assert row.within_limits


def test_a_429_or_a_window_over_the_limit_is_not_within_limits() -> None:
    stats = {"models": {"m": _model_stats(rejected_429=1)}}
    assert not model_rows(stats, CAPACITY, 20.0)[0].within_limits
    stats = {"models": {"m": _model_stats(peak_accepted_tokens_in_window=10_001)}}
    assert not model_rows(stats, CAPACITY, 20.0)[0].within_limits


def test_models_missing_from_stats_are_skipped_and_zero_makespan_is_safe() -> None:
    assert model_rows({"models": {}}, CAPACITY, 10.0) == []
    (row,) = model_rows({"models": {"m": _model_stats()}}, CAPACITY, 0.0)
    assert row.avg_requests == 0.0


def _totals(counts, makespan=50.0, run_start=None, first_claim=None):
    bound = Bound(fluid_s=9.5, latency_s=0.5, binding=(None, ("m",)))
    times = Timed(from_run_start_s=run_start, from_first_claim_s=first_claim,
                  from_first_call_s=makespan)
    return Totals(tasks=sum(counts.values()), counts=counts, times=times, bound=bound,
                  time_scale=10.0, window_s=6.0)


def test_totals() -> None:
    t = _totals({"pending": 0, "claimed": 0, "solved": 990, "dead": 10})
    assert t.left == 0 and t.makespan_s == 50.0
    assert t.throughput == pytest.approx(19.8)  # 990 / 50 s
    assert t.of_bound == pytest.approx(0.2)  # 10 s bound / 50 s
    unfinished = _totals({"pending": 3, "claimed": 2, "solved": 995, "dead": 0})
    assert unfinished.left == 5 and unfinished.of_bound == 0.0


def test_report_states_the_figures_and_the_bound_inputs() -> None:
    rows = model_rows({"models": {"m": _model_stats()}}, CAPACITY, 20.0)
    text = format_report(rows, _totals({"solved": 1000, "dead": 0}), violations=0)
    assert "window = 6 s wall clock = 60 provider s; time scale 10" in text
    assert "solved 1000  dead 0  left unsolved 0" in text
    assert "fluid approximation (mean costs; not a lower bound): 10.0 s = fluid 9.5 s + " \
        "one call 0.5 s" in text
    assert "[any model, m]; this run, from the first call, at 20% of it" in text
    assert "throughput: 20.0 tasks/s from the first call" in text  # 1000 / 50 s
    assert "LP lower bound:" not in text  # no yardstick computed
    assert "reference schedules: skipped (--no-yardstick)" in text
    assert "calls:" not in text  # no call counts given
    assert "R_m = min(rpm/W, tpm/(W*t), max_concurrency/L)" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("m "))
    assert line.split()[:3] == ["m", "120", "0"]
    assert "75%" in line


def test_report_leads_with_the_run_timed_as_the_benchmarks_headline() -> None:
    """From the DAG run's start, from the first claim, then the makespan from the first
    call with what it leaves out: the benchmarks' words, each against the yardstick."""
    rows = model_rows({"models": {"m": _model_stats()}}, CAPACITY, 20.0)
    totals = replace(_totals({"solved": 1000, "dead": 0}, makespan=40.0, run_start=50.0,
                             first_claim=44.0),
                     yardstick=Yardstick(lp_bound_s=20.0, reference_s=30.0, seconds=1.5))
    lines = format_report(rows, totals, violations=0).splitlines()
    assert lines[0].startswith("This run, timed as the benchmarks' headline is")
    # 30 / 50 = 60 %, 20 / 50 = 40 %; 30 / 44 = 68.2 %, 20 / 44 = 45.5 %
    assert lines[1:5] == [
        "  from the DAG run's start: 50.0 s = 60% of the reference's speed, 40% of the LP "
        "bound's",
        "  from the first claim: 44.0 s = 68% of the reference's speed, 45% of the LP bound's",
        "  from the first call at the backend (the makespan): 40.0 s = 75% of the "
        "reference's speed, 50% of the LP bound's",
        "    it leaves out the DAG run's start to the first call, 10.0 s here (Airflow "
        "starting the run and its tasks, the first claim, the first admission), as the "
        "reference schedules start at their first send",
    ]
    assert totals.yardstick is not None
    kept = replace(totals, yardstick=replace(totals.yardstick, kept_s=36.0))
    text = format_report(rows, kept, violations=0)
    # 36 / 50 = 72 %, 36 / 44 = 81.8 %, 36 / 40 = 90 %
    assert "50.0 s = 60% of the reference's speed, 40% of the LP bound's, 72% of the " \
        "preference-keeping reference's" in text
    assert "44.0 s = 68% of the reference's speed, 45% of the LP bound's, 82% of the " \
        "preference-keeping reference's" in text
    assert "40.0 s = 75% of the reference's speed, 50% of the LP bound's, 90% of the " \
        "preference-keeping reference's" in text


def test_report_without_a_yardstick_a_start_or_a_finish() -> None:
    rows = model_rows({"models": {"m": _model_stats()}}, CAPACITY, 20.0)
    text = format_report(rows, _totals({"solved": 1000, "dead": 0}, makespan=40.0), 0)
    assert "  from the DAG run's start: not recorded" in text
    assert "  from the first claim: not recorded" in text
    assert "  from the first call at the backend (the makespan): 40.0 s\n" in text
    assert "it leaves out the DAG run's start to the first call (Airflow" in text
    cut = replace(_totals({"solved": 990, "pending": 10}, makespan=40.0, run_start=50.0),
                  yardstick=Yardstick(lp_bound_s=20.0, reference_s=30.0, seconds=1.5))
    text = format_report(rows, cut, 0)
    assert "  from the DAG run's start: 50.0 s (the run did not finish: no share of a " \
        "reference)" in text
    assert "% of the reference's speed" not in text
    no_call = replace(cut, counts={"solved": 1000}, times=Timed(None, None, 0.0))
    text = format_report(rows, no_call, 0)  # no call reached the backend: no share of 0 s
    assert "  from the first call at the backend (the makespan): 0.0 s\n" in text


def test_report_judges_the_run_against_the_yardstick() -> None:
    rows = model_rows({"models": {"m": _model_stats()}}, CAPACITY, 20.0)
    totals = replace(_totals({"solved": 1000, "dead": 0}, makespan=40.0, run_start=50.0),
                     yardstick=Yardstick(lp_bound_s=20.0, reference_s=30.0, seconds=1.5))
    text = format_report(rows, totals, violations=0)
    assert "LP lower bound: 20.0 s" in text and "reference schedule: 30.0 s" in text
    assert "(the bound and the references computed in 1.5 s;" in text
    assert "BUG" not in text
    too_fast = replace(totals, times=replace(totals.times, from_first_call_s=15.0))
    assert "BUG: this run, from the first call, beat the LP lower bound" in format_report(
        rows, too_fast, 0)  # faster than a lower bound: a bug in it
    assert "preferences kept" not in text and "preference-keeping" not in text  # no lists
    assert totals.yardstick is not None
    kept = replace(totals, yardstick=replace(totals.yardstick, kept_s=36.0))
    text = format_report(rows, kept, violations=0)
    assert "reference with preferences kept: 36.0 s" in text
    assert "costs unknown" not in text
    blind = replace(kept, yardstick=replace(kept.yardstick, blind_s=60.0))
    text = format_report(rows, blind, violations=0)
    assert "reference with costs unknown: 60.0 s" in text
    # 60 / 50: a run can beat a non-clairvoyant policy
    assert "  -> this run, from the DAG run's start: 120% of its speed" in text


def test_report_says_why_a_token_window_went_over() -> None:
    """A 429 on tokens in a run without an output cap is explained, not left bare."""
    row = model_rows({"models": {"m": _model_stats()}}, CAPACITY, 20.0)[0]
    assert "took a token window over" not in format_report([row], _totals({"solved": 1}), 0)
    over = replace(row, rejected_429=1, peak_offered_tokens=(row.tpm or 0) + 46)
    text = format_report([over], _totals({"solved": 1}), violations=1)
    assert "m: answers longer than their reservation took a token window over" in text
    assert "max_output_tokens" in text


def test_calls_sum_the_router_and_backend_counters_over_the_models() -> None:
    router = {"a": {"admitted": 600, "errors": 20, "rate_limited": 1, "abandoned": 2,
                    "completed": 580},
              "b": {"admitted": 416, "errors": 10}}
    backend = {"models": {"a": {"errors": 19, "timeouts": 1}, "b": {"errors": 10}}}
    calls = calls_from(router, backend, hedged=12)
    assert (calls.admitted, calls.failed, calls.rate_limited, calls.abandoned) == (1016, 30, 1, 2)
    assert (calls.backend_errors, calls.backend_timeouts, calls.hedged) == (29, 1, 12)


def test_report_says_what_the_admissions_beyond_one_per_task_were() -> None:
    """Hedges and retries are named and counted: "admitted 1016 for 1000" is explained."""
    rows = model_rows({"models": {"m": _model_stats()}}, CAPACITY, 20.0)
    calls = calls_from({"m": {"admitted": 1016, "errors": 3, "rate_limited": 1}},
                       {"models": {"m": {"errors": 3}}}, hedged=12)
    totals = replace(_totals({"solved": 1000, "dead": 0}), calls=calls)
    text = format_report(rows, totals, violations=0)
    assert ("calls: the router admitted 1016 for 1000 tasks (16 more than one per task: "
            "hedges and retries):") in text
    assert "  hedges: 12 prompts whose call ran past its model's late point" in text
    assert "  retries: 3 calls failed (the backend answered 500 to 3) and 1 got a 429" in text
    assert "abandoned" not in text and "timed out" not in text
    unknown = replace(calls, hedged=None, backend_timeouts=2, abandoned=4)
    text = format_report(rows, replace(totals, calls=unknown), violations=0)
    assert "  hedges: ? prompts" in text
    assert "(the backend answered 500 to 3, timed out 2)" in text
    assert "  abandoned: 4 admissions whose call was never sent" in text
