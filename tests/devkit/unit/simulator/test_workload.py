"""Deterministic draws: the same prompt costs the same, and the distributions look as set."""

from __future__ import annotations

import statistics

import pytest

from llm_router_devkit.simulator.profile import ModelProfile, SimulatorProfile
from llm_router_devkit.simulator.workload import (
    Fault,
    count_input_tokens,
    draw,
    draw_fault,
    mean_latency_s,
    output_tokens_quantile,
    prompt_key,
)


@pytest.fixture
def profile() -> SimulatorProfile:
    return SimulatorProfile.default(seed=1)


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 1), ("abc", 1), ("abcd", 1), ("abcdefgh", 2), ("x" * 4001, 1000)]
)
def test_count_input_tokens(text: str, tokens: int) -> None:
    assert count_input_tokens(text) == tokens


def test_same_seed_model_prompt_gives_the_same_draw(profile: SimulatorProfile) -> None:
    model = profile.models[0]
    assert draw(profile, model, "summarise this") == draw(profile, model, "summarise this")
    again = SimulatorProfile.default(seed=1, time_scale=600)  # the clock does not matter
    assert draw(again, again.models[0], "summarise this") == draw(profile, model, "summarise this")


def test_seed_model_and_prompt_all_matter(profile: SimulatorProfile) -> None:
    model = profile.models[0]
    base = draw(profile, model, "p")
    other_seed = SimulatorProfile.default(seed=2)
    assert draw(other_seed, other_seed.models[0], "p").key != base.key
    assert prompt_key(1, profile.models[1].name, "p") != base.key
    draws = {(d.output_tokens, d.latency_s) for d in
             (draw(profile, model, f"prompt {i}") for i in range(200))}
    assert len(draws) > 190


@pytest.mark.parametrize("name", ["flash", "chat-large", "reasoner-large"])
def test_distributions_are_roughly_as_configured(profile: SimulatorProfile, name: str) -> None:
    model = profile.model(name)
    assert model is not None
    draws = [draw(profile, model, f"task {i}: please answer") for i in range(4000)]
    latencies = [d.latency_s for d in draws]
    tokens = [d.output_tokens for d in draws]
    assert statistics.median(latencies) == pytest.approx(model.median_s, rel=0.1)
    assert statistics.fmean(tokens) == pytest.approx(model.output_tokens_mean, rel=0.1)
    assert min(latencies) >= model.min_s
    assert max(latencies) <= model.max_s
    assert max(latencies) >= min(model.max_s, 2 * model.median_s)  # a heavy tail


@pytest.mark.parametrize(("name", "cap"), [("flash", None), ("coder", None),
                                           ("reasoner-large", 1000)])
def test_what_is_known_before_a_call_matches_the_draws(profile: SimulatorProfile, name: str,
                                                       cap: int | None) -> None:
    """The mean latency and the output's 95th percentile, computed from the profile, are
    those of the draws (the tail, the clipping and an output cap included)."""
    model = profile.model(name)
    assert model is not None
    draws = [draw(profile, model, f"task {i}", cap) for i in range(8000)]
    assert statistics.fmean(d.latency_s for d in draws) == \
        pytest.approx(mean_latency_s(model, max_output_tokens=cap), rel=0.03)
    tokens = sorted(d.output_tokens for d in draws)
    assert tokens[int(0.95 * len(tokens))] == \
        pytest.approx(output_tokens_quantile(model, 0.95, max_output_tokens=cap), rel=0.03)


def test_latency_grows_with_output_tokens(profile: SimulatorProfile) -> None:
    model = profile.model("chat-medium")
    assert model is not None
    draws = sorted((draw(profile, model, f"q{i}") for i in range(2000)),
                   key=lambda d: d.output_tokens)
    short = statistics.median(d.latency_s for d in draws[:500])
    long = statistics.median(d.latency_s for d in draws[-500:])
    assert long > short


def test_max_output_tokens_caps_the_draw(profile: SimulatorProfile) -> None:
    model = profile.model("reasoner-large")
    assert model is not None
    free = draw(profile, model, "think hard")
    capped = draw(profile, model, "think hard", max_output_tokens=10)
    assert capped.output_tokens == 10 < free.output_tokens
    assert capped.latency_s <= free.latency_s
    assert capped.total_tokens == capped.input_tokens + 10


def test_clipping_to_model_range() -> None:
    model = ModelProfile(
        name="m", median_s=1, sigma=3, min_s=0.5, max_s=2, output_tokens_mean=100,
        output_tokens_sigma=3, output_tokens_min=10, output_tokens_max=200,
    )
    profile = SimulatorProfile(models=[model])
    draws = [draw(profile, model, str(i)) for i in range(500)]
    assert all(0.5 <= d.latency_s <= 2 for d in draws)
    assert all(10 <= d.output_tokens <= 200 for d in draws)


def test_faults_are_deterministic_per_attempt() -> None:
    key = prompt_key(1, "m", "p")
    never = SimulatorProfile.default()
    assert draw_fault(never, key, 0) is Fault.NONE
    always = SimulatorProfile.default(error_rate=1.0)
    assert all(draw_fault(always, key, a) is Fault.ERROR for a in range(20))
    hang = SimulatorProfile.default(timeout_rate=1.0)
    assert draw_fault(hang, key, 0) is Fault.TIMEOUT
    half = SimulatorProfile.default(error_rate=0.25, timeout_rate=0.25)
    outcomes = [draw_fault(half, key, a) for a in range(2000)]
    assert outcomes == [draw_fault(half, key, a) for a in range(2000)]
    assert outcomes.count(Fault.NONE) / 2000 == pytest.approx(0.5, abs=0.05)
    assert outcomes.count(Fault.ERROR) / 2000 == pytest.approx(0.25, abs=0.05)


def test_truncate_faults_take_their_own_share_after_errors_and_timeouts() -> None:
    key = prompt_key(1, "m", "p")
    cut = SimulatorProfile.default(truncate_rate=1.0)
    assert all(draw_fault(cut, key, a) is Fault.TRUNCATED for a in range(20))
    thirds = SimulatorProfile.default(error_rate=0.1, timeout_rate=0.1, truncate_rate=0.1)
    outcomes = [draw_fault(thirds, key, a) for a in range(3000)]
    for fault in (Fault.ERROR, Fault.TIMEOUT, Fault.TRUNCATED):
        assert outcomes.count(fault) / 3000 == pytest.approx(0.1, abs=0.03), fault
    # Adding truncations leaves the errors and timeouts of each attempt where they were.
    before = SimulatorProfile.default(error_rate=0.1, timeout_rate=0.1)
    assert all(draw_fault(before, key, a) is f for a, f in enumerate(outcomes)
               if f is not Fault.TRUNCATED)


def test_a_prompt_prefix_scales_its_output() -> None:
    model = ModelProfile(name="m", median_s=1.0, sigma=0.3, min_s=0.1, max_s=10.0,
                         output_tokens_mean=400, output_tokens_sigma=0.3,
                         output_tokens_max=10_000)
    profile = SimulatorProfile(models=[model],
                               output_scale_by_prefix={"summary:": 0.1, "essay:": 2.0})
    mean = {p: statistics.mean(draw(profile, model, f"{p} {i}").output_tokens
                               for i in range(300))
            for p in ("summary:", "essay:", "plain")}
    assert 30 < mean["summary:"] < 50
    assert 700 < mean["essay:"] < 900
    assert 350 < mean["plain"] < 450
    with pytest.raises(ValueError, match="output_scale_by_prefix"):
        SimulatorProfile(models=[model], output_scale_by_prefix={"x": 0})
