"""The advice arithmetic on hand-computed cases."""

from __future__ import annotations

import json

import pytest

from airflow_llm_router.engine.advice import ModelLoad, advise, advise_from_stats
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.stats import KindStats, ModelStats, RouterStats


def quota(**kw: object) -> ModelQuota:
    # 1 call/s over a 10 s window: with the default 10 s latency, the steady and the burst
    # figures agree (10 in flight); the tests of the burst pick other latencies or windows.
    base: dict[str, object] = {"rpm": 10, "tpm": 10**9, "max_concurrency": 1000,
                               "window_s": 10.0}
    return ModelQuota.parse({**base, **kw})


def load(latency_s: float | None = 10.0, tokens: float = 100.0, **kw: object) -> ModelLoad:
    return ModelLoad(quota(**kw), latency_s, tokens)


def test_slow_model_keeps_littles_law() -> None:
    # 5 per 5 s window = 1 call/s; 10 s per call outlasts the window: 1/s * 10 s = 10 in
    # flight (Little's law), more than the window's 5 calls.
    a = advise({"m": load(rpm=5, window_s=5.0)}, backlog=1000, per_solver_in_flight=4,
               max_solvers=16)
    m = a.models["m"]
    assert m.rate_per_s == pytest.approx(1.0) and m.binding == "rpm"
    assert m.needed_in_flight == pytest.approx(10.0)
    assert m.steady_in_flight == pytest.approx(10.0)
    assert m.sustainable_rate_per_s == pytest.approx(1.0)
    assert a.in_flight_needed == pytest.approx(10.0)
    assert a.solvers == 3  # ceil(10 / 4)


@pytest.mark.parametrize("no_cap", [1_000_000_000, 10**15])
def test_fast_model_needs_its_windows_calls_at_once(no_cap: int) -> None:
    # rpm 600 per 20 s window, 0.4 s per call, no concurrency cap (a huge number): the
    # steady rate 30/s needs 30 * 0.4 = 12 in flight, but the window admits its 600 calls
    # at once and they all need a slot: 600, the window's calls, not the cap.
    a = advise({"m": load(latency_s=0.4, rpm=600, window_s=20.0, max_concurrency=no_cap)},
               backlog=2000, per_solver_in_flight=100)
    m = a.models["m"]
    assert m.binding == "rpm" and m.rate_per_s == pytest.approx(30.0)
    assert m.steady_in_flight == pytest.approx(12.0)
    assert m.needed_in_flight == pytest.approx(600.0)
    assert m.sustainable_rate_per_s == pytest.approx(30.0)  # the rate is the steady one
    assert a.capacity_per_s == pytest.approx(30.0)
    assert a.in_flight_needed == pytest.approx(600.0) and a.solvers == 6


def test_latency_between_the_steady_and_the_burst() -> None:
    # 1/s over a 10 s window: 2 s -> 10 (the window's), 10 s -> 10, 25 s -> 25 (Little's).
    got = {lat: advise({"m": load(latency_s=lat)}, backlog=1).models["m"]
           for lat in (0.0, 2.0, 10.0, 25.0)}
    assert {lat: m.needed_in_flight for lat, m in got.items()} == pytest.approx(
        {0.0: 10.0, 2.0: 10.0, 10.0: 10.0, 25.0: 25.0})
    assert {lat: m.steady_in_flight for lat, m in got.items()} == pytest.approx(
        {0.0: 0.0, 2.0: 2.0, 10.0: 10.0, 25.0: 25.0})


def test_tpm_bound_counts_the_windows_calls_from_tokens() -> None:
    # tpm 60 000 per 60 s / 2000 tokens = 30 calls per window, 0.5 call/s < rpm's 10/s;
    # 4 s -> 2 in flight for the steady rate, 30 to send the window's calls at once.
    a = advise({"m": load(latency_s=4.0, tokens=2000, rpm=600, tpm=60_000, window_s=60.0)},
               backlog=50, per_solver_in_flight=1, max_solvers=100)
    m = a.models["m"]
    assert m.binding == "tpm" and m.rate_per_s == pytest.approx(0.5)
    assert m.steady_in_flight == pytest.approx(2.0)
    assert m.needed_in_flight == pytest.approx(30.0) and a.solvers == 30


def test_output_tpm_binds_on_output_tokens() -> None:
    # output_tpm 6000 / (60 * 500) = 0.2/s (12 calls per window); tpm 10^6 / (60 * 600) =
    # 27.8/s; rpm 1/s. 10 s per call: 2 steady, the window's 12 at once.
    q = quota(output_tpm=6000, tpm=10**6, rpm=60, window_s=60.0)
    a = advise({"m": ModelLoad(q, 10.0, 600, 100, 500)}, backlog=10)
    assert a.models["m"].binding == "output_tpm"
    assert a.models["m"].steady_in_flight == pytest.approx(2.0)
    assert a.models["m"].needed_in_flight == pytest.approx(12.0)


