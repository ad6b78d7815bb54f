"""The LP lower bound and the reference schedule on hand-computed cases and random ones."""

from __future__ import annotations

import math
import random

import pytest

from llm_router_devkit.simulator.profile import SimulatorProfile
from llm_router_devkit.yardstick import (
    Instance,
    Limits,
    Schedule,
    check_preferences,
    check_schedule,
    instance_from_profile,
    lp_bound,
    reference_schedule,
)
from llm_router_devkit.yardstick.reference import checked


def _one_model(latencies: list[float], **limits: int) -> Instance:
    return Instance(cost=tuple({"m": (10, lat)} for lat in latencies),
                    limits={"m": Limits(window_s=10.0, **limits)})


def _both(instance: Instance) -> tuple[float, float]:
    bound = lp_bound(instance)
    reference = reference_schedule(instance, bound.plan)
    assert check_schedule(instance, reference) == []
    return bound.makespan_s, reference.makespan_s


def test_windows_are_counted_step_by_step() -> None:
    """rpm 2 per 10 s: 2 calls at 0, 2 at 10, 1 at 20, each 1 s: nothing beats 21 s."""
    lp, ref = _both(_one_model([1.0] * 5, rpm=2))
    assert ref == pytest.approx(21.0)
    assert 21.0 * 0.99 <= lp <= 21.0


def test_a_full_window_may_go_at_once() -> None:
    """The first-window burst: 20 calls under rpm 20 all go at time 0 (a smoothed rate of
    2 per second would take 10 s)."""
    lp, ref = _both(_one_model([1.0] * 20, rpm=20))
    assert lp == pytest.approx(1.0) and ref == pytest.approx(1.0)


def test_concurrency_is_a_bound_on_busy_time() -> None:
    lp, ref = _both(_one_model([1.0, 2.0, 3.0], max_concurrency=1))
    assert ref == pytest.approx(6.0) and 6.0 * 0.99 <= lp <= 6.0


def test_tokens_weigh_each_call() -> None:
    instance = Instance(cost=({"m": (60, 1.0)}, {"m": (60, 1.0)}),
                        limits={"m": Limits(window_s=10.0, tpm=100)})
    lp, ref = _both(instance)
    assert ref == pytest.approx(11.0) and lp >= 11.0 * 0.99


def test_arrivals_and_a_limit_change() -> None:
    late = Instance(cost=({"m": (1, 1.0)},), limits={"m": Limits(10.0, rpm=5)},
                    arrivals_s=(5.0,))
    assert _both(late)[1] == pytest.approx(6.0) and lp_bound(late).makespan_s == 6.0
    halved = Instance(cost=tuple({"m": (1, 1.0)} for _ in range(6)),
                      limits={"m": Limits(10.0, rpm=4)},
                      limits_after={"m": Limits(10.0, rpm=1)}, change_at_s=10.0)
    lp, ref = _both(halved)  # 4 in [0, 10), then one per window
    assert ref == pytest.approx(21.0) and lp >= 21.0 * 0.99


def test_the_reference_spreads_work_over_models() -> None:
    instance = Instance(cost=tuple({"fast": (1, 1.0), "slow": (1, 3.0)} for _ in range(4)),
                        limits={"fast": Limits(10.0, rpm=2), "slow": Limits(10.0, rpm=2)})
    lp, ref = _both(instance)
    assert ref == pytest.approx(3.0)  # two on each at once beats waiting a window
    assert 3.0 * 0.99 <= lp <= 3.0


@pytest.mark.parametrize(("n", "rpm", "latency"), [
    (1, 1, 0.5), (7, 3, 2.0), (12, 4, 0.3), (9, 9, 4.0), (25, 6, 12.0), (40, 7, 1.0)])
