"""The workloads: sizes, routing constraints, events, determinism."""

from __future__ import annotations

from bench.e2e.workloads import build
from llm_router_devkit.simulator import SimulatorProfile

MODELS = [m.name for m in SimulatorProfile.default().models]


def test_w1_and_w2_share_their_prompts_and_differ_in_routing() -> None:
    w1, w2 = build("W1", 1, MODELS), build("W2", 1, MODELS)
    assert w1.size == w2.size == 2000
    assert [t.prompt for t in w1.tasks] == [t.prompt for t in w2.tasks]
    assert all(t.allowed_models is None and t.priority == "bulk" for t in w1.tasks)
    lists = [t.allowed_models for t in w2.tasks if t.allowed_models]
    assert 300 < len(lists) < 1000 and all(len(a) >= 2 for a in lists)  # each can overflow


def test_w3_changes_a_quota_and_w4_brings_hot_prompts_during_the_drain() -> None:
    w3, w4 = build("W3", 1, MODELS), build("W4", 1, MODELS)
    assert w3.size == 4000 and w3.quota_change is not None
    assert w3.quota_change.factor == 0.5
    assert len(w4.initial) == 5000 and len(w4.arrivals) == 20
    hot = [t for a in w4.arrivals for t in a.tasks]
    assert len(hot) == 100 and all(t.priority == "hot" for t in hot)
    assert not {t.prompt for t in hot} & {t.prompt for t in w4.initial}
    times = [a.at_windows for a in w4.arrivals]
    assert times == sorted(times) and times[0] > 0


def test_workloads_are_deterministic() -> None:
    assert build("W4", 3, MODELS) == build("W4", 3, MODELS)
    assert build("W1", 3, MODELS) != build("W1", 4, MODELS)
