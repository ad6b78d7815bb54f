"""The benchmark's bound: preference groups (Hall), a capacity change, arrivals."""

from __future__ import annotations

import pytest

from bench.e2e.bound import halved, phased_bound, release_bound
from llm_router_devkit.demo.fluid_bound import ModelCapacity, makespan_bound


def cap(model: str, rpm: int, latency_s: float = 0.5) -> ModelCapacity:
    """A model whose rate is ``rpm`` calls per second (window 1 s, rpm binding)."""
    return ModelCapacity(model=model, window_s=1.0, rpm=rpm, tpm=None, max_concurrency=None,
                         mean_tokens=100.0, mean_latency_s=latency_s)


CAPACITY = {"a": cap("a", 2), "b": cap("b", 1)}


def test_a_group_held_to_a_scarce_model_sets_the_bound() -> None:
    # 6 tasks only b may serve (1/s): 6 s, although all 9 together need only 9/3 = 3 s.
    bound = phased_bound({("b",): 6, None: 3}, CAPACITY)
    assert bound.fluid_s == pytest.approx(6.0)
    assert bound.binding == (("b",),)
    assert bound.makespan_s == pytest.approx(6.5)  # plus one call of the shortest latency


def test_an_overflow_list_lets_the_group_use_both_models() -> None:
    bound = phased_bound({("b", "a"): 6, None: 3}, CAPACITY)
    assert bound.fluid_s == pytest.approx(3.0)


def test_without_a_change_it_agrees_with_the_demo_bound() -> None:
    groups = {("b",): 6, ("a",): 1, None: 3}
    assert phased_bound(groups, CAPACITY).fluid_s == pytest.approx(
        makespan_bound(groups, CAPACITY).fluid_s)


def test_a_capacity_halved_mid_run_slows_what_is_left() -> None:
    after = {**CAPACITY, "a": halved(CAPACITY["a"], 0.5)}
    assert after["a"].rpm == 1
    # 3/s for 1 s serves 3 tasks; the other 6 at 2/s take 3 s more.
    assert phased_bound({None: 9}, CAPACITY, after, 1.0).fluid_s == pytest.approx(4.0)
    # Work done before the change is unaffected by it.
    assert phased_bound({None: 3}, CAPACITY, after, 1.0).fluid_s == pytest.approx(1.0)


def test_halved_keeps_unlimited_fields_unlimited_and_at_least_one() -> None:
    c = ModelCapacity("x", 1.0, rpm=1, tpm=None, max_concurrency=3, mean_tokens=1.0,
                      mean_latency_s=1.0)
    h = halved(c, 0.5)
    assert (h.rpm, h.tpm, h.max_concurrency) == (1, None, 1)


def test_late_arrivals_can_set_the_bound() -> None:
    # 3 at 0 and 6 at 2 s on 3/s: the machine idles from 1 s to 2 s, then needs 2 s.
    assert release_bound([(0.0, 3), (2.0, 6)], CAPACITY).fluid_s == pytest.approx(4.0)
    # Arrivals the backlog hides behind it change nothing: 9 tasks at 3/s.
    assert release_bound([(0.0, 6), (1.0, 3)], CAPACITY).fluid_s == pytest.approx(3.0)
