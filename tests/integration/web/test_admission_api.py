"""Admission over HTTP on real Redis: every answer comes from the engine's scripts, so each
test checks the engine's own state (stats) as well as the HTTP answer."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
import redis

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from tests.integration.engine.admitting import first_admission
from tests.integration.web.conftest import MakeApi

ROOMY = {"rpm": 1000, "tpm": 1_000_000, "max_concurrency": 100}


async def schedule(api: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await api.post("/schedule", json={"estimated_tokens": 100, **body})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_complete_frees_the_slot_for_the_next_call(api: httpx.AsyncClient,
                                                         engine: RouterClient) -> None:
    engine.set_quota("m", {**ROOMY, "max_concurrency": 1})
    first = await schedule(api)
    assert first["status"] == "admitted" and first["model"] == "m"
    assert first["lease_ttl_s"] == 30.0 and first["request_id"]
    assert engine.stats().models["m"].in_flight == 1
    blocked = await schedule(api)
    assert blocked["status"] == "wait" and blocked["reason"] == "concurrency"
    assert blocked["wait_ms"] > 0
    done = await api.post("/complete", json={
        "lease_id": first["lease_id"], "usage": {"input_tokens": 70, "output_tokens": 20}})
    assert done.status_code == 200, done.text
    assert done.json() == {"lease_id": first["lease_id"], "status": "released"}
    stats = engine.stats().models["m"]
    assert stats.in_flight == 0 and stats.tokens == 90  # actual usage replaced the estimate
    # the waiter comes back with its request id and gets the freed slot
    again = await schedule(api, request_id=blocked["request_id"])
    assert again["status"] == "admitted" and again["request_id"] == blocked["request_id"]
    # a retried /complete settles the same usage again: nothing changes
    twice = await api.post("/complete", json={
        "lease_id": first["lease_id"], "usage": {"input_tokens": 70, "output_tokens": 20}})
    assert twice.json() == {"lease_id": first["lease_id"], "status": "settled"}
    stats = engine.stats().models["m"]
    assert (stats.in_flight, stats.tokens, stats.requests) == (1, 190, 2)
    ghost = await api.post("/complete", json={"lease_id": "m#999999"})
    assert ghost.status_code == 404 and "never existed" in ghost.json()["detail"]


async def test_a_caller_that_hedges_says_so_over_http(make_api: MakeApi,
                                                     engine: RouterClient) -> None:
    """``hedges_late`` reaches the engine: with 8 tasks behind a full fast model, a caller
    that hedges its late calls is sent to the slow model (its late point plus a fast call
    ends before the backlog would), one that does not waits for the fast one
    (tests/integration/engine/test_finish_time.py has the engine's side)."""
    api = await make_api()
    scarce = {**ROOMY, "rpm": 2, "window_s": 10}
    engine.set_quota("fast", {**scarce, "expected_latency_s": 1.0})
    engine.set_quota("slow", {**scarce, "expected_latency_s": 8.0})
    assert [(await schedule(api))["model"] for _ in range(2)] == ["fast", "fast"]
    engine.report_backlog("store.tasks", 8)
    plain = await schedule(api)
    assert plain["status"] == "wait", plain
    hedging = await schedule(api, hedges_late=True)
    assert hedging["status"] == "admitted" and hedging["model"] == "slow", hedging
    refused = await api.post("/schedule", json={"estimated_tokens": 100, "hedges_late": 1})
    assert refused.status_code == 422 and "hedges_late" in refused.text, refused.text


async def test_a_late_call_can_be_hedged_and_abandoned_over_http(
        api: httpx.AsyncClient, engine: RouterClient) -> None:
    """/schedule says when the call is late (from the quota's latency prior: 2 s + one
    deviation of half of it); /complete takes ``abandoned``: the slot frees, and the
    model's breaker and error count are untouched."""
    engine.set_quota("m", {**ROOMY, "expected_latency_s": 2.0})
    engine.set_quota("n", ROOMY)
    late = await schedule(api, models=["m"])
    assert late["late_after_s"] == 3.0
    assert (await schedule(api, models=["n"]))["late_after_s"] is None  # nothing known
    done = await api.post("/complete", json={"lease_id": late["lease_id"],
                                             "outcome": "abandoned"})
    assert done.json() == {"lease_id": late["lease_id"], "status": "released"}
    m = engine.stats().models["m"]
    assert m.in_flight == 0 and m.breaker == "closed"
    assert m.counters["abandoned"] == 1 and m.counters["errors"] == 0


async def test_a_retried_schedule_returns_the_same_lease(api: httpx.AsyncClient,
                                                         engine: RouterClient) -> None:
    engine.set_quota("m", ROOMY)
    first = await schedule(api, request_id="call-1")
    retry = await schedule(api, request_id="call-1")
    assert retry["lease_id"] == first["lease_id"] and retry["reused"] is True
    assert first["reused"] is False
    other = await schedule(api, request_id="call-2")
    assert other["lease_id"] != first["lease_id"]
    stats = engine.stats().models["m"]
    assert (stats.requests, stats.in_flight) == (2, 2)  # the retry reserved nothing


async def test_http_request_ids_never_reach_a_drains_lease(api: httpx.AsyncClient,
                                                           engine: RouterClient) -> None:
    engine.set_quota("m", ROOMY)
    drains = engine.admit(100, request_id="task-7")
    over_http = await schedule(api, request_id="task-7")
    assert over_http["lease_id"] != drains.lease_id  # type: ignore[union-attr]
    assert over_http["reused"] is False


async def test_over_quota_the_answer_is_a_wait_and_nothing_is_reserved(
        api: httpx.AsyncClient, engine: RouterClient) -> None:
    engine.set_quota("m", {**ROOMY, "rpm": 3, "window_s": 60})
    admitted = [await schedule(api) for _ in range(3)]
    assert all(a["status"] == "admitted" for a in admitted)
    waits = [await schedule(api) for _ in range(5)]
    assert {w["status"] for w in waits} == {"wait"}
    assert {w["reason"] for w in waits} == {"rpm"}
    assert all(w["wait_ms"] > 0 for w in waits)
    stats = engine.stats().models["m"]
    assert (stats.requests, stats.in_flight) == (3, 3)
    # the quota change applies at the next admission, through HTTP as everywhere
    engine.set_quota("m", {**ROOMY, "rpm": 4, "window_s": 60})
    assert (await schedule(api, request_id=waits[0]["request_id"]))["status"] == "admitted"


async def test_models_reach_the_engine(api: httpx.AsyncClient, engine: RouterClient) -> None:
    engine.set_quota("a", {**ROOMY, "max_concurrency": 1})
    engine.set_quota("b", ROOMY)
    assert (await schedule(api, models=["a", "b"]))["model"] == "a"
    assert (await schedule(api, models=["a", "b"]))["model"] == "b"  # a is full: overflow
    assert (await schedule(api, models=["a"], kind="summary"))["status"] == "wait"


async def test_a_waiting_hot_request_gets_the_freed_slot_before_an_older_bulk_one(
        api: httpx.AsyncClient, engine: RouterClient) -> None:
    engine.set_quota("m", {**ROOMY, "max_concurrency": 1})
    held = await schedule(api)
    assert (await schedule(api, request_id="bulk-1"))["status"] == "wait"
    assert (await schedule(api, request_id="hot-1", priority="hot"))["status"] == "wait"
    await api.post("/complete", json={"lease_id": held["lease_id"]})
    # the bulk request asked first and retries first, but the hot one waiting holds the slot
    assert (await schedule(api, request_id="bulk-1"))["status"] == "wait"
    assert (await schedule(api, request_id="hot-1", priority="hot"))["status"] == "admitted"


async def test_heartbeats_keep_a_lease_and_without_them_it_expires(
        make_api: MakeApi, engine: RouterClient) -> None:
    api = await make_api(lease_ttl_s=1.0)
    engine.set_quota("m", {**ROOMY, "max_concurrency": 1})
    lease = (await schedule(api))["lease_id"]
    started = time.monotonic()
    # heartbeat at a third of the TTL for three TTLs: the lease outlives its first TTL
    while time.monotonic() - started < 3.0:
        beat = await api.post("/heartbeat", json={"lease_id": lease})
        last_beat = time.monotonic()
        assert beat.status_code == 200, beat.text
        assert beat.json() == {"lease_id": lease, "lease_ttl_s": 1.0}
        assert engine.stats().models["m"].in_flight == 1
        await asyncio.sleep(0.33)  # the heartbeat cadence under test, not a wait for state
    # no more heartbeats: the lease expires and frees its slot
    deadline = last_beat + 15.0
    while engine.stats().models["m"].in_flight:
        assert time.monotonic() < deadline, "the lease never expired"
        await asyncio.sleep(0.05)
    assert time.monotonic() - last_beat >= 0.9
    gone = await api.post("/heartbeat", json={"lease_id": lease})
    assert gone.status_code == 404 and "schedule the call again" in gone.json()["detail"]
    assert (await schedule(api))["status"] == "admitted"  # the slot is free again
    # the expired lease's usage still counts (not refunded); its completion settles it
    late = await api.post("/complete", json={"lease_id": lease, "outcome": "error"})
    assert late.json() == {"lease_id": lease, "status": "settled"}
    assert engine.stats().models["m"].requests == 2


async def test_a_waiting_request_can_be_cancelled(api: httpx.AsyncClient,
                                                  engine: RouterClient) -> None:
    engine.set_quota("m", {**ROOMY, "max_concurrency": 1})
    await schedule(api)
    waiting = await schedule(api, request_id="w-1")
    assert waiting["status"] == "wait"
    answer = await api.post("/cancel", json={"request_id": "w-1"})
    assert answer.json() == {"request_id": "w-1", "cancelled": True}
    assert engine.stats().waiting == 0
    again = await api.post("/cancel", json={"request_id": "w-1"})
    assert again.json()["cancelled"] is False


async def test_advice(api: httpx.AsyncClient, engine: RouterClient) -> None:
    engine.set_quota("m", ROOMY)
    response = await api.get("/advice", params={"backlog": 500})
    assert response.status_code == 200, response.text
    assert "m" in response.json()["models"]
    assert (await api.get("/advice", params={"backlog": -1})).json()["detail"][0]["field"] \
        == "backlog"


PRICED = {"input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 1_000_000,
          "budget_micro_usd": 500}


@pytest.mark.parametrize(("body", "field"), [
    ({"estimated_tokens": 100, "models": ["ghost"]}, "models"),
    ({"estimated_tokens": 5000, "models": ["m"]}, "estimated_tokens"),
    ({"estimated_tokens": 800, "models": ["priced"]}, "estimated_tokens"),
])
async def test_impossible_requests_fail_fast_naming_the_field(
        api: httpx.AsyncClient, engine: RouterClient, body: dict[str, Any], field: str) -> None:
    engine.set_quota("m", {**ROOMY, "tpm": 1000})
    engine.set_quota("priced", {**ROOMY, **PRICED})  # 800 tokens cost 800 > 500 micro-USD
    response = await api.post("/schedule", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"] == field
    assert engine.stats().waiting == 0  # an impossible request waits nowhere


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/schedule", {}, "estimated_tokens"),
    ("/schedule", {"estimated_tokens": 0}, "estimated_tokens"),
    ("/schedule", {"estimated_tokens": "100"}, "estimated_tokens"),
    ("/schedule", {"estimated_tokens": 1.5}, "estimated_tokens"),
    ("/schedule", {"estimated_tokens": 10**12}, "estimated_tokens"),
    ("/schedule", {"estimated_tokens": 9, "estimated_output_tokens": 10},
     "estimated_output_tokens"),
    ("/schedule", {"estimated_tokens": 9, "models": []}, "models"),
    ("/schedule", {"estimated_tokens": 9, "models": ["has space"]}, "models.0"),
    ("/schedule", {"estimated_tokens": 9, "priority": "urgent"}, "priority"),
    ("/schedule", {"estimated_tokens": 9, "request_id": "a b"}, "request_id"),
    ("/schedule", {"estimated_tokens": 9, "request_id": "x" * 129}, "request_id"),
    ("/schedule", {"estimated_tokens": 9, "kind": "   "}, "kind"),
    ("/schedule", {"estimated_tokens": 9, "budget": 3}, "budget"),
    ("/complete", {"lease_id": "m"}, "lease_id"),
    ("/complete", {"lease_id": "m#1", "outcome": "meh"}, "outcome"),
    ("/complete", {"lease_id": "m#1", "usage": {"input_tokens": 3}}, "usage.output_tokens"),
    ("/complete", {"lease_id": "m#1", "usage": {"input_tokens": -1, "output_tokens": 1}},
     "usage.input_tokens"),
    ("/complete", {"lease_id": "m#1", "retry_after_s": -1}, "retry_after_s"),
    ("/heartbeat", {}, "lease_id"),
    ("/cancel", {"request_id": ""}, "request_id"),
])
async def test_bad_bodies_get_422_naming_the_field(api: httpx.AsyncClient, path: str,
                                                   body: dict[str, Any], field: str) -> None:
    response = await api.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"] == field, response.text