def test_one_model_bound_by_rpm_meets_the_exact_optimum(n: int, rpm: int,
                                                         latency: float) -> None:
    """n equal calls under rpm r per window W: full windows go at once, so the best makespan
    is exactly (ceil(n / r) - 1) W + L (the last window's calls start (ceil(n/r) - 1) W in
    and take L). A lower bound above it would not be one; the reference reaches it."""
    optimum = (math.ceil(n / rpm) - 1) * 10.0 + latency
    lp, ref = _both(_one_model([latency] * n, rpm=rpm))
    assert ref == pytest.approx(optimum)
    assert optimum * 0.99 <= lp <= optimum + 1e-9


def _random_instance(rng: random.Random, change: bool) -> Instance:
    models = {f"m{k}": Limits(window_s=rng.choice([2.0, 5.0]),
                              rpm=rng.choice([None, 3, 8]),
                              tpm=rng.choice([None, 400, 1000]),
                              max_concurrency=rng.choice([None, 2, 4]))
              for k in range(3)}
    cost = []
    for _ in range(rng.randint(5, 40)):
        allowed = rng.sample(sorted(models), rng.randint(1, 3))
        cost.append({m: (rng.randint(20, 300), rng.uniform(0.2, 3.0)) for m in allowed})
    arrivals = tuple(rng.choice([0.0, 0.0, rng.uniform(0, 6)]) for _ in cost)
    after: dict[str, Limits] = {}
    if change:  # one or two models' limits lowered or raised, inside a window or on its edge
        for m in rng.sample(sorted(models), rng.randint(1, 2)):
            old = models[m]
            factor = rng.choice([0.5, 0.25, 2.0])

            def scaled(v: int | None, f: float = factor) -> int | None:
                return None if v is None else max(1, int(v * f))

            tpm = scaled(old.tpm)  # a prompt of 300 tokens must still fit
            after[m] = Limits(old.window_s, scaled(old.rpm), tpm and max(tpm, 300),
                              scaled(old.max_concurrency))
    return Instance(cost=tuple(cost), limits=models, arrivals_s=arrivals,
                    limits_after=after,
                    change_at_s=rng.choice([2.0, 3.3, 5.0, 7.9]) if change else None)


@pytest.mark.parametrize("seed", range(12))
def test_bound_below_reference_on_random_instances(seed: int) -> None:
    instance = _random_instance(random.Random(seed), change=False)
    bound = lp_bound(instance)
    reference = reference_schedule(instance, bound.plan)
    assert check_schedule(instance, reference) == []
    assert bound.trivial_s <= bound.makespan_s <= reference.makespan_s + 1e-9


def test_sends_before_a_change_inside_a_window_count_under_the_old_limit() -> None:
    """rpm 4, lowered to 1 at 5 s, inside the first 10 s window: all four calls may go at
    time 0, under the limit then in force, and end at 1 s. A bound that held the whole
    first window to the new limit would claim 31 s."""
    instance = Instance(cost=tuple({"m": (1, 1.0)} for _ in range(4)),
                        limits={"m": Limits(10.0, rpm=4)},
                        limits_after={"m": Limits(10.0, rpm=1)}, change_at_s=5.0)
    lp, ref = _both(instance)
    assert ref == pytest.approx(1.0) and lp == pytest.approx(1.0)


def test_sends_after_a_change_inside_a_window_count_under_the_new_limit() -> None:
    """rpm 4, cut to 2 at 5 s; four calls arrive at 6 s. After the cut a window holds at most
    two: two go at 6 s, two at 16 s, the last ends at 17 s. The interval [0, 10) is held to
    what the new limit allows of its sends from the cut on (2), not to the old limit (4),
    so the bound sees at least one more interval: >= 11 s."""
    instance = Instance(cost=tuple({"m": (1, 1.0)} for _ in range(4)),
                        limits={"m": Limits(10.0, rpm=4)},
                        limits_after={"m": Limits(10.0, rpm=2)}, change_at_s=5.0,
                        arrivals_s=(6.0,) * 4)
    lp, ref = _both(instance)
    assert ref == pytest.approx(17.0)
    assert 11.0 * 0.99 <= lp <= ref


