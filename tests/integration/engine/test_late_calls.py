"""What the engine tells a caller that may hedge a late call (lib/finish.lua ``late_after``,
lib/health.lua ``'abandoned'``): each admission says when a call on its model is late
(the learned mean plus two mean deviations, never under twice the mean; unknown without
any latency), and a lease settled ``abandoned`` frees its slot, keeps its estimate in the
window and says nothing of the model's health or latency."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import Admission, AdmitRequest

ROOMY = {"rpm": 1000, "tpm": 10**6, "max_concurrency": 100}


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _lease(router: RouterClient, model: str, rid: str | None = None) -> Admission:
    request = AdmitRequest(estimated_tokens=100, models=(model,),
                           **({"request_id": rid} if rid else {}))
    lease = router.admit_many([request])[0]
    assert isinstance(lease, Admission), lease
    return lease


def test_an_admission_says_when_its_call_is_late(router: RouterClient, raw: redis.Redis,
                                                 namespace: str) -> None:
    router.set_quota("prior", {**ROOMY, "expected_latency_s": 2.0})
    router.set_quota("unknown", ROOMY)
    # from the prior: mean 2 s, deviation at its floor of half the mean: 2 + 1 x 1 s
    assert _lease(router, "prior").late_after_s == 3.0
    assert _lease(router, "unknown").late_after_s is None
    # learned: mean 1 s, mean deviation 0.8 s (above its floor of 0.5 s): 1 + 1 x 0.8
    raw.hset(RouterKeys(namespace).router("K_EST"), mapping={"prior|lat": 1000,
                                                               "prior|latd": 800})
    assert _lease(router, "prior").late_after_s == 1.8
    # a retried admission (same request id) gets its lease again, and the same figure
    first = _lease(router, "prior", rid="again")
    second = _lease(router, "prior", rid="again")
    assert second.reused and second.lease_id == first.lease_id
    assert second.late_after_s == 1.8


def test_an_abandoned_call_frees_its_slot_and_says_nothing_of_the_model(
        make_router: object, raw: redis.Redis, namespace: str) -> None:
    router: RouterClient = make_router(breaker_failures=2)  # type: ignore[operator]
    router.set_quota("m", {**ROOMY, "max_concurrency": 3, "expected_latency_s": 2.0})
    leases = [_lease(router, "m") for _ in range(3)]
    assert router.stats().models["m"].in_flight == 3
    # more abandoned calls than the breaker's threshold, usage unknown
    for lease in leases:
        assert router.complete(lease.lease_id, outcome="abandoned") == "released"
    m = router.stats().models["m"]
    assert m.in_flight == 0
    assert m.breaker == "closed"
    assert m.counters["abandoned"] == 3
    assert m.counters["errors"] == 0 and m.counters["completed"] == 0
    assert m.requests == 3 and m.tokens == 300  # the window keeps each estimate
    # no latency learned from a call whose end nobody saw
    assert raw.hget(RouterKeys(namespace).router("K_EST"), "m|lat") is None
    assert m.latency_ms == 2000
    # and the model still admits (the breaker never opened)
    assert _lease(router, "m").model == "m"


def test_a_model_s_late_point_can_be_read_without_an_admission(router: RouterClient) -> None:
    """A caller whose call was admitted before anything was known of its model's latency
    reads the late point later (solver/hedging.py ``LatePoints``): the figure an
    admission on the model returns then."""
    router.set_quota("prior", {**ROOMY, "expected_latency_s": 2.0})
    router.set_quota("cold", ROOMY)
    assert router.late_after_s("prior") == 3.0 == _lease(router, "prior").late_after_s
    cold = _lease(router, "cold")
    assert cold.late_after_s is None and router.late_after_s("cold") is None
    router.complete(cold.lease_id, 3, 4, latency_s=0.8)  # learned: 0.8 s, deviation floor
    late = router.late_after_s("cold")
    assert late is not None and late == pytest.approx(_lease(router, "cold").late_after_s,
                                                      abs=0.001)
    assert 0.8 < late < 2.0
    assert router.late_after_s("no-such-model") is None
