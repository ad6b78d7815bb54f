"""Latency learned from completed calls: the prior first, then an EWMA of durations."""

from __future__ import annotations

import time

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission

QUOTA = {"rpm": 1000, "tpm": 10**6, "max_concurrency": 50}


def _call(router: RouterClient, hold_s: float, outcome: str = "ok") -> None:
    lease = router.admit(100)
    assert isinstance(lease, Admission)
    time.sleep(hold_s)
    router.complete(lease.lease_id, 50, 50, outcome=outcome)  # type: ignore[arg-type]


def test_prior_until_a_call_is_observed(router: RouterClient) -> None:
    router.set_quota("m", {**QUOTA, "expected_latency_s": 2.5})
    router.set_quota("n", QUOTA)
    stats = router.stats()
    assert stats.models["m"].latency_ms == 2500
    assert stats.models["n"].latency_ms is None
    assert router.get_quota("m").expected_latency_s == 2.5  # type: ignore[union-attr]


def test_the_ewma_starts_from_the_prior(router: RouterClient) -> None:
    # the first calls to end are a model's short ones: one does not replace the prior,
    # it moves the estimate a fifth of the way (30 s -> about 24 s for a 0.5 s call)
    router.set_quota("m", {**QUOTA, "expected_latency_s": 30.0})
    _call(router, 0.5)
    first = router.stats().models["m"].latency_ms
    assert first is not None and 24_000 <= first < 24_400
    for _ in range(5):
        _call(router, 0.0)
    after = router.stats().models["m"].latency_ms
    assert after is not None
    # Five fast calls (a few ms each) move the EWMA (alpha 0.2) to about 0.8^5 = 33 % of it:
    # not replaced by the last call, not stuck at the first.
    assert first * 0.8**5 - 1 <= after < first * 0.5


def test_only_ok_releases_count(router: RouterClient) -> None:
    router.set_quota("m", {**QUOTA, "expected_latency_s": 5.0})
    failed, limited, ok = (router.admit(100) for _ in range(3))
    assert all(isinstance(x, Admission) for x in (failed, limited, ok))
    router.complete(failed.lease_id, outcome="error")  # type: ignore[union-attr]
    router.complete(limited.lease_id, outcome="rate_limited")  # type: ignore[union-attr]
    assert router.stats().models["m"].latency_ms == 5000
    assert router.complete(ok.lease_id, 50, 50) == "released"  # type: ignore[union-attr]
    once = router.stats().models["m"].latency_ms  # 5 s prior, a call of a few ms
    assert once is not None and 3_990 <= once < 4_300
    router.complete(ok.lease_id, 50, 50)  # type: ignore[union-attr]  # not live: ignored
    assert router.stats().models["m"].latency_ms == once


def test_advice_uses_observed_latency(router: RouterClient) -> None:
    # rpm 10 per 1 s window = 10 calls/s; prior 2 s (past the window) -> 20 in flight;
    # five calls of ~0 s move the estimate (from the prior) to ~0.65 s -> the window's 10
    # calls at once (~6.5 for the steady rate alone).
    router.set_quota("m", {"rpm": 10, "tpm": 10**9, "max_concurrency": 100, "window_s": 1.0,
                           "expected_latency_s": 2.0})
    before = router.advice(backlog=1000, per_solver_in_flight=5)
    assert before.models["m"].needed_in_flight == 20 and before.solvers == 4
    for _ in range(5):
        _call(router, 0.0)
    after = router.advice(backlog=1000, per_solver_in_flight=5).models["m"]
    assert after.steady_in_flight < 10 and after.needed_in_flight == 10
    assert router.advice(backlog=1000, per_solver_in_flight=5).solvers == 2
    assert router.advice(backlog=0).solvers == 0