def test_a_raise_inside_a_window_counts_the_earlier_sends_too() -> None:
    """rpm 2, raised to 3 at 5 s: two calls at 0 s, then one more fits before 10 s (the
    window holds 3 from the raise on), the fourth at 10 s: ends 11 s."""
    instance = Instance(cost=tuple({"m": (1, 1.0)} for _ in range(4)),
                        limits={"m": Limits(10.0, rpm=2)},
                        limits_after={"m": Limits(10.0, rpm=3)}, change_at_s=5.0)
    lp, ref = _both(instance)
    assert ref == pytest.approx(11.0)
    assert 11.0 * 0.99 <= lp <= ref


@pytest.mark.parametrize("seed", range(100, 112))
def test_bound_below_reference_with_a_limit_change(seed: int) -> None:
    """The window interval that holds the change takes the larger of both limits; every
    interval after it the new one. A reference schedule that obeys the limits in force at
    each send (checked) is never faster than the bound."""
    instance = _random_instance(random.Random(seed), change=True)
    bound = lp_bound(instance)
    reference = reference_schedule(instance, bound.plan)
    assert check_schedule(instance, reference) == []
    assert bound.trivial_s <= bound.makespan_s <= reference.makespan_s + 1e-9


def test_the_checker_finds_a_broken_schedule() -> None:
    instance = _one_model([1.0] * 3, rpm=2, max_concurrency=2)
    broken = Schedule(sends=(("m", 0.0), ("m", 0.0), ("m", 0.5)), makespan_s=1.5, order="x")
    problems = check_schedule(instance, broken)
    assert any("3 sends in the window" in p for p in problems)
    assert any("3 calls in flight" in p for p in problems)


def test_instance_from_the_simulator_uses_its_draws() -> None:
    profile = SimulatorProfile.default(time_scale=10)
    instance = instance_from_profile(profile, ["why is the sky blue?"] * 2,
                                     [None, ("flash", "nope")])
    assert set(instance.cost[0]) == {m.name for m in profile.models}
    assert set(instance.cost[1]) == {"flash"}  # unknown models are dropped
    assert instance.cost[0]["flash"] == instance.cost[1]["flash"]  # same prompt, same cost
    assert instance.limits["flash"].window_s == profile.scaled_window_s


def test_an_lp_without_a_verdict_never_raises_the_bound(monkeypatch: pytest.MonkeyPatch,
                                                        ) -> None:
    """HiGHS can end with model status Unknown on a hard LP: every algorithm is tried, and
    a T no solver proved infeasible counts as feasible (the bound stays a bound)."""
    import importlib
    from types import SimpleNamespace

    module = importlib.import_module("llm_router_devkit.yardstick.lp_bound")

    methods: list[str] = []

    def undecided(*args: object, method: str, **kwargs: object) -> SimpleNamespace:
        methods.append(method)
        return SimpleNamespace(status=4, message="model_status is Unknown")

    monkeypatch.setattr(module, "linprog", undecided)
    instance = _one_model([1.0] * 5, rpm=2)  # truly 21 s
    bound = lp_bound(instance)
    assert bound.makespan_s == bound.trivial_s == 1.0 and bound.plan == ()
    assert methods == ["highs-ipm", "highs-ds", "highs"]


def _slow_first(preference: tuple[str, ...] = ("slow", "fast")) -> Instance:
    """Three equal prompts that list a slow model first and a fast one second; each model
    takes one send per 10 s window."""
    return Instance(cost=tuple({"slow": (1, 5.0), "fast": (1, 1.0)} for _ in range(3)),
                    limits={"slow": Limits(10.0, rpm=1), "fast": Limits(10.0, rpm=1)},
                    preference=(preference,) * 3 if preference else ())