async def test_every_route_needs_the_token(api: httpx.AsyncClient,
                                           engine: RouterClient) -> None:
    engine.set_quota("m", ROOMY)
    routes = [("POST", "/schedule", {"estimated_tokens": 9}), ("POST", "/complete",
              {"lease_id": "m#1"}), ("POST", "/heartbeat", {"lease_id": "m#1"}),
              ("POST", "/cancel", {"request_id": "r"}), ("GET", "/advice", None),
              ("GET", "/openapi.json", None), ("GET", "/docs", None)]
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong-token"},
                    {"Authorization": "Basic dXNlcjpwYXNz"}):
        for method, path, body in routes:
            response = await api.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (headers, method, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
    assert engine.stats().models["m"].requests == 0
    assert (await api.get("/openapi.json")).json()["paths"]["/schedule"]


async def test_unreachable_redis_is_a_503_not_a_crash(make_api: MakeApi) -> None:
    from airflow_llm_router.engine.async_client import AsyncRouterClient
    from airflow_llm_router.web import Lazy, create_app, token_access
    from tests.integration.web.conftest import AUTH, TOKEN

    async def build() -> AsyncRouterClient:
        return AsyncRouterClient.from_url("redis://127.0.0.1:1/0")

    app = create_app(access=token_access(TOKEN), router=Lazy(build, "nowhere"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api", headers=AUTH) as api:
        response = await api.post("/schedule", json={"estimated_tokens": 9})
    assert response.status_code == 503, response.text
    assert "Redis did not answer" in response.json()["detail"]


async def test_oversized_bodies_are_refused_unread(api: httpx.AsyncClient,
                                                   engine: RouterClient) -> None:
    engine.set_quota("m", ROOMY)
    padding = {"estimated_tokens": 9, "request_id": "r", "pad": "x" * 100_000}
    declared = await api.post("/schedule", json=padding)
    assert declared.status_code == 413, declared.text
    assert declared.json()["detail"][0]["field"] == "body"

    async def chunks() -> Any:  # no Content-Length: counted as it arrives
        yield b'{"estimated_tokens": 9, "pad": "'
        for _ in range(20):
            yield b"x" * 8192
        yield b'"}'

    streamed = await api.post("/schedule", content=chunks(),
                              headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["detail"][0]["field"] == "body"
    assert engine.stats().models["m"].requests == 0
    # unauthenticated: refused before the body is read, too
    anonymous = await api.post("/schedule", json=padding, headers={"Authorization": ""})
    assert anonymous.status_code == 413
    assert (await schedule(api))["status"] == "admitted"  # normal bodies pass


async def test_a_reported_http_hop_widens_the_models_guard(api: httpx.AsyncClient,
                                                           engine: RouterClient) -> None:
    engine.set_quota("m", {**ROOMY, "rpm": 2, "window_s": 4})
    first, _ = await schedule(api), await schedule(api)  # the model at its full quota
    assert engine.stats().models["m"].guard_ms == 50
    done = await api.post("/complete", json={
        "lease_id": first["lease_id"], "usage": {"input_tokens": 5, "output_tokens": 5},
        "arrival_delay_s": 0.4})
    assert done.json()["status"] == "released"
    stats = engine.stats().models["m"]
    assert stats.guard_ms >= 1.25 * 400 and stats.counters["guard_widened"] == 1


async def test_a_reported_receipt_counts_the_call_from_there_not_for_the_guard_past_it(
        api: httpx.AsyncClient, engine: RouterClient) -> None:
    engine.set_quota("m", {**ROOMY, "rpm": 2, "window_s": 4})
    lease = await schedule(api)
    window = engine.core.keys.model("K_WIN", "m")
    hop_end = engine.redis.zscore(window, lease["lease_id"])  # admission + http_hop_ms
    assert hop_end is not None
    bad = await api.post("/complete", json={"lease_id": lease["lease_id"],
                                            "received_at_s": -1})
    assert bad.status_code == 422 and "received_at_s" in bad.text
    # said to be received before the hop's end (here, by a backend clock behind ours,
    # before the admission itself): it counts from the hop's end, plus 25 ms of margin
    # instead of the 50 ms guard
    done = await api.post("/complete", json={"lease_id": lease["lease_id"],
                                             "received_at_s": time.time() - 5})
    assert done.json()["status"] == "released"
    assert engine.redis.zscore(window, lease["lease_id"]) == hop_end + 25 - 50


async def test_a_reported_latency_is_what_the_model_learns(
        api: httpx.AsyncClient, engine: RouterClient, redis_url: str, namespace: str) -> None:
    engine.set_quota("m", ROOMY)
    lease = await schedule(api)
    bad = await api.post("/complete", json={"lease_id": lease["lease_id"], "latency_s": -1})
    assert bad.status_code == 422 and "latency_s" in bad.text
    done = await api.post("/complete", json={"lease_id": lease["lease_id"], "latency_s": 2.5})
    assert done.json()["status"] == "released"
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert float(raw.hget(RouterKeys(namespace).router("K_EST"), "m|lat") or 0) == 2500
    finally:
        raw.close()


async def test_an_http_admission_keeps_its_window_for_the_hop_to_the_backend(
        make_api: MakeApi, engine: RouterClient) -> None:
    # /schedule's answer travels back before the caller calls: the admission counts in its
    # window from http_hop_ms after it was made, so a drain's admission (the `engine`
    # client, no hop) cannot land in the backend window the HTTP call reaches late
    api = await make_api(http_hop_ms=300)
    engine.set_quota("m", {**ROOMY, "rpm": 1, "window_s": 0.5})
    before = time.monotonic()  # at or before the admission's stamp
    first = await schedule(api)
    assert first["status"] == "admitted"
    assert (await schedule(api))["reason"] == "rpm"
    first_admission(engine)
    # window 500 ms + the engine client's guard 50 ms + the hop 300 ms
    assert time.monotonic() - before >= 0.5 + 0.05 + 0.3 - 0.001
    assert engine.stats().models["m"].counters["admitted"] == 2