def test_concurrency_cap() -> None:
    # rpm 1000 per 10 s = 100/s * 10 s = 1000 wanted, capped at 8; sustainable 8 / 10 s.
    a = advise({"m": load(rpm=1000, max_concurrency=8)}, backlog=1000, per_solver_in_flight=3)
    m = a.models["m"]
    assert m.binding == "concurrency" and m.rate_per_s == pytest.approx(100.0)
    assert m.needed_in_flight == 8 and m.steady_in_flight == 8
    assert m.sustainable_rate_per_s == pytest.approx(0.8)
    assert a.solvers == 3  # ceil(8 / 3)
    assert a.capacity_per_s == pytest.approx(0.8)


def test_concurrency_caps_the_burst_without_binding_the_rate() -> None:
    # rpm 600 per 60 s = 10/s; 1 s per call -> 10 steady, well under the cap of 50; the
    # window's 600 at once would need more than 50: 50, and the rpm still binds the rate.
    a = advise({"m": load(latency_s=1.0, rpm=600, window_s=60.0, max_concurrency=50)},
               backlog=1000, per_solver_in_flight=10)
    m = a.models["m"]
    assert m.binding == "rpm" and m.sustainable_rate_per_s == pytest.approx(10.0)
    assert m.steady_in_flight == pytest.approx(10.0) and m.needed_in_flight == 50
    assert a.solvers == 5


def test_sum_over_models_and_max_solvers() -> None:
    # 10 + 20 + 8 (capped) = 38 in flight; 38 / 2 -> 19 solvers, capped at 16.
    models = {"a": load(), "b": load(latency_s=20.0), "c": load(rpm=1000, max_concurrency=8)}
    a = advise(models, backlog=10**6, per_solver_in_flight=2, max_solvers=16)
    assert a.in_flight_needed == pytest.approx(38.0)
    assert a.solvers == 16
    assert advise(models, backlog=10**6, per_solver_in_flight=2, max_solvers=100).solvers == 19


def test_backlog_caps_solvers() -> None:
    # 100 in flight needed, 10 per solver -> 10 solvers, but 25 tasks keep only 3 busy.
    a = advise({"m": load(latency_s=100.0)}, backlog=25, per_solver_in_flight=10)
    assert a.in_flight_needed == pytest.approx(100.0) and a.solvers == 3


def test_zero_backlog_means_no_solvers() -> None:
    assert advise({"m": load()}, backlog=0).solvers == 0


def test_at_least_one_solver_for_any_backlog() -> None:
    # 0.1 call in flight needed (tpm 100 per window / 1000 tokens, 6 s) gets one solver.
    a = advise({"m": load(latency_s=6.0, tokens=1000, tpm=100)}, backlog=1)
    assert a.in_flight_needed == pytest.approx(0.1) and a.solvers == 1


def test_float_noise_does_not_add_a_solver() -> None:
    # 62/60 per s * 60 s = 62.00000000000001 in float: still one solver of 62.
    a = advise({"m": load(latency_s=60.0, rpm=62, window_s=60.0)}, backlog=100,
               per_solver_in_flight=62)
    assert a.in_flight_needed > 62 and a.solvers == 1


def test_disabled_model_needs_nothing_and_unknown_latency_needs_its_cap() -> None:
    a = advise({"off": load(enabled=False), "new": load(latency_s=None, max_concurrency=7)},
               backlog=100, per_solver_in_flight=1)
    assert a.models["off"].binding == "disabled" and a.models["off"].needed_in_flight == 0
    assert not a.models["off"].enabled and a.any_enabled
    assert a.models["off"].steady_in_flight == 0
    assert a.models["new"].needed_in_flight == 7 and a.solvers == 7
    assert a.models["new"].steady_in_flight == 7
    assert a.models["new"].binding == "rpm"  # still the rate limit, as the cap is a guess


def test_unknown_latency_without_a_cap_asks_for_the_most_solvers() -> None:
    # no latency to size by and no cap but a huge number: the cautious maximum, as before
    a = advise({"new": load(latency_s=None, max_concurrency=10**15)}, backlog=10**6,
               per_solver_in_flight=100, max_solvers=16)
    assert a.models["new"].needed_in_flight == 10**15 and a.solvers == 16