def test_keeping_the_preference_order_sends_to_the_first_model_with_room() -> None:
    """Kept in order: the first prompt to slow (it has room), the second overflows to fast
    (slow is full), the third finds both full, waits for the next window (10 s), where both
    have room, and takes slow, its first choice: ends at 15 s. As a set, the fast model
    takes the first and the third (10 s), slow the second: ends at 11 s, which no schedule
    beats (two sends fit before 10 s), and which no preference-keeping one reaches."""
    instance = _slow_first()
    bound = lp_bound(instance)
    as_set = reference_schedule(instance, bound.plan)
    kept = reference_schedule(instance, bound.plan, ordered=True)
    assert as_set.makespan_s == pytest.approx(11.0)
    assert kept.sends == (("slow", 0.0), ("fast", 0.0), ("slow", 10.0))
    assert kept.makespan_s == pytest.approx(15.0)
    assert check_schedule(instance, kept) == []
    assert bound.makespan_s <= as_set.makespan_s + 1e-9


def test_a_prompt_waits_for_the_first_moment_any_model_of_its_list_has_room() -> None:
    """The second prompt finds both models busy (concurrency 1) and goes to fast when fast
    frees at 1 s, although slow comes first in its list: slow has no room until 5 s."""
    instance = Instance(cost=tuple({"slow": (1, 5.0), "fast": (1, 1.0)} for _ in range(3)),
                        limits={"slow": Limits(10.0, max_concurrency=1),
                                "fast": Limits(10.0, max_concurrency=1)},
                        preference=(("slow", "fast"),) * 3)
    kept = reference_schedule(instance, ordered=True)
    assert kept.sends == (("slow", 0.0), ("fast", 0.0), ("fast", 1.0))
    assert kept.makespan_s == pytest.approx(5.0)
    assert check_schedule(instance, kept) == []


def test_without_ordered_lists_both_references_agree() -> None:
    """The option changes nothing where no prompt has an ordered list, and an instance's
    lists are ignored unless it is asked for."""
    plain = _slow_first(preference=())
    assert reference_schedule(plain, ordered=True) == reference_schedule(plain)
    assert reference_schedule(_slow_first()) == reference_schedule(plain)
    for seed in range(6):
        instance = _random_instance(random.Random(seed), change=seed % 2 == 1)
        plan = lp_bound(instance).plan
        assert reference_schedule(instance, plan, ordered=True) == \
            reference_schedule(instance, plan)


@pytest.mark.parametrize("seed", range(200, 212))
def test_preference_keeping_schedules_are_valid_and_above_the_bound(seed: int) -> None:
    """Random instances where some prompts list their models in a random order: the
    preference-keeping reference obeys every limit, and sends each prompt to a model of
    its list."""
    rng = random.Random(seed)
    instance = _random_instance(rng, change=seed % 2 == 1)
    preference = tuple(tuple(rng.sample(sorted(c), len(c))) if rng.random() < 0.5 else ()
                       for c in instance.cost)
    instance = Instance(cost=instance.cost, limits=instance.limits,
                        limits_after=instance.limits_after, change_at_s=instance.change_at_s,
                        arrivals_s=instance.arrivals_s, preference=preference)
    bound = lp_bound(instance)
    kept = reference_schedule(instance, bound.plan, ordered=True)
    assert check_schedule(instance, kept) == []
    assert bound.makespan_s <= kept.makespan_s + 1e-9


def test_a_preference_names_the_prompt_s_models_once() -> None:
    with pytest.raises(ValueError, match="must name each of its models once"):
        Instance(cost=({"a": (1, 1.0), "b": (1, 1.0)},),
                 limits={"a": Limits(10.0), "b": Limits(10.0)}, preference=(("a",),))
    with pytest.raises(ValueError, match="one list per prompt"):
        Instance(cost=({"a": (1, 1.0)},), limits={"a": Limits(10.0)},
                 preference=(("a",), ("a",)))


