"""The capacity bound on hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from llm_router_devkit.demo.fluid_bound import ModelCapacity, capacities, makespan_bound
from llm_router_devkit.simulator import SimulatorProfile


def cap(model: str, rpm=None, tpm=None, conc=None, tokens=100.0, latency=2.0, window=1.0):
    return ModelCapacity(model=model, window_s=window, rpm=rpm, tpm=tpm, max_concurrency=conc,
                         mean_tokens=tokens, mean_latency_s=latency)


def test_rate_is_the_tightest_limit() -> None:
    # rpm 60 per 2 s window -> 30/s; tpm 1000 / (2 s * 100 tokens) -> 5/s; 4 / 2 s -> 2/s
    c = cap("m", rpm=60, tpm=1000, conc=4, tokens=100, latency=2.0, window=2.0)
    assert c.rates() == {"rpm": 30.0, "tpm": 5.0, "concurrency": 2.0}
    assert (c.rate, c.binds) == (2.0, "concurrency")


def test_unlimited_fields_drop_out() -> None:
    assert cap("m", rpm=120).rates() == {"rpm": 120.0}
    free = cap("m")
    assert math.isinf(free.rate) and free.binds == "none"


def test_any_model_backlog_is_n_over_total_rate() -> None:
    caps = {"a": cap("a", rpm=2), "b": cap("b", rpm=8, latency=0.5)}
    bound = makespan_bound({None: 100}, caps)
    assert bound.fluid_s == pytest.approx(10.0)  # 100 / (2 + 8)
    assert bound.latency_s == 0.5  # the shortest mean latency
    assert bound.makespan_s == pytest.approx(10.5)
    assert bound.binding == (None,)


def test_a_preference_list_can_set_the_bound() -> None:
    # 10 tasks only for a (2/s): 5 s; all 20 on a + b (10/s): 2 s; 10 any: 1 s -> 5 s.
    caps = {"a": cap("a", rpm=2), "b": cap("b", rpm=8)}
    bound = makespan_bound({None: 10, ("a",): 10}, caps)
    assert bound.fluid_s == pytest.approx(5.0)
    assert bound.binding == (("a",),)


def test_unknown_models_in_a_list_are_ignored_but_an_empty_list_fails() -> None:
    caps = {"a": cap("a", rpm=4)}
    assert makespan_bound({("a", "gone"): 8}, caps).fluid_s == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no known model"):
        makespan_bound({("gone",): 1}, caps)


def test_capacities_follow_the_profile_and_time_scale() -> None:
    profile = SimulatorProfile.model_validate({
        "time_scale": 10, "seed": 3,
        "models": [{"name": "m", "median_s": 2.0, "sigma": 0.0, "min_s": 2.0, "max_s": 2.0,
                    "tail_rate": 0.0, "token_elasticity": 0.0, "output_tokens_sigma": 0.0,
                    "output_tokens_mean": 100, "rpm": 30, "tpm": 10_000,
                    "max_concurrency": 2}],
    })
    prompts = ["x" * 40, "y" * 80]  # 10 and 20 input tokens, 100 output tokens each
    c = capacities(profile, prompts)["m"]
    assert c.window_s == 6.0  # 60 s / 10
    assert c.mean_tokens == pytest.approx(115.0)
    assert c.mean_latency_s == pytest.approx(0.2)  # 2 s / 10
    # 30/6 = 5/s; 10000/(6*115) = 14.5/s; 2/0.2 = 10/s
    assert (c.rate, c.binds) == (pytest.approx(5.0), "rpm")