def test_backpressure_bounds() -> None:
    def bp(waiting: int, in_flight: int) -> float:
        q = quota()
        return advise({"m": ModelLoad(q, 1.0, 10, in_flight=in_flight)}, backlog=1,
                      waiting=waiting).backpressure

    assert bp(0, 0) == 0.0
    assert bp(0, 10) == 0.0
    assert bp(10, 0) == 1.0
    assert bp(30, 10) == pytest.approx(0.75)


@pytest.mark.parametrize("kw", [{"backlog": -1}, {"backlog": 1, "per_solver_in_flight": 0},
                                {"backlog": 1, "max_solvers": 0}, {"backlog": 1.5}])
def test_bad_arguments(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        advise({"m": load()}, **kw)  # type: ignore[arg-type]


def _stats(requests: int, tokens: int, latency_ms: float | None) -> RouterStats:
    m = ModelStats(model="m", quota=quota(tpm=6000, rpm=600, window_s=60.0), requests=requests,
                   tokens=tokens, input_tokens=0, output_tokens=0, in_flight=3, output_estimate=100,
                   cooldown_ms=0, breaker="closed", counters={}, latency_ms=latency_ms)
    return RouterStats(now_ms=0, waiting=1, models={"m": m})


def test_from_stats_window_tokens_then_cold_guess() -> None:
    # In the window: 10 requests, 2000 tokens -> 200 per call; 6000 / 200 = 30 calls per
    # 60 s window, 0.5/s; 4 s per call: 2 in flight steady, the window's 30 at once.
    a = advise_from_stats(_stats(10, 2000, 4000.0), backlog=10, per_solver_in_flight=1)
    m = a.models["m"]
    assert m.tokens_per_call == 200 and m.rate_per_s == pytest.approx(0.5)
    assert m.latency_s == 4.0 and m.steady_in_flight == pytest.approx(2.0)
    assert m.needed_in_flight == pytest.approx(30.0)
    assert a.backpressure == pytest.approx(0.25) and a.in_flight == 3
    # Empty window: learned output 100 + guessed input 200 = 300 -> 20 calls per window.
    a = advise_from_stats(_stats(0, 0, 3000.0), backlog=10, input_tokens_per_call=200)
    assert a.models["m"].tokens_per_call == 300
    assert a.models["m"].steady_in_flight == pytest.approx(1.0)
    assert a.models["m"].needed_in_flight == pytest.approx(20.0)


def test_to_dict_is_json_safe() -> None:
    doc = advise({"m": load(), "n": load(latency_s=None)}, backlog=5).to_dict()
    again = json.loads(json.dumps(doc))
    assert again["solvers"] == 1 and again["models"]["m"]["binding"] == "rpm"
    assert again["models"]["n"]["latency_s"] is None
    # the burst-aware figure keeps its name; the steady one is an added field
    assert set(again["models"]["m"]) >= {"needed_in_flight", "steady_in_flight", "binding",
                                         "sustainable_rate_per_s"}


def test_the_backlogs_mix_of_kinds_weighs_each_kinds_estimates() -> None:
    """A backlog of 30 summaries and 10 essays on a tpm-bound model: tokens per call are the
    mix of what the model learned per kind (20 and 800 output tokens, 1 s and 9 s), plus the
    input guess; a kind it has not learned counts at the model's own estimate."""
    kinds = {"summary": KindStats(20, 1000.0, 50, 0), "essay": KindStats(800, 9000.0, 50, 0)}
    m = ModelStats(model="m", quota=quota(tpm=60_000, rpm=600, window_s=60.0), requests=5,
                   tokens=5000, input_tokens=0, output_tokens=0, in_flight=0, output_estimate=500,
                   cooldown_ms=0, breaker="closed", counters={}, latency_ms=4000.0,
                   kinds=kinds)
    stats = RouterStats(now_ms=0, waiting=0, models={"m": m})
    a = advise_from_stats(stats, backlog=40, input_tokens_per_call=100,
                          backlog_kinds={"summary": 30, "essay": 10})
    got = a.models["m"]
    assert got.tokens_per_call == pytest.approx(100 + (30 * 20 + 10 * 800) / 40)  # 315
    assert got.latency_s == pytest.approx((30 * 1 + 10 * 9) / 40)  # 3 s
    assert got.rate_per_s == pytest.approx(60_000 / (60 * 315))
    # an unlearned kind: the model's own 500 tokens and 4 s
    b = advise_from_stats(stats, backlog=40, backlog_kinds={"other": 40}).models["m"]
    assert b.tokens_per_call == 500 and b.latency_s == 4.0
    with pytest.raises(ValueError, match="backlog_kinds"):
        advise_from_stats(stats, backlog=40, backlog_kinds={"summary": -1})
