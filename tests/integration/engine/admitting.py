"""Admitting one-token requests in engine tests: all that fit now, or as soon as any do; and
the engine's clock (Redis TIME), which window entries and leases are stamped with."""

from __future__ import annotations

import time
from collections.abc import Callable

from airflow_llm_router.engine import AdmitRequest, RouterClient
from airflow_llm_router.engine.core import ADMIT_CHUNK
from airflow_llm_router.engine.types import Admission, Wait


def redis_ms(router: RouterClient) -> int:
    """Redis's clock in ms: what the scripts stamp window entries with."""
    seconds, micros = router.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def until_redis_ms(router: RouterClient, at: float, timeout_s: float = 10.0) -> None:
    """Until Redis's clock reads ``at`` ms or later (what window entries are judged by)."""
    deadline = time.monotonic() + timeout_s
    while redis_ms(router) < at:
        assert time.monotonic() < deadline
        time.sleep(0.02)  # Redis's clock passing is the condition: nothing to wait on


def admit_all(router: RouterClient, most: int = 200) -> list[Admission]:
    """Admit one-token requests until admission says wait (more than ``most``: a failure)."""
    out = []
    for _ in range(most):
        got = router.admit(1)
        if not isinstance(got, Admission):
            assert isinstance(got, Wait)
            return out
        out.append(got)
    raise AssertionError(f"{most} admitted: the limit did not hold")


def admit_at_once(router: RouterClient, asked: int) -> list[Admission]:
    """Ask for ``asked`` one-token requests in one admission call (one script run: no
    window entry can leave the window meanwhile, however loaded the machine) and return
    those admitted; at least one must wait (else the limit did not hold)."""
    assert asked <= ADMIT_CHUNK  # one script run
    decisions = router.admit_many([AdmitRequest(1) for _ in range(asked)])
    admitted = [d for d in decisions if isinstance(d, Admission)]
    assert len(admitted) < asked, f"all {asked} admitted: the limit did not hold"
    return admitted


def _poll(take: Callable[[], list[Admission]], timeout_s: float,
          every_s: float) -> list[Admission]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = take()
        if got:
            return got
        assert time.monotonic() < deadline, "nothing admitted in time"
        time.sleep(every_s)


def until_admits(router: RouterClient, every_s: float, timeout_s: float = 10.0,
                 ) -> list[Admission]:
    """As soon as the window (and any cooldown) let a call in again, all it takes."""
    return _poll(lambda: admit_all(router), timeout_s, every_s)


def first_admission(router: RouterClient, timeout_s: float = 10.0) -> Admission:
    """One admission, as soon as there is room for it."""
    def one() -> list[Admission]:
        got = router.admit(1)
        return [got] if isinstance(got, Admission) else []

    return _poll(one, timeout_s, 0.005)[0]
