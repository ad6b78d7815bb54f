"""The reference with costs unknown: hand-computed cases and random ones.

Each case would pass with a chooser that read the real draws only if the blind one were
clairvoyant: the straggler and the settled reservation are hand-computed against the real
reference, the refusals only happen to a scheduler that counts reservations, and on random
instances the decisions made before any call ends must not move when the draws do.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from llm_router_devkit.simulator.profile import SimulatorProfile
from llm_router_devkit.simulator.workload import mean_latency_s, output_tokens_quantile
from llm_router_devkit.yardstick import (
    Instance,
    Limits,
    Schedule,
    blind_reference_schedule,
    check_schedule,
    instance_from_profile,
    lp_bound,
    reference_schedule,
)
from tests.devkit.unit.yardstick.test_yardstick import _random_instance


def test_only_the_clairvoyant_reference_avoids_a_straggler() -> None:
    """``fast`` (one call at a time) is expected to take 1 s and ``slow`` 3 s; the first
    prompt's call on fast straggles (4 s). Costs known: the first goes to slow (ends 3 s),
    the second to fast (1 s): 3 s. Costs unknown: the first goes to fast (expected 1 s); the
    second waits for fast's expected end at 1 s (finishing at 2 s beats slow's 3 s), finds
    the call still running and expects it a second later each time it looks (finishing on
    fast stays a second ahead of slow), and takes fast when the call ends at 4 s: 5 s."""
    instance = Instance(cost=({"fast": (1, 4.0), "slow": (1, 3.0)},
                              {"fast": (1, 1.0), "slow": (1, 3.0)}),
                        limits={"fast": Limits(10.0, max_concurrency=1),
                                "slow": Limits(10.0)},
                        expected=({"fast": (1, 1.0), "slow": (1, 3.0)},) * 2)
    known = reference_schedule(instance)
    blind = blind_reference_schedule(instance)
    assert known.sends == (("slow", 0.0), ("fast", 0.0)) and known.makespan_s == 3.0
    assert blind.sends == (("fast", 0.0), ("fast", 4.0)) and blind.makespan_s == 5.0
    assert check_schedule(instance, blind) == [] and blind.refused == 0


def test_a_reservation_counts_until_its_call_ends_then_the_real_tokens() -> None:
    """tpm 100 per 10 s; each call writes 30 tokens in 2 s but reserves 40. Costs known, all
    three fit at once (90): 2 s. Unknown, the third's reservation does not fit beside two
    (120) until the first two end at 2 s and count their real 60: sent then, ends at 4 s
    (without the settling it would wait for the window: 12 s)."""
    instance = Instance(cost=({"m": (30, 2.0)},) * 3, limits={"m": Limits(10.0, tpm=100)},
                        expected=({"m": (40, 2.0)},) * 3)
    assert reference_schedule(instance).makespan_s == 2.0
    blind = blind_reference_schedule(instance)
    assert blind.sends == (("m", 0.0), ("m", 0.0), ("m", 2.0)) and blind.makespan_s == 4.0
    assert check_schedule(instance, blind) == []


def test_real_tokens_over_the_reservation_are_refused_and_tried_again() -> None:
    """tpm 100 per 10 s; each call writes 60 tokens but reserves 40. The second fits the
    scheduler's count (80) but not the backend's (120): refused at 0 s, and again when the
    first ends at 1 s (its real 60 + 40 reserved = 100 fit the count); sent when the first
    leaves the window at 10 s."""
    instance = Instance(cost=({"m": (60, 1.0)},) * 2, limits={"m": Limits(10.0, tpm=100)},
                        expected=({"m": (40, 1.0)},) * 2)
    blind = blind_reference_schedule(instance)
    assert blind.sends == (("m", 0.0), ("m", 10.0)) and blind.makespan_s == 11.0
    assert blind.refused == 2
    assert check_schedule(instance, blind) == []


def _spread(instance: Instance, rng: random.Random) -> Instance:
    """``instance``'s costs as what is expected, and real draws around them: latency from
    a fifth to 5x, tokens from half of the reservation to all of it."""
    real = tuple({m: (rng.randint(tokens // 2, tokens), latency * rng.choice([0.2, 0.5, 2.0, 5.0]))
                  for m, (tokens, latency) in options.items()} for options in instance.cost)
    return replace(instance, cost=real, expected=instance.cost)


def _before(schedule: Schedule, t: float) -> set[tuple[int, str, float]]:
    return {(i, m, s) for i, (m, s) in enumerate(schedule.sends) if s < t - 1e-9}


@pytest.mark.parametrize("seed", range(303, 314))
def test_the_choices_read_only_what_is_expected(seed: int) -> None:
    """With every draw at its expectation the blind reference is the reference. With the
    draws spread around the same expectations, every choice made before the first call
    ends (really or expectedly) is the same, and the schedule stays valid and no faster
    than the LP bound. (On these seeds a chooser reading the draws chooses differently
    before the first end; on 4 seeds of 300-329 it happens not to.)"""
    rng = random.Random(seed)
    base = _random_instance(rng, change=seed % 2 == 1)
    exact = replace(base, expected=base.cost)
    plan = lp_bound(exact).plan
    assert blind_reference_schedule(exact, plan) == reference_schedule(exact, plan)

    spread = _spread(base, rng)
    assert spread.as_expected() == exact
    blind = blind_reference_schedule(spread)
    assert check_schedule(spread, blind) == [] and blind.refused == 0
    assert lp_bound(spread).makespan_s <= blind.makespan_s + 1e-9
    expected = blind_reference_schedule(exact)
    first_end = min(min(s + spread.cost[i][m][1], s + exact.cost[i][m][1])
                    for i, (m, s) in enumerate(blind.sends))
    assert first_end > 0 and _before(blind, first_end)
    assert _before(blind, first_end) == _before(expected, first_end)


def test_reservations_short_of_the_real_tokens_keep_the_schedule_valid() -> None:
    """Random instances whose reservations are short of the real tokens for some calls: the
    backend refuses what would overrun a window, so every schedule obeys the limits, and
    none beats the LP bound."""
    refused = 0
    for seed in range(400, 412):
        rng = random.Random(seed)
        real = _random_instance(rng, change=seed % 2 == 1)
        short = tuple({m: (max(1, tokens - rng.randint(0, 150)), latency)
                       for m, (tokens, latency) in options.items()} for options in real.cost)
        instance = replace(real, expected=short)
        blind = blind_reference_schedule(instance)
        assert check_schedule(instance, blind) == []
        assert lp_bound(instance).makespan_s <= blind.makespan_s + 1e-9
        refused += blind.refused
    assert refused > 0


def test_the_instance_from_the_simulator_knows_the_distributions() -> None:
    """Expected: input + the 95th percentile of output (the reservation) and the mean
    latency, scaled as the draws are; without spread they are the draws, and the blind
    reference is the reference."""
    profile = SimulatorProfile.default(time_scale=10)
    instance = instance_from_profile(profile, ["why is the sky blue?"] * 2 + ["a" * 400])
    flash = profile.model("flash")
    assert flash is not None
    reserved, latency = instance.expected[2]["flash"]
    assert reserved == 100 + output_tokens_quantile(flash, 0.95)
    assert latency == pytest.approx(mean_latency_s(flash) / 10)
    assert instance.expected[0] == instance.expected[1]

    flat = profile.with_overrides(models=[
        m.model_copy(update={"sigma": 0.0, "output_tokens_sigma": 0.0, "tail_rate": 0.0})
        for m in profile.models])
    exact = instance_from_profile(flat, [f"prompt {k}" for k in range(30)])
    for options, known in zip(exact.cost, exact.expected, strict=True):
        assert known.keys() == options.keys()
        for m, (tokens, seconds) in options.items():
            assert known[m][0] == tokens and known[m][1] == pytest.approx(seconds)
    assert blind_reference_schedule(exact).makespan_s == \
        pytest.approx(reference_schedule(exact).makespan_s)


def test_expected_costs_name_the_prompt_s_models() -> None:
    with pytest.raises(ValueError, match="expected costs for"):
        Instance(cost=({"a": (1, 1.0)},), limits={"a": Limits(10.0), "b": Limits(10.0)},
                 expected=({"b": (1, 1.0)},))
    with pytest.raises(ValueError, match="no expected costs"):
        blind_reference_schedule(Instance(cost=({"a": (1, 1.0)},), limits={"a": Limits(10.0)}))
