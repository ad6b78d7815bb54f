"""Batched calls: one admit or complete script settles many requests, with its writes made
once per model; decisions later in a batch must see the admissions made earlier in it."""

from __future__ import annotations

from collections.abc import Callable

from airflow_llm_router.engine import Completion, RouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, Wait

BIG = {"rpm": 10**6, "tpm": 10**9, "max_concurrency": 10**5}


def test_waits_in_a_batch_count_its_own_admissions(
    make_router: Callable[..., RouterClient],
) -> None:
    # without jitter, so the wait is the engine's own: a wait stretched by up to a tenth of
    # window + guard (11,110 ms here) once failed a bound that had left the guard out
    router = make_router(jitter=0)
    router.set_quota("a", {"rpm": 3, "tpm": 10**6, "max_concurrency": 100, "window_s": 10})
    decisions = router.admit_many([AdmitRequest(10) for _ in range(4)])
    assert [type(d) for d in decisions] == [Admission] * 3 + [Wait]
    wait = decisions[3]
    assert isinstance(wait, Wait) and wait.reason == "rpm"
    # the wait is until this batch's first admission leaves the window (admitted in the
    # same script call, at the same instant): the window plus the model's guard; not a
    # blind maximum
    assert wait.retry_after_ms == 10_000 + router.stats().models["a"].guard_ms


def test_concurrency_wait_in_a_batch_is_the_earliest_lease_expiry(router: RouterClient) -> None:
    router.set_quota("a", {**BIG, "max_concurrency": 2})
    decisions = router.admit_many([AdmitRequest(1) for _ in range(3)])
    wait = decisions[2]
    assert isinstance(wait, Wait) and wait.reason == "concurrency"
    assert wait.retry_after_ms > 1_000  # the batch's leases are live: not "try again in 1 ms"
    assert router.stats().models["a"].in_flight == 2


def test_one_request_id_twice_in_a_batch_reserves_once(router: RouterClient) -> None:
    router.set_quota("a", BIG)
    first, again = router.admit_many([AdmitRequest(100, request_id="p-1"),
                                      AdmitRequest(100, request_id="p-1")])
    assert isinstance(first, Admission) and isinstance(again, Admission)
    assert again.lease_id == first.lease_id and again.reused and not first.reused
    stats = router.stats().models["a"]
    assert (stats.requests, stats.tokens, stats.in_flight) == (1, 100, 1)


def test_big_batches_admit_and_settle_everything(router: RouterClient) -> None:
    router.set_quota("a", BIG)
    router.set_quota("b", BIG)
    n = 700  # more than one script call (chunks) and one flush of a model's writes
    decisions = router.admit_many([AdmitRequest(10, request_id=f"r{k}") for k in range(n)])
    leases = [d for d in decisions if isinstance(d, Admission)]
    assert len(leases) == n and len({d.lease_id for d in leases}) == n
    stats = router.stats().models
    assert sum(s.requests for s in stats.values()) == n
    assert sum(s.in_flight for s in stats.values()) == n
    statuses = router.complete_many([Completion(d.lease_id, 3, 4) for d in leases])
    assert statuses == ["released"] * n
    stats = router.stats().models
    assert sum(s.in_flight for s in stats.values()) == 0
    assert sum(s.tokens for s in stats.values()) == 7 * n
    assert sum(s.counters["completed"] for s in stats.values()) == n
    # the request ids were released with their leases: asking again admits afresh
    again = router.admit(10, request_id="r0")
    assert isinstance(again, Admission) and not again.reused


def test_mixed_outcomes_and_a_repeated_lease_in_one_complete(router: RouterClient) -> None:
    router.set_quota("a", {**BIG, "weight": 1.0})
    router.set_quota("b", {**BIG, "weight": 1.0})
    leases = [d for d in router.admit_many([AdmitRequest(10, models=(m,))
                                            for m in ("a", "a", "b", "b")])
              if isinstance(d, Admission)]
    a1, a2, b1, b2 = leases
    statuses = router.complete_many([
        Completion(a1.lease_id, 5, 5),
        Completion(b1.lease_id, 5, 5, outcome="rate_limited", retry_after_s=30),
        Completion(a1.lease_id, 5, 5),  # the same lease again: already settled
        Completion(b2.lease_id, 5, 5),
        Completion("a#999999", 5, 5),  # never admitted
        Completion(a2.lease_id, None, None, outcome="error"),
    ])
    assert statuses == ["released", "released", "unknown", "released", "unknown", "released"]
    stats = router.stats().models
    assert stats["a"].tokens == 10 + 10  # a1 settled to 5 + 5; a2's estimate stays
    assert stats["a"].counters["completed"] == 1 and stats["a"].counters["errors"] == 1
    assert stats["b"].counters["rate_limited"] == 1 and stats["b"].counters["completed"] == 1
    assert stats["b"].cooldown_ms > 20_000  # the 429 started b's cooldown for everyone
    assert (stats["a"].in_flight, stats["b"].in_flight) == (0, 0)