def test_instance_from_the_simulator_keeps_ordered_lists() -> None:
    profile = SimulatorProfile.default(time_scale=10)
    prompts = ["why is the sky blue?"] * 3
    allowed = [None, ("chat-large", "nope", "flash"), ("flash",)]
    ordered = instance_from_profile(profile, prompts, allowed, ordered=True)
    assert ordered.preference == ((), ("chat-large", "flash"), ("flash",))
    assert ordered.ordered
    assert instance_from_profile(profile, prompts, allowed).preference == ()
    assert instance_from_profile(profile, prompts, None, ordered=True).preference == ()


def test_a_listed_prompt_is_held_for_its_first_choice_when_that_finishes_sooner() -> None:
    """fast takes one call a window (10 s), slow is 20 s a call. Sent to the first model
    with room, the second prompt overflows to slow at 0 and ends at 20 s; held for fast's
    next window it ends at 11 s, the best any preference-keeping schedule does (fast
    takes one of the two in each window, slow ends at 20 s at the soonest)."""
    instance = Instance(cost=tuple({"fast": (1, 1.0), "slow": (1, 20.0)} for _ in range(2)),
                        limits={"fast": Limits(10.0, rpm=1), "slow": Limits(10.0, rpm=1)},
                        preference=(("fast", "slow"),) * 2)
    kept = reference_schedule(instance, ordered=True)
    assert kept.sends == (("fast", 0.0), ("fast", 10.0))
    assert kept.makespan_s == pytest.approx(11.0)
    assert check_preferences(instance, kept) == []


def _slow_where_first() -> Instance:
    """x is slow on its first choice A, fast on B; y the other way round; A and B take
    one call each per 100 s, and both list A first."""
    return Instance(cost=({"A": (1, 30.0), "B": (1, 1.0)}, {"A": (1, 1.0), "B": (1, 30.0)}),
                    limits={"A": Limits(100.0, rpm=1), "B": Limits(100.0, rpm=1)},
                    preference=(("A", "B"),) * 2)


def test_a_prompt_aimed_at_a_later_model_waits_until_the_earlier_one_is_full() -> None:
    """The optimum, 1 s: y takes A at 0, which fills it, and x then overflows to B at once,
    keeping the rule. Sending x to the first model with room (A, 30 s) cannot reach it;
    holding x along the LP plan (x on B, y on A) does."""
    instance = _slow_where_first()
    bound = lp_bound(instance)
    assert bound.plan[0]["B"] == pytest.approx(1.0) and bound.plan[1]["A"] == pytest.approx(1.0)
    assert reference_schedule(instance, ordered=True).makespan_s == pytest.approx(30.0)
    kept = reference_schedule(instance, bound.plan, ordered=True)
    assert kept.sends == (("B", 0.0), ("A", 0.0))
    assert kept.sequence == (1, 0)  # y first: A was full when x went to B
    assert kept.makespan_s == pytest.approx(1.0)
    assert check_preferences(instance, kept) == []


def test_the_checker_finds_a_broken_preference_and_a_missing_send() -> None:
    """The same sends in the other order break the rule: x went to B while A had room. A
    schedule that leaves a prompt out is no schedule of the instance; a reference that
    breaks its rule fails loudly."""
    instance = _slow_where_first()
    swapped = Schedule(sends=(("B", 0.0), ("A", 0.0)), makespan_s=1.0, order="by hand",
                       sequence=(0, 1))
    assert check_schedule(instance, swapped) == []
    assert check_preferences(instance, swapped) == [
        "prompt 0 sent to B at 0.000 while A, earlier in its list, could take it"]
    short = Schedule(sends=(("A", 0.0),), makespan_s=30.0, order="by hand")
    assert check_schedule(instance, short) == ["1 sends for 2 prompts"]
    with pytest.raises(RuntimeError, match="breaks the rule it keeps: prompt 0 sent to B"):
        checked(instance, swapped, ordered=True)
    assert checked(instance, swapped) is swapped  # the limits alone hold
