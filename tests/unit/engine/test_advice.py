"""The advice arithmetic on hand-computed cases."""

from __future__ import annotations

import json

import pytest

from airflow_llm_router.engine.advice import ModelLoad, advise, advise_from_stats
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.stats import KindStats, ModelStats, RouterStats


def quota(**kw: object) -> ModelQuota:
    base: dict[str, object] = {"rpm": 60, "tpm": 10**9, "max_concurrency": 1000,
                               "window_s": 60.0}
    return ModelQuota.parse({**base, **kw})


def load(latency_s: float | None = 10.0, tokens: float = 100.0, **kw: object) -> ModelLoad:
    return ModelLoad(quota(**kw), latency_s, tokens)


def test_rpm_bound_littles_law() -> None:
    # 60 per 60 s window = 1 call/s; 10 s per call -> 10 calls in flight.
    a = advise({"m": load()}, backlog=1000, per_solver_in_flight=4, max_solvers=16)
    m = a.models["m"]
    assert m.rate_per_s == pytest.approx(1.0) and m.binding == "rpm"
    assert m.needed_in_flight == pytest.approx(10.0)
    assert m.sustainable_rate_per_s == pytest.approx(1.0)
    assert a.in_flight_needed == pytest.approx(10.0)
    assert a.solvers == 3  # ceil(10 / 4)


def test_tpm_bound_uses_tokens_per_call() -> None:
    # tpm 60 000 / (60 s * 2000 tokens) = 0.5 call/s < rpm's 10/s; 4 s -> 2 in flight.
    a = advise({"m": load(latency_s=4.0, tokens=2000, rpm=600, tpm=60_000)}, backlog=50,
               per_solver_in_flight=1)
    m = a.models["m"]
    assert m.binding == "tpm" and m.rate_per_s == pytest.approx(0.5)
    assert m.needed_in_flight == pytest.approx(2.0) and a.solvers == 2


def test_output_tpm_binds_on_output_tokens() -> None:
    # output_tpm 6000 / (60 * 500) = 0.2/s; tpm 10^6 / (60 * 600) = 27.8/s; rpm 1/s.
    q = quota(output_tpm=6000, tpm=10**6)
    a = advise({"m": ModelLoad(q, 10.0, 600, 100, 500)}, backlog=10)
    assert a.models["m"].binding == "output_tpm"
    assert a.models["m"].needed_in_flight == pytest.approx(2.0)


def test_concurrency_cap() -> None:
    # rpm 6000/min = 100/s * 10 s = 1000 wanted, capped at 8; sustainable 8 / 10 s.
    a = advise({"m": load(rpm=6000, max_concurrency=8)}, backlog=1000, per_solver_in_flight=3)
    m = a.models["m"]
    assert m.binding == "concurrency" and m.rate_per_s == pytest.approx(100.0)
    assert m.needed_in_flight == 8 and m.sustainable_rate_per_s == pytest.approx(0.8)
    assert a.solvers == 3  # ceil(8 / 3)
    assert a.capacity_per_s == pytest.approx(0.8)


def test_sum_over_models_and_max_solvers() -> None:
    # 10 + 20 + 8 (capped) = 38 in flight; 38 / 2 -> 19 solvers, capped at 16.
    models = {"a": load(), "b": load(latency_s=20.0), "c": load(rpm=6000, max_concurrency=8)}
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
    # 0.1 call in flight needed (rpm 1/min, 6 s) still gets one solver.
    a = advise({"m": load(latency_s=6.0, rpm=1)}, backlog=1)
    assert a.in_flight_needed == pytest.approx(0.1) and a.solvers == 1


def test_float_noise_does_not_add_a_solver() -> None:
    # 62/60 per s * 30 s = 31.000000000000004 in float: still one solver of 31.
    a = advise({"m": load(latency_s=30.0, rpm=62)}, backlog=100, per_solver_in_flight=31)
    assert a.in_flight_needed > 31 and a.solvers == 1


def test_disabled_model_needs_nothing_and_unknown_latency_needs_its_cap() -> None:
    a = advise({"off": load(enabled=False), "new": load(latency_s=None, max_concurrency=7)},
               backlog=100, per_solver_in_flight=1)
    assert a.models["off"].binding == "disabled" and a.models["off"].needed_in_flight == 0
    assert not a.models["off"].enabled and a.any_enabled
    assert a.models["new"].needed_in_flight == 7 and a.solvers == 7


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
    m = ModelStats(model="m", quota=quota(tpm=6000, rpm=600), requests=requests, tokens=tokens,
                   input_tokens=0, output_tokens=0, in_flight=3, output_estimate=100,
                   cooldown_ms=0, breaker="closed", counters={}, latency_ms=latency_ms)
    return RouterStats(now_ms=0, waiting=1, models={"m": m})


def test_from_stats_window_tokens_then_cold_guess() -> None:
    # In the window: 10 requests, 2000 tokens -> 200 per call; 6000 / (60 * 200) = 0.5/s.
    a = advise_from_stats(_stats(10, 2000, 4000.0), backlog=10, per_solver_in_flight=1)
    m = a.models["m"]
    assert m.tokens_per_call == 200 and m.rate_per_s == pytest.approx(0.5)
    assert m.latency_s == 4.0 and m.needed_in_flight == pytest.approx(2.0)
    assert a.backpressure == pytest.approx(0.25) and a.in_flight == 3
    # Empty window: learned output 100 + guessed input 200 = 300 -> 1/3 call/s.
    a = advise_from_stats(_stats(0, 0, 3000.0), backlog=10, input_tokens_per_call=200)
    assert a.models["m"].tokens_per_call == 300
    assert a.models["m"].needed_in_flight == pytest.approx(1.0)


def test_to_dict_is_json_safe() -> None:
    doc = advise({"m": load(), "n": load(latency_s=None)}, backlog=5).to_dict()
    again = json.loads(json.dumps(doc))
    assert again["solvers"] == 1 and again["models"]["m"]["binding"] == "rpm"
    assert again["models"]["n"]["latency_s"] is None


def test_the_backlogs_mix_of_kinds_weighs_each_kinds_estimates() -> None:
    """A backlog of 30 summaries and 10 essays on a tpm-bound model: tokens per call are the
    mix of what the model learned per kind (20 and 800 output tokens, 1 s and 9 s), plus the
    input guess; a kind it has not learned counts at the model's own estimate."""
    kinds = {"summary": KindStats(20, 1000.0, 50, 0), "essay": KindStats(800, 9000.0, 50, 0)}
    m = ModelStats(model="m", quota=quota(tpm=60_000, rpm=600), requests=5, tokens=5000,
                   input_tokens=0, output_tokens=0, in_flight=0, output_estimate=500,
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
