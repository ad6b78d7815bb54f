"""The backend without HTTP: admission order, counters, timeline, reset and fault attempts."""

from __future__ import annotations

import pytest

from llm_router_devkit.simulator.profile import SimulatorProfile
from llm_router_devkit.simulator.provider import (
    Admission,
    Rejection,
    SimulatedBackend,
    UnknownModelError,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_backend(**profile: object) -> tuple[SimulatedBackend, FakeClock]:
    data = {
        "time_scale": 60.0,  # window of 1 s
        "models": [{"name": "m", "median_s": 1.0, "rpm": 2, "tpm": 100_000}],
        **profile,
    }
    clock = FakeClock()
    return SimulatedBackend(SimulatorProfile.model_validate(data), clock=clock), clock


def test_unknown_model() -> None:
    backend, _ = make_backend()
    with pytest.raises(UnknownModelError):
        backend.admit("nope", "p")


def test_counters_and_violations() -> None:
    backend, _ = make_backend()
    results = [backend.admit("m", f"p{i}") for i in range(5)]
    assert [isinstance(r, Admission) for r in results] == [True, True, False, False, False]
    refused = results[2]
    assert isinstance(refused, Rejection)
    assert refused.reason == "rpm"
    assert refused.retry_after_s == pytest.approx(1.0)
    stats = backend.stats()["models"]["m"]
    assert (stats["requests"], stats["accepted"], stats["rejected_429"]) == (5, 2, 3)
    assert stats["violations"] == {"rpm": 3, "tpm": 0, "concurrency": 0, "total": 3}
    assert stats["peak_offered_requests_in_window"] == 5
    assert stats["peak_accepted_requests_in_window"] == 2
    assert stats["in_flight"] == 2
    assert stats["limits"] == {"rpm": 2, "tpm": 100_000, "max_concurrency": None}
    assert backend.stats()["totals"]["violations"] == 3


def test_timeline_buckets_arrivals() -> None:
    backend, clock = make_backend()
    backend.admit("m", "a")
    clock.now += 0.6
    backend.admit("m", "b")
    backend.admit("m", "c")  # refused: "a" is still in the 1 s window
    backend.admit("m", "d")  # refused
    clock.now += 0.5
    line = backend.timeline(0.5)
    assert line["n_buckets"] == 3
    assert line["bucket_provider_s"] == pytest.approx(30)
    model = line["models"]["m"]
    assert model["requests"] == [1, 1, 0]
    assert model["rejected"] == [0, 2, 0]
    assert sum(model["tokens"]) == backend.stats()["models"]["m"]["tokens_accepted"]
    with pytest.raises(ValueError):
        backend.timeline(1e-9)


def test_stats_give_the_first_calls_exact_arrival_since_the_reset() -> None:
    backend, clock = make_backend(models=[
        {"name": "m", "median_s": 1.0, "rpm": 2, "tpm": 100_000},
        {"name": "n", "median_s": 1.0, "rpm": 2, "tpm": 100_000}])
    assert backend.stats()["first_arrival_s"] is None
    clock.now += 0.37
    backend.admit("n", "a")
    clock.now += 0.2
    backend.admit("m", "b")
    assert backend.stats()["first_arrival_s"] == pytest.approx(0.37)
    backend.reset()
    assert backend.stats()["first_arrival_s"] is None


def test_set_limits_keeps_omitted_fields_and_validates() -> None:
    backend, _ = make_backend()
    assert backend.set_limits("m", {"rpm": 5}).model_dump() == {
        "rpm": 5, "tpm": 100_000, "max_concurrency": None,
    }
    assert backend.set_limits("m", {"tpm": None}).tpm is None
    with pytest.raises(ValueError):
        backend.set_limits("m", {"rpm": 0})


def test_reset_clears_counters_windows_and_fault_attempts() -> None:
    backend, _ = make_backend(error_rate=0.5)
    first = [backend.admit("m", "same prompt") for _ in range(2)]
    backend.reset()
    assert backend.stats()["models"]["m"]["requests"] == 0
    again = [backend.admit("m", "same prompt") for _ in range(2)]
    assert all(isinstance(a, Admission) for a in first + again)
    assert [a.fault for a in first] == [a.fault for a in again]  # type: ignore[union-attr]


async def test_run_reports_usage_and_frees_the_slot() -> None:
    backend, _ = make_backend(time_scale=6000.0)
    admission = backend.admit("m", "hello there")
    assert isinstance(admission, Admission)
    outcome = await backend.run(admission)
    assert outcome.status == 200
    assert outcome.body["usage"] == {
        "input_tokens": admission.draw.input_tokens,
        "output_tokens": admission.draw.output_tokens,
    }
    assert backend.limiters["m"].in_flight == 0
    assert backend.stats()["models"]["m"]["completed"] == 1


async def test_a_truncate_fault_is_charged_and_counted_apart_from_completed() -> None:
    backend, _ = make_backend(time_scale=6000.0, truncate_rate=1.0)
    admission = backend.admit("m", "hello there")
    assert isinstance(admission, Admission)
    outcome = await backend.run(admission)
    assert (outcome.status, outcome.truncated) == (200, True)
    assert outcome.body["answer"]  # the whole answer, for the HTTP layer to cut
    stats = backend.stats()
    m = stats["models"]["m"]
    assert (m["accepted"], m["completed"], m["truncated"]) == (1, 0, 1)
    assert m["tokens_accepted"] == admission.draw.total_tokens
    assert stats["totals"]["truncated"] == 1
    assert backend.limiters["m"].in_flight == 0


async def test_an_answer_lost_with_its_batch_moves_from_completed_to_truncated() -> None:
    backend, _ = make_backend(time_scale=6000.0)
    admission = backend.admit("m", "hello there")
    assert isinstance(admission, Admission)
    outcome = await backend.run(admission)
    assert not outcome.truncated
    backend.lost_with_batch(admission)
    m = backend.stats()["models"]["m"]
    assert (m["completed"], m["truncated"], m["mean_latency_s"]) == (0, 1, None)
