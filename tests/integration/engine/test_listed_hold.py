"""Preferences that pay (lib/listed.lua): a request with an ordered list is held while an
earlier model of its list would likely finish it sooner than the later model with room
now (the finish-time estimate of the any-model choice, restricted to the list); a later
model takes it only while every earlier one cannot *and* waiting would finish later.
Overflow thresholds are honoured: a model at or over its threshold is not waited for."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import Admission, AdmitRequest, Wait

ROOMY = {"rpm": 1000, "tpm": 10**6, "max_concurrency": 100}
PAIR = ["first", "second"]


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _take(router: RouterClient, models: list[str]) -> str:
    lease = router.admit(100, models=models)
    assert isinstance(lease, Admission), lease
    return lease.model


def _counter(router: RouterClient, model: str, name: str) -> int:
    return router.stats().models[model].counters.get(name, 0)


def test_a_listed_request_waits_for_its_earlier_model_that_finishes_sooner(
        router: RouterClient, raw: redis.Redis, namespace: str) -> None:
    # first: full for its 10 s window after 2 calls, likely 1 + 2.5 = 3.5 s a call, so a
    # request likely ends on it in ~13.5 s. second: room now, likely 30 + 75 = 105 s.
    # Greedy (the first model with room) would send it to second.
    router.set_quota("first", {**ROOMY, "rpm": 2, "window_s": 10, "expected_latency_s": 1.0})
    router.set_quota("second", {**ROOMY, "expected_latency_s": 30.0})
    assert [_take(router, PAIR) for _ in range(2)] == ["first", "first"]
    decision = router.admit(100, models=PAIR, request_id="held")
    assert isinstance(decision, Wait) and decision.reason == "rpm", decision
    assert 8_000 <= decision.retry_after_ms <= 12_000  # until first's window frees
    # a batch decides the same way, request by request
    assert all(isinstance(d, Wait) for d in router.admit_many(
        [AdmitRequest(100, models=PAIR)] * 3))
    # the backend's own counters: the waits count on first, second took nothing
    assert _counter(router, "first", "waited") == 4
    assert _counter(router, "second", "admitted") == 0
    assert router.stats().models["second"].in_flight == 0
    # the held request waits queued for first alone: once it starves, it holds first's
    # capacity back from those behind it, never second's (lib/waiters.lua)
    info = json.loads(raw.hget(RouterKeys(namespace).router("K_WAIT_INFO"), "held") or "{}")
    assert info.get("ms") == ["first"]
    # second still takes what only it may take
    assert _take(router, ["second"]) == "second"


def test_a_later_model_takes_the_request_when_waiting_would_finish_later(
        router: RouterClient) -> None:
    # first frees in ~100 s; second likely ends in 5 + 12.5 = 17.5 s: second is sooner
    router.set_quota("first", {**ROOMY, "rpm": 2, "window_s": 100, "expected_latency_s": 1.0})
    router.set_quota("second", {**ROOMY, "expected_latency_s": 5.0})
    assert [_take(router, PAIR) for _ in range(4)] == ["first", "first", "second", "second"]


def test_an_earlier_model_with_room_is_never_passed_for_a_faster_later_one(
        router: RouterClient) -> None:
    # the list is the caller's preference: first has room, so it takes the request though
    # second is thirty times faster
    router.set_quota("first", {**ROOMY, "expected_latency_s": 30.0})
    router.set_quota("second", {**ROOMY, "expected_latency_s": 1.0})
    assert [_take(router, PAIR) for _ in range(3)] == ["first"] * 3


def test_the_soonest_of_several_earlier_models_is_waited_for(router: RouterClient) -> None:
    # a list of three: first is full for ~100 s (too long to wait for), second for ~10 s
    # (likely ~13.5 s), third has room (likely 105 s): the request waits for second
    three = ["first", "second", "third"]
    router.set_quota("first", {**ROOMY, "rpm": 1, "window_s": 100, "expected_latency_s": 1.0})
    router.set_quota("second", {**ROOMY, "rpm": 1, "window_s": 10, "expected_latency_s": 1.0})
    router.set_quota("third", {**ROOMY, "expected_latency_s": 30.0})
    assert _take(router, ["first"]) == "first"
    assert _take(router, ["second"]) == "second"
    decision = router.admit(100, models=three)
    assert isinstance(decision, Wait) and 8_000 <= decision.retry_after_ms <= 12_000
    assert _counter(router, "second", "waited") == 1
    assert _counter(router, "first", "waited") == 0


def test_a_model_at_its_overflow_threshold_is_not_waited_for(router: RouterClient) -> None:
    # first is full and over its threshold (half its window): the list overflows to
    # second, though first would finish the request sooner (held without the threshold:
    # the first test)
    router.set_quota("first", {**ROOMY, "rpm": 2, "window_s": 10, "expected_latency_s": 1.0,
                               "overflow_threshold": 0.5})
    router.set_quota("second", {**ROOMY, "expected_latency_s": 30.0})
    assert [_take(router, ["first"]) for _ in range(2)] == ["first", "first"]
    assert _take(router, PAIR) == "second"


def test_without_a_latency_for_every_model_the_list_is_tried_in_order(
        router: RouterClient) -> None:
    # nothing known of second's latency: no estimate to compare, the first with room
    router.set_quota("first", {**ROOMY, "rpm": 2, "window_s": 10, "expected_latency_s": 1.0})
    router.set_quota("second", ROOMY)
    assert [_take(router, PAIR) for _ in range(3)] == ["first", "first", "second"]


def test_only_the_waiters_queued_for_the_earlier_model_count_ahead(
        router: RouterClient) -> None:
    # first: one slot, taken; a call likely ends in 1 s (mean), 3.5 s (likely). second:
    # room, likely 35 s. 50 requests wait for another model: counted ahead (the any-model
    # choice's queue), first's slot would look 51 s away and second would take the
    # request; they do not wait for first, so the request is held for it
    router.set_quota("first", {**ROOMY, "max_concurrency": 1, "expected_latency_s": 1.0})
    router.set_quota("second", {**ROOMY, "expected_latency_s": 10.0})
    router.set_quota("other", {**ROOMY, "rpm": 1, "window_s": 100})
    assert _take(router, ["first"]) == "first"
    assert _take(router, ["other"]) == "other"
    assert all(isinstance(d, Wait) for d in router.admit_many(
        [AdmitRequest(100, models=["other"]) for _ in range(50)]))
    decision = router.admit(100, models=PAIR)
    assert isinstance(decision, Wait) and decision.reason == "concurrency", decision
    # 40 requests that wait for first: its slot is ~41 s away for the next request,
    # later than second would finish it
    assert all(isinstance(d, Wait) for d in router.admit_many(
        [AdmitRequest(100, models=["first"]) for _ in range(40)]))
    assert _take(router, PAIR) == "second"
