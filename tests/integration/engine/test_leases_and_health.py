"""Leases (expiry, heartbeat), quota changes, cooldowns and the circuit breaker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, Wait
from airflow_llm_router.exceptions import LeaseNotFoundError
from tests.integration.engine.admitting import redis_ms


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll an engine condition that only the passage of time can make true."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_expired_lease_frees_slot_but_not_tokens(make_router: Callable[..., RouterClient]) -> None:
    router = make_router(lease_ttl_s=0.2)
    router.set_quota("a", {"rpm": 100, "tpm": 150, "max_concurrency": 1, "window_s": 30})
    held = router.admit(100)
    assert isinstance(held, Admission)
    blocked = router.admit(40)
    assert isinstance(blocked, Wait) and blocked.reason == "concurrency"
    admitted = router.wait_for_admission(AdmitRequest(40), timeout_s=5)
    assert admitted is not None  # the slot came back when the lease expired...
    stats = router.stats().models["a"]
    assert stats.tokens == 140 and stats.counters["expired"] == 1  # ...its tokens did not
    router.complete(admitted.lease_id, 20, 20)
    too_many = router.admit(100)
    assert isinstance(too_many, Wait) and too_many.reason == "tpm"
    # a late completion of the expired lease still settles its actual usage
    assert router.complete(held.lease_id, 5, 5) == "settled"
    assert router.stats().models["a"].tokens == 50


def test_heartbeat_keeps_a_lease_alive(make_router: Callable[..., RouterClient]) -> None:
    router = make_router(lease_ttl_s=0.5)
    router.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 1})
    lease = router.admit(1)
    assert isinstance(lease, Admission)
    started = time.monotonic()
    while time.monotonic() - started < 1.2:  # more than two TTLs
        assert router.heartbeat(lease.lease_id) == pytest.approx(0.5)
        assert router.stats().models["a"].in_flight == 1
        time.sleep(0.1)
    wait_until(lambda: router.stats().models["a"].in_flight == 0)
    with pytest.raises(LeaseNotFoundError):
        router.heartbeat(lease.lease_id)
    assert router.complete(lease.lease_id, 1, 0) == "settled"
    assert router.complete("a#999999", 1, 0) == "unknown"


def test_quota_change_applies_at_next_admission(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 100, "window_s": 30})
    for _ in range(30):
        assert isinstance(router.admit(1), Admission)
    router.set_quota("a", {"rpm": 20, "tpm": 10**6, "max_concurrency": 100, "window_s": 30})
    wait = router.admit(1)
    assert isinstance(wait, Wait) and wait.reason == "rpm"
    router.set_quota("a", {"rpm": 31, "tpm": 10**6, "max_concurrency": 100, "window_s": 30})
    assert isinstance(router.admit(1), Admission)
    assert isinstance(router.admit(1), Wait)


def test_rate_limited_starts_a_cooldown_for_every_caller(
    make_router: Callable[..., RouterClient],
) -> None:
    one, other = make_router(), make_router()
    one.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 10})
    lease = one.admit(1)
    assert isinstance(lease, Admission)
    one.complete(lease.lease_id, 1, 0, outcome="rate_limited", retry_after_s=5)
    wait = other.admit(1)
    assert isinstance(wait, Wait) and wait.reason == "cooldown"
    assert 4_000 < wait.retry_after_ms <= 5_600
    assert other.stats().models["a"].counters["rate_limited"] == 1


def test_breaker_opens_then_half_open_probe_closes_it(
    make_router: Callable[..., RouterClient],
) -> None:
    router = make_router(breaker_failures=3, breaker_open_ms=200)
    router.set_quota("a", {"rpm": 1000, "tpm": 10**6, "max_concurrency": 10})
    for _ in range(3):
        lease = router.admit(1)
        assert isinstance(lease, Admission)
        router.complete(lease.lease_id, outcome="error")
    wait = router.admit(1)
    assert isinstance(wait, Wait) and wait.reason == "breaker"
    assert router.stats().models["a"].breaker == "open"
    probe = router.wait_for_admission(AdmitRequest(1), timeout_s=5)
    assert probe is not None
    assert router.stats().models["a"].breaker == "half_open"
    second = router.admit(1)
    assert isinstance(second, Wait) and second.reason == "breaker"  # one probe at a time
    router.complete(probe.lease_id, 1, 1)
    assert router.stats().models["a"].breaker == "closed"
    assert isinstance(router.admit(1), Admission)


def test_failed_probe_opens_the_breaker_again(make_router: Callable[..., RouterClient]) -> None:
    router = make_router(breaker_failures=1, breaker_open_ms=100)
    router.set_quota("a", {"rpm": 1000, "tpm": 10**6, "max_concurrency": 10})
    lease = router.admit(1)
    assert isinstance(lease, Admission)
    router.complete(lease.lease_id, outcome="error")
    probe = router.wait_for_admission(AdmitRequest(1), timeout_s=5)
    assert probe is not None
    router.complete(probe.lease_id, outcome="error")
    assert router.stats().models["a"].breaker == "open"
    assert router.stats().models["a"].counters["breaker_opened"] == 2


def test_an_unknown_model_opens_the_breaker_at_once_with_its_cause(
    make_router: Callable[..., RouterClient],
) -> None:
    """One 404 unknown_model (not a streak of errors) takes the model out of rotation:
    an any-model request goes to the other model; the cause shows in the stats until a
    probe succeeds."""
    router = make_router(breaker_failures=5, breaker_open_ms=300)
    for model in ("typo", "good"):
        router.set_quota(model, {"rpm": 1000, "tpm": 10**6, "max_concurrency": 10})
    lease = router.admit(1, models=["typo"])
    assert isinstance(lease, Admission)
    router.complete(lease.lease_id, outcome="unknown_model")
    typo = router.stats().models["typo"]
    assert typo.breaker == "open" and typo.breaker_cause == "unknown_model"
    assert typo.counters["unknown_model"] == 1 and typo.counters["breaker_opened"] == 1
    assert router.stats().models["good"].breaker_cause is None
    for _ in range(3):
        other = router.admit(1)
        assert isinstance(other, Admission) and other.model == "good"
    probe = router.wait_for_admission(AdmitRequest(1, models=("typo",)), timeout_s=5)
    assert probe is not None and probe.model == "typo"
    router.complete(probe.lease_id, 1, 1)
    typo = router.stats().models["typo"]
    assert typo.breaker == "closed" and typo.breaker_cause is None


def test_hot_request_is_admitted_ahead_of_waiting_bulk(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 1000, "tpm": 10**6, "max_concurrency": 1})
    holder = router.admit(1)
    assert isinstance(holder, Admission)
    bulk, hot = AdmitRequest(1, request_id="bulk-1"), AdmitRequest(1, priority="hot")
    assert isinstance(router.admit_many([bulk])[0], Wait)
    assert isinstance(router.admit_many([hot])[0], Wait)
    router.complete(holder.lease_id, 1, 0)
    # the bulk request asks first, but the hot one waiting ahead of it gets the slot
    yielded = router.admit_many([bulk])[0]
    assert isinstance(yielded, Wait)
    assert isinstance(router.admit_many([hot])[0], Admission)


@pytest.mark.parametrize(("hot_share", "bulk_admitted"), [(0.8, 2), (1.0, 0)])
def test_waiting_hot_requests_hold_back_at_most_their_share_from_bulk(
        make_router: Callable[..., RouterClient], hot_share: float, bulk_admitted: int) -> None:
    """Ten hot requests wait on a model of 10 slots. When the slots free, they hold back
    ceil(hot_share * 10) of them from bulk requests: with 0.8, bulk still gets 2 (a bounded
    bypass: a stream of hot work never starves bulk); with 1.0, none."""
    router = make_router(hot_share=hot_share)
    router.set_quota("a", {"rpm": 1000, "tpm": 10**6, "max_concurrency": 10})
    holders = [router.admit(1) for _ in range(10)]
    assert all(isinstance(h, Admission) for h in holders)
    hot = [AdmitRequest(1, priority="hot", request_id=f"hot-{k}") for k in range(10)]
    assert all(isinstance(d, Wait) for d in router.admit_many(hot))
    for h in holders:
        router.complete(h.lease_id, 1, 0)  # type: ignore[union-attr]
    bulk = router.admit_many([AdmitRequest(1, request_id=f"bulk-{k}") for k in range(5)])
    assert sum(isinstance(d, Admission) for d in bulk) == bulk_admitted
    # the hot ones take the rest, at once
    again = router.admit_many(hot)
    assert sum(isinstance(d, Admission) for d in again) == 10 - bulk_admitted


def test_large_waiting_request_is_not_starved(make_router: Callable[..., RouterClient]) -> None:
    router = make_router(starve_ms=200)
    router.set_quota("a", {"rpm": 1000, "tpm": 1000, "max_concurrency": 100, "window_s": 1})
    assert isinstance(router.admit(500), Admission)
    large = AdmitRequest(900, request_id="large")
    assert isinstance(router.admit_many([large])[0], Wait)
    queued_at = time.monotonic()
    assert isinstance(router.admit(100), Admission)  # not waited long yet: small ones pass
    assert router.stats().waiting == 1
    wait_until(lambda: time.monotonic() - queued_at >= 0.25)  # the large one ages past starve_ms
    small = router.admit(100)
    assert isinstance(small, Wait)  # now the large one holds its room back
    admitted = router.wait_for_admission(large, timeout_s=5)
    assert admitted is not None


def test_deleted_quota_stops_admissions(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 10})
    router.set_quota("b", {"rpm": 100, "tpm": 10**6, "max_concurrency": 10})
    assert router.delete_quota("a") is True
    assert router.delete_quota("a") is False
    assert set(router.get_quotas()) == {"b"}
    assert {router.admit(1).model for _ in range(5)} == {"b"}  # type: ignore[union-attr]


def test_every_key_shares_the_namespace_hash_tag(router: RouterClient, namespace: str) -> None:
    router.set_quota("a", {"rpm": 2, "tpm": 10**6, "max_concurrency": 1})
    lease = router.admit(1)
    assert isinstance(lease, Admission)
    router.admit(1)
    router.complete(lease.lease_id, 1, 1, outcome="error")
    router.stats()
    keys = [k.decode() for k in router.redis.scan_iter(match=f"*{namespace}*")]
    assert len(keys) >= 8
    assert all(k.startswith(f"llmr:{{{namespace}}}:") for k in keys)


def test_sent_restarts_the_window_entry_from_now(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 10, "tpm": 10**6, "max_concurrency": 10})
    lease = router.admit(1)
    assert isinstance(lease, Admission)
    window = router.core.keys.model("K_WIN", "a")
    admitted_at = router.redis.zscore(window, lease.lease_id)

    wait_until(lambda: redis_ms(router) > admitted_at + 2)  # the call waits a little before sending
    before = redis_ms(router)
    assert router.mark_sent([lease.lease_id]) == 1
    assert router.redis.zscore(window, lease.lease_id) >= before > admitted_at
    assert router.mark_sent(["a#404"]) == 0  # unknown leases are ignored


def test_sent_with_its_age_restarts_the_entry_from_the_send(router: RouterClient) -> None:
    """A stamp that says how long ago its call went out (``ago_s``, by the caller's clock)
    moves the entry to that moment, not to when the stamp reached Redis, and never earlier
    than the admission; a bad age is refused naming the argument."""
    router.set_quota("a", {"rpm": 10, "tpm": 10**6, "max_concurrency": 10})
    early, late = router.admit(1), router.admit(1)
    assert isinstance(early, Admission) and isinstance(late, Admission)
    window = router.core.keys.model("K_WIN", "a")
    admitted_at = router.redis.zscore(window, late.lease_id)

    wait_until(lambda: redis_ms(router) > admitted_at + 300)
    before = redis_ms(router)
    # late: sent 200 ms before the stamp; early: "sent" before its own admission
    assert router.mark_sent([late.lease_id, early.lease_id], [0.2, 60.0]) == 1
    after = redis_ms(router)
    # (and the half ms that marks a sent call's entry: lib/model_state.lua)
    assert before - 200 <= router.redis.zscore(window, late.lease_id) <= after - 200 + 0.5
    assert router.redis.zscore(window, early.lease_id) <= admitted_at  # never moved back
    with pytest.raises(ValueError, match="ago_s"):
        router.mark_sent([late.lease_id], [float("inf")])
    with pytest.raises(ValueError, match="ago_s"):
        router.mark_sent([late.lease_id], [0.1, 0.2])
