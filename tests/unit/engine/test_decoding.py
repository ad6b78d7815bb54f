"""Decoding a script's decision: a wait is stretched by up to ``jitter`` of itself, so
waiters told to come back together do not all come back at the same instant."""

from __future__ import annotations

from airflow_llm_router.engine.decoding import decode_decision
from airflow_llm_router.engine.types import AdmitRequest, Wait


def _waits(jitter: float, n: int = 200) -> list[int]:
    request = AdmitRequest(10)
    waits = [decode_decision(request, ["W", 10_100, "rpm"], jitter) for _ in range(n)]
    assert all(isinstance(w, Wait) and w.reason == "rpm" for w in waits)
    return [w.retry_after_ms for w in waits if isinstance(w, Wait)]


def test_a_wait_is_stretched_by_up_to_its_jitter_and_spread() -> None:
    waits = _waits(0.1)
    assert all(10_100 <= w <= 11_110 for w in waits)
    assert len(set(waits)) > 100  # spread, not one instant for every waiter


def test_without_jitter_a_wait_is_the_scripts_own() -> None:
    assert set(_waits(0.0, 20)) == {10_100}
