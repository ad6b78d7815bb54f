"""Admission decisions: limits, waits, model choice, idempotency, impossible requests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, Rejection, Wait
from airflow_llm_router.exceptions import ImpossibleRequestError
from llm_router_devkit.stack import wait_for

BIG = {"rpm": 10**6, "tpm": 10**9, "max_concurrency": 10**5}


def test_rpm_limit_then_wait_until_oldest_leaves(
    make_router: Callable[..., RouterClient],
) -> None:
    # without jitter, so the wait is the engine's own (stretched by up to a tenth of
    # window + guard, it could exceed a bound that left the guard out)
    router = make_router(jitter=0)
    router.set_quota("a", {"rpm": 3, "tpm": 10**6, "max_concurrency": 100, "window_s": 10})
    decisions = [router.admit(10) for _ in range(4)]
    assert [type(d) for d in decisions] == [Admission] * 3 + [Wait]
    wait = decisions[3]
    assert isinstance(wait, Wait)
    assert wait.reason == "rpm"
    # the oldest admission leaves the window after window + the model's guard, less the
    # time since it was admitted
    assert 9_000 < wait.retry_after_ms <= 10_000 + router.stats().models["a"].guard_ms


def test_tpm_limit_counts_estimates(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 250, "max_concurrency": 100, "window_s": 10})
    assert isinstance(router.admit(100), Admission)
    assert isinstance(router.admit(100), Admission)
    wait = router.admit(100)
    assert isinstance(wait, Wait) and wait.reason == "tpm"
    assert isinstance(router.admit(50), Admission)  # a smaller one still fits


def test_settling_replaces_estimate_with_actual(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 300, "max_concurrency": 100, "window_s": 10})
    first = router.admit(200)
    assert isinstance(first, Admission)
    assert isinstance(router.admit(200), Wait)
    assert router.complete(first.lease_id, 30, 20) == "released"
    assert router.stats().models["a"].tokens == 50
    assert isinstance(router.admit(200), Admission)


def test_concurrency_limit_and_release(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 2})
    a, b = router.admit(1), router.admit(1)
    assert isinstance(a, Admission) and isinstance(b, Admission)
    wait = router.admit(1)
    assert isinstance(wait, Wait) and wait.reason == "concurrency"
    router.complete(a.lease_id, 1, 0)
    assert isinstance(router.admit(1), Admission)


def test_separate_input_and_output_limits(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 10_000, "max_concurrency": 100,
                           "input_tpm": 1000, "output_tpm": 100})
    ok = router.admit(500, estimated_output_tokens=80)
    assert isinstance(ok, Admission)
    wait = router.admit(500, estimated_output_tokens=80)
    assert isinstance(wait, Wait) and wait.reason == "output_tpm"
    assert isinstance(router.admit(400, estimated_output_tokens=20), Admission)
    wait = router.admit(300, estimated_output_tokens=0)
    assert isinstance(wait, Wait) and wait.reason == "input_tpm"


def test_ordered_models_overflow_in_order(router: RouterClient) -> None:
    router.set_quota("first", {"rpm": 2, "tpm": 10**6, "max_concurrency": 10})
    router.set_quota("second", {"rpm": 2, "tpm": 10**6, "max_concurrency": 10})
    router.set_quota("third", BIG)
    chosen = [router.admit(1, models=["first", "second"]) for _ in range(5)]
    assert [getattr(d, "model", None) for d in chosen] == [
        "first", "first", "second", "second", None]
    assert isinstance(chosen[4], Wait)


def test_weights_set_the_share(router: RouterClient) -> None:
    weights = {"w1": 1.0, "w2": 2.0, "w3": 3.0}
    for model, weight in weights.items():
        router.set_quota(model, {**BIG, "weight": weight})
    counts = dict.fromkeys(weights, 0)
    for _ in range(30):
        decisions = router.admit_many([AdmitRequest(10) for _ in range(200)])
        for d in decisions:
            assert isinstance(d, Admission)
            counts[d.model] += 1
    total = sum(counts.values())
    for model, weight in weights.items():
        expected = weight / sum(weights.values())
        assert abs(counts[model] / total - expected) <= 0.05 * expected, counts


def test_unordered_subset_shares_by_weight(router: RouterClient) -> None:
    router.set_quota("x", {**BIG, "weight": 1.0})
    router.set_quota("y", {**BIG, "weight": 3.0})
    router.set_quota("z", {**BIG, "weight": 100.0})
    decisions = router.admit_many(
        [AdmitRequest(1, models=("x", "y"), ordered=False) for _ in range(400)])
    models = [d.model for d in decisions if isinstance(d, Admission)]
    assert models.count("z") == 0
    assert models.count("y") == 300 and models.count("x") == 100


def test_idempotent_request_id(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 10, "tpm": 1000, "max_concurrency": 5})
    first = router.admit(100, request_id="prompt-1")
    again = router.admit(100, request_id="prompt-1")
    assert isinstance(first, Admission) and isinstance(again, Admission)
    assert again.lease_id == first.lease_id and again.reused and not first.reused
    stats = router.stats().models["a"]
    assert (stats.requests, stats.tokens, stats.in_flight) == (1, 100, 1)
    router.complete(first.lease_id, 50, 50)
    fresh = router.admit(100, request_id="prompt-1")
    assert isinstance(fresh, Admission) and fresh.lease_id != first.lease_id


@pytest.mark.parametrize(
    ("quotas", "kwargs", "reason"),
    [
        ({"a": BIG}, {"models": ["nope"]}, "unknown_model"),
        ({"a": {**BIG, "tpm": 100}}, {}, "too_large"),
        ({"a": {**BIG, "enabled": False}}, {}, "all_disabled"),
        ({}, {}, "no_models"),
        ({"a": {**BIG, "tpm": 100}, "b": {**BIG, "enabled": False}}, {}, "too_large"),
    ],
)
def test_impossible_requests_raise_at_once(
    router: RouterClient, quotas: dict, kwargs: dict, reason: str
) -> None:
    for model, quota in quotas.items():
        router.set_quota(model, quota)
    with pytest.raises(ImpossibleRequestError) as err:
        router.admit(500, **kwargs)
    assert err.value.reason == reason
    assert str(err.value)  # a message that says what to do


def test_too_large_for_one_model_goes_to_another(router: RouterClient) -> None:
    router.set_quota("small", {**BIG, "tpm": 100, "weight": 100.0})
    router.set_quota("large", BIG)
    decision = router.admit(500)
    assert isinstance(decision, Admission) and decision.model == "large"


def test_admit_many_mixes_decisions_without_raising(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 3})
    requests = [AdmitRequest(10) for _ in range(5)] + [AdmitRequest(10, models=("ghost",))]
    decisions = router.admit_many(requests)
    assert [type(d) for d in decisions] == [Admission] * 3 + [Wait] * 2 + [Rejection]
    assert [d.request_id for d in decisions] == [r.request_id for r in requests]


def test_disabled_model_is_skipped(router: RouterClient) -> None:
    router.set_quota("on", BIG)
    router.set_quota("off", {**BIG, "enabled": False, "weight": 1000.0})
    assert {router.admit(1).model for _ in range(5)} == {"on"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"estimated_tokens": 0}, "estimated_tokens"),
        ({"estimated_tokens": 10, "estimated_output_tokens": 11}, "estimated_output_tokens"),
        ({"estimated_tokens": 10, "priority": "urgent"}, "priority"),
        ({"estimated_tokens": 10, "models": []}, "models"),
        ({"estimated_tokens": 10, "models": ["bad{tag}"]}, "model"),
        # a bool is an int in Python, but no count: True would be admitted as 1 token
        ({"estimated_tokens": True}, "estimated_tokens: True is not a whole number"),
        ({"input_tokens": True}, "input_tokens: True is not a whole number"),
        ({"input_tokens": False}, "input_tokens: False is not a whole number"),
        ({"estimated_tokens": 10, "estimated_output_tokens": True},
         "estimated_output_tokens: True must be a whole number"),
    ],
)
def test_bad_admit_input_names_the_field(router: RouterClient, kwargs: dict, field: str) -> None:
    router.set_quota("a", BIG)
    with pytest.raises(ValueError, match=field):
        router.admit(**kwargs)


@pytest.mark.parametrize(("usage", "field"), [((-5, 3), "input_tokens"),
                                              ((3, True), "output_tokens")])
def test_a_bad_usage_is_refused_before_redis_and_the_lease_stays_settleable(
        router: RouterClient, usage: tuple[int, int], field: str) -> None:
    """A negative or boolean token count is refused, naming the field, before anything
    goes to Redis, and the lease can still be settled. ``true`` once reached the settle
    script and failed it there, and with it every settlement the async client had merged
    into the same script call."""
    router.set_quota("a", BIG)
    lease = router.admit(10)
    assert isinstance(lease, Admission)
    with pytest.raises(ValueError, match=field):
        router.complete(lease.lease_id, *usage)
    assert router.complete(lease.lease_id) == "released"
    assert router.stats().models["a"].in_flight == 0


def test_engine_learns_output_tokens_per_model(router: RouterClient) -> None:
    router.set_quota("a", {**BIG, "expected_output_tokens": 100})
    router.set_quota("b", {**BIG, "expected_output_tokens": 100})

    def call(output_tokens: int) -> None:
        lease = router.admit(input_tokens=10, models=["a"])
        assert isinstance(lease, Admission)
        router.complete(lease.lease_id, 10, output_tokens)

    first = router.admit(input_tokens=50, models=["a"])
    assert isinstance(first, Admission)
    assert router.stats().models["a"].tokens == 150  # input + the prior
    router.complete(first.lease_id, 50, 400)
    for out in range(1, 10):
        call(out)
    assert router.stats().models["a"].output_estimate == 400  # top 5 % of 10 calls: the max
    for out in range(10, 20):
        call(out)
    stats = router.stats().models
    assert stats["a"].output_estimate == 19  # of 20 calls, the one outlier is past the P95
    assert stats["b"].output_estimate == 100  # learned per model


def test_learned_output_counts_against_tpm(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 1600, "max_concurrency": 100,
                           "expected_output_tokens": 300})
    warm = router.admit(input_tokens=100)  # the first answer ends the cold start
    assert isinstance(warm, Admission)
    router.complete(warm.lease_id, 100, 300)
    # kept free besides: the output tail (3 x 300 before 64 answers) past the reservation
    assert router.stats().models["a"].output_tail_tokens == 900
    assert isinstance(router.admit(input_tokens=100), Admission)  # 2 x 400 + 600 <= 1600
    wait = router.admit(input_tokens=100)  # 3 x (100 + 300) + 600 > 1600
    assert isinstance(wait, Wait) and wait.reason == "tpm"
    with pytest.raises(ImpossibleRequestError, match="split the prompt"):
        router.admit(input_tokens=1400)


def test_window_trims_entries_with_zero_tokens_of_a_kind(router: RouterClient) -> None:
    """Regression: trimming entries whose output tokens were 0 once broke HINCRBY (-0)."""
    import time

    router.set_quota("a", {"rpm": 1, "tpm": 100, "max_concurrency": 5, "window_s": 0.05})
    first = router.admit(10)
    assert isinstance(first, Admission)
    router.complete(first.lease_id, 10, 0)
    deadline = time.monotonic() + 5
    while not isinstance(router.admit(10), Admission):  # the entry leaves the window
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert router.stats().models["a"].output_tokens == 10  # only the new estimate remains


def test_waiting_counts_only_waiters_whose_caller_may_still_come_back(
    make_router: Callable[..., RouterClient],
) -> None:
    # a caller told to wait that never asks again (its task ended) stops counting once its
    # retry wait plus waiter_ttl_ms has passed, with no other admission to clear it
    router = make_router(jitter=0, waiter_ttl_ms=2000)
    router.set_quota("a", {"rpm": 1, "tpm": 10**6, "max_concurrency": 10, "window_s": 1})
    assert isinstance(router.admit(10), Admission)
    wait = router.admit(10)
    assert isinstance(wait, Wait) and wait.retry_after_ms <= 1_000 + 1_000
    assert router.stats().waiting == 1
    wait_for("the waiting count to clear", lambda: router.stats().waiting == 0, timeout_s=20)
