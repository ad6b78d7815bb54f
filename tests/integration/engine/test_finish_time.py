"""Finish-time-aware choice (lib/finish.lua): a request that lets the engine choose tries
the models likeliest to finish it first, and with ``wait_for_faster`` waits for a fast
model when that is sooner than a slow model with room now (off by default: never idle while
work waits); the likely latency is the learned mean plus three mean deviations (half the
mean before one is learned)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

from airflow_llm_router.engine.client import RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import Admission, AdmitRequest, Wait

ROOMY = {"rpm": 1000, "tpm": 10**6, "max_concurrency": 100}


@pytest.fixture
def patient(make_router: Callable[..., RouterClient]) -> RouterClient:
    """A router that may wait for a faster model (``wait_for_faster``)."""
    return make_router(wait_for_faster=True)


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _model(router: RouterClient, **kwargs: object) -> str:
    lease = router.admit(100, **kwargs)  # type: ignore[arg-type]
    assert isinstance(lease, Admission), lease
    return lease.model


def test_with_room_on_both_the_faster_model_takes_the_requests(router: RouterClient) -> None:
    router.set_quota("fast", {**ROOMY, "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "expected_latency_s": 30.0})
    # the weighted fair share would alternate; the finish time sends each to the fast one
    assert {_model(router) for _ in range(8)} == {"fast"}
    # an ordered list is the caller's choice: its first model with room
    assert _model(router, models=["slow", "fast"]) == "slow"


def test_a_request_waits_for_a_fast_model_that_frees_sooner(patient: RouterClient) -> None:
    # fast: full after 2 calls for its 10 s window; likely done 10 s + 2.5 s from now.
    # slow: room now, likely done in 75 s (30 s mean + three deviations of half the mean)
    patient.set_quota("fast", {**ROOMY, "rpm": 2, "window_s": 10,
                              "expected_latency_s": 1.0})
    patient.set_quota("slow", {**ROOMY, "expected_latency_s": 30.0})
    assert [_model(patient) for _ in range(2)] == ["fast", "fast"]
    decision = patient.admit(100)
    assert isinstance(decision, Wait) and decision.reason == "rpm"
    assert 8_000 <= decision.retry_after_ms <= 12_000  # until fast's window frees
    # a batch decides the same way, request by request
    assert all(isinstance(d, Wait) for d in patient.admit_many([AdmitRequest(100)] * 3))
    # the slow model still takes what only it is allowed
    assert _model(patient, models=["slow"]) == "slow"


def test_by_default_a_request_never_waits_while_an_allowed_model_has_room(
        router: RouterClient) -> None:
    # the same models as above: without wait_for_faster the slow model's room is used
    router.set_quota("fast", {**ROOMY, "rpm": 2, "window_s": 10,
                              "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "expected_latency_s": 30.0})
    assert [_model(router) for _ in range(4)] == ["fast", "fast", "slow", "slow"]
    decisions = router.admit_many([AdmitRequest(100)] * 3)
    assert [d.model for d in decisions if isinstance(d, Admission)] == ["slow"] * 3


def test_a_slow_model_is_taken_while_its_call_ends_before_the_fast_one_frees(
    patient: RouterClient,
) -> None:
    # fast frees in ~100 s; slow likely ends in 12.5 s: the slow model is the sooner finish
    patient.set_quota("fast", {**ROOMY, "rpm": 2, "window_s": 100,
                              "expected_latency_s": 1.0})
    patient.set_quota("slow", {**ROOMY, "expected_latency_s": 5.0})
    assert [_model(patient) for _ in range(4)] == ["fast", "fast", "slow", "slow"]


def test_equally_fast_models_share_by_weight(router: RouterClient) -> None:
    # within 1.5 x of each other's likely latency, models count as equally fast
    router.set_quota("fast", {**ROOMY, "expected_latency_s": 1.0})
    router.set_quota("fast2", {**ROOMY, "expected_latency_s": 1.4, "weight": 2.0})
    router.set_quota("slower", {**ROOMY, "expected_latency_s": 1.6})
    served = Counter(_model(router) for _ in range(12))
    assert served == {"fast": 4, "fast2": 8}


def test_without_a_latency_for_every_model_the_fair_share_decides(
    router: RouterClient,
) -> None:
    router.set_quota("fast", {**ROOMY, "expected_latency_s": 1.0})
    router.set_quota("unknown", ROOMY)
    assert {_model(router) for _ in range(8)} == {"fast", "unknown"}


def test_a_spread_out_latency_counts_against_a_model(
    patient: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # fast frees in ~20 s. jumpy averages 6 s; its calls stray 4 s from it on average
    # (likely 18 s: still sooner), then 8 s (likely 30 s: later than fast)
    patient.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 20,
                              "expected_latency_s": 0.1})
    patient.set_quota("jumpy", {**ROOMY, "expected_latency_s": 6.0})
    assert _model(patient) == "fast"
    est = RouterKeys(namespace).router("K_EST")
    raw.hset(est, mapping={"jumpy|lat": 6000, "jumpy|latd": 4000})
    assert _model(patient) == "jumpy"
    raw.hset(est, mapping={"jumpy|latd": 8000})
    assert isinstance(patient.admit(100), Wait)


def test_completions_learn_the_mean_deviation(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    router.set_quota("m", ROOMY)
    est = RouterKeys(namespace).router("K_EST")

    def call(hold_s: float) -> None:
        lease = router.admit(100)
        assert isinstance(lease, Admission)
        time.sleep(hold_s)  # the call's duration is what is learned
        router.complete(lease.lease_id, 50, 50)

    call(0.0)
    assert raw.hget(est, "m|lat") is not None and raw.hget(est, "m|latd") is None
    call(0.4)  # 400 ms away from the first: the first deviation
    first = float(raw.hget(est, "m|latd") or 0)
    assert 350 <= first < 1000
    call(float(raw.hget(est, "m|lat") or 0) / 1000)  # at the mean: the deviation shrinks
    assert float(raw.hget(est, "m|latd") or 0) < first


def test_a_full_concurrency_counts_the_waiters_queued_ahead(patient: RouterClient) -> None:
    # fast: one slot, 1 s a call (likely 2.5 s); slow: room, likely 12.5 s. A request with
    # n waiters ahead would get fast's slot in about (n + 1) s, done 2.5 s later; waiting is
    # worth it while it saves more than one of fast's calls (2.5 s): the first 7 wait for
    # it, the rest are sooner done on slow
    patient.set_quota("fast", {**ROOMY, "max_concurrency": 1, "expected_latency_s": 1.0})
    patient.set_quota("slow", {**ROOMY, "expected_latency_s": 5.0})
    assert _model(patient) == "fast"
    decisions = patient.admit_many([AdmitRequest(100) for _ in range(14)])
    assert [type(d).__name__ for d in decisions] == ["Wait"] * 7 + ["Admission"] * 7
    assert {d.model for d in decisions if isinstance(d, Admission)} == {"slow"}
    assert {d.reason for d in decisions if isinstance(d, Wait)} == {"concurrency"}


def test_a_waiter_holds_back_only_the_model_it_waits_for(patient: RouterClient) -> None:
    patient.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 10, "expected_latency_s": 1.0})
    patient.set_quota("slow", {**ROOMY, "max_concurrency": 1, "expected_latency_s": 30.0})
    assert _model(patient) == "fast"
    # a hot waiter holds back what it needs from bulk requests at once (lib/waiters.lua)
    waiting = patient.admit(100, priority="hot", request_id="waits-for-fast")
    assert isinstance(waiting, Wait) and waiting.reason == "rpm"
    # it allows slow too, but would not take it: slow's one slot stays free for others
    assert _model(patient, models=["slow"]) == "slow"
