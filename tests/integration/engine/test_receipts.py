"""A call whose backend says when it counted it (``Completion.received_at_s``, from the
``x-received-ms`` header) counts in its model's window from that receipt plus a margin, not
from its send plus the model's guard (``guard_receipts`` in lib/guard.lua): the guard is for
the delays of calls not answered yet.

What keeps it safe, each tested here with the fault that would break it: the entry counts
with the guard it was moved with for as long as it counts (the guard only decays; a quota
deleted and re-created, or given a new window, holds the window log by what the guard
drops), and once a 429 has widened the guard, receipts are not trusted for eight windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_llm_router.engine import Completion, RouterClient
from airflow_llm_router.engine.types import Admission, Wait
from tests.integration.engine.admitting import (
    admit_at_once,
    first_admission,
    redis_ms,
    until_redis_ms,
)

#: what a receipt's entry counts past its window (RECEIPT_MARGIN in lib/guard.lua)
MARGIN_MS = 25


def quota(window_s: float) -> dict[str, Any]:
    return {"rpm": 2, "tpm": 10**6, "max_concurrency": 10, "window_s": window_s}


def sent_pair(router: RouterClient) -> list[Admission]:
    """Both places of the window taken (in one admission call: no stall between them),
    their calls stamped as sent."""
    pair = admit_at_once(router, 3)
    assert len(pair) == 2
    router.mark_sent([x.lease_id for x in pair])
    return pair


def started(make_router: Callable[..., RouterClient], window_ms: int,
            **settings: Any) -> tuple[RouterClient, list[Admission]]:
    """A router with model "a" (rpm 2 in windows of ``window_ms``) and both its places
    taken by calls stamped as sent."""
    router = make_router(**settings)
    router.set_quota("a", quota(window_ms / 1000))
    return router, sent_pair(router)


def entry_end(router: RouterClient, lease: Admission, window_ms: int) -> float:
    """When ``lease``'s window entry stops counting, by Redis's clock, with the guard in
    force now (the engine's rule: its score + the window + the guard)."""
    score = router.redis.zscore(router.core.keys.model("K_WIN", "a"), lease.lease_id)
    assert score is not None
    return float(score) + window_ms + router.stats().models["a"].guard_ms


def receive(router: RouterClient, lease: Admission, **said: Any) -> tuple[int, int]:
    """Settle ``lease`` as received by the backend now; the Redis times just before and
    after (the receipt lies between them)."""
    before = redis_ms(router)
    router.complete_many([Completion(lease.lease_id, 1, 0, "ok",
                                     received_at_s=time.time(), **said)])
    return before, redis_ms(router)


def test_an_answered_call_counts_from_its_receipt_not_its_send_plus_the_guard(
        make_router: Callable[..., RouterClient]) -> None:
    window_ms, guard_ms = 500, 1000
    # jitter 0: waits as the engine computes them
    router, (first, second) = started(make_router, window_ms, guard_ms=guard_ms,
                                      guard_share=0, jitter=0)
    unanswered = entry_end(router, second, window_ms)
    before, after = receive(router, first)
    # the receipt's entry: a window and the margin after the receipt, no guard
    assert before + window_ms + MARGIN_MS - 1 <= entry_end(router, first, window_ms)
    assert entry_end(router, first, window_ms) <= after + window_ms + MARGIN_MS
    assert entry_end(router, second, window_ms) == unanswered  # not answered: the guard
    assert router.stats().models["a"].counters["receipts"] == 1
    waiting = router.admit(1)
    assert isinstance(waiting, Wait) and waiting.reason == "rpm"
    assert waiting.retry_after_ms <= window_ms + MARGIN_MS  # not window + 1000 ms
    got = first_admission(router)
    admitted_at = router.redis.zscore(router.core.keys.model("K_WIN", "a"), got.lease_id)
    assert admitted_at is not None and admitted_at >= before + window_ms + MARGIN_MS - 1
    # the place it took was the answered call's: the other's was still held
    assert admitted_at < unanswered


def test_a_receipt_entry_counts_with_the_guard_left_after_a_halving_during_its_window(
        make_router: Callable[..., RouterClient]) -> None:
    window_ms = 2000
    router = make_router(guard_ms=20, guard_share=0)
    router.set_quota("a", quota(window_ms / 1000))
    lease = first_admission(router)
    # a measured delay widens the guard to 1.25 x 80 + 5 = 105 ms; what it holds above the
    # base halves 8 windows (16 s) after
    router.complete_many([Completion(lease.lease_id, 1, 0, "ok", arrival_delay_s=0.08)])
    widened = redis_ms(router)
    assert router.stats().models["a"].guard_ms == 105
    # a call sent and answered 1.5 s before the halving (a loaded machine's stall between
    # these steps must not reach the halving) counts 0.5 s past it
    until_redis_ms(router, widened + 8 * window_ms - 1500, timeout_s=30)
    first = first_admission(router)
    router.mark_sent([first.lease_id])
    before, _ = receive(router, first)
    assert router.stats().models["a"].guard_ms == 105  # (the halving had not come yet)
    until_redis_ms(router, widened + 8 * window_ms + 1, timeout_s=30)
    assert router.stats().models["a"].guard_ms == 63  # 20 + 85 / 2
    assert entry_end(router, first, window_ms) >= before + window_ms + MARGIN_MS - 1


def test_a_receipt_entry_keeps_a_widened_guard_when_the_quota_is_deleted_and_made_again(
        make_router: Callable[..., RouterClient]) -> None:
    window_ms = 1000
    router, (first, second) = started(make_router, window_ms, guard_ms=100, guard_share=0)
    # a measured delay widens the guard to 1.25 x 156 + 5 = 200 ms
    router.complete_many([Completion(second.lease_id, 1, 0, "ok", arrival_delay_s=0.156)])
    assert router.stats().models["a"].guard_ms == 200
    before, _ = receive(router, first)
    assert entry_end(router, first, window_ms) >= before + window_ms + MARGIN_MS - 1
    # the learned guard goes with the quota; the entry moved with it must not end sooner
    assert router.delete_quota("a")
    router.set_quota("a", quota(window_ms / 1000))
    assert router.stats().models["a"].guard_ms == 100
    assert entry_end(router, first, window_ms) >= before + window_ms + MARGIN_MS - 1


def test_a_receipt_entry_keeps_its_guard_when_the_window_shrinks(
        make_router: Callable[..., RouterClient]) -> None:
    # the base guard is a tenth of the window: 200 ms at 2 s, 100 ms at 1 s
    router = make_router(guard_ms=50, guard_share=0.1)
    router.set_quota("a", quota(2.0))
    first, _ = sent_pair(router)
    assert router.stats().models["a"].guard_ms == 200
    before, _ = receive(router, first)
    assert entry_end(router, first, 2000) >= before + 2000 + MARGIN_MS - 1
    router.set_quota("a", quota(1.0))
    assert router.stats().models["a"].guard_ms == 100
    # counted for the new window from its receipt, at least
    assert entry_end(router, first, 1000) >= before + 1000 + MARGIN_MS - 1


def test_after_a_429_widened_the_guard_receipts_wait_eight_windows(
        make_router: Callable[..., RouterClient]) -> None:
    window_ms = 500
    router, (first, second) = started(make_router, window_ms, guard_ms=50, guard_share=0,
                                      cooldown_ms=1)
    refused = redis_ms(router)
    router.complete_many([Completion(first.lease_id, outcome="rate_limited")])
    stats = router.stats().models["a"]
    assert stats.guard_ms == 100 and stats.counters["guard_widened"] == 1
    # the provider refused what the router counted: it may count from later than it says,
    # so a receipt does not move an entry earlier (one at the send would, trusted)
    sent_end = entry_end(router, second, window_ms)
    router.complete_many([Completion(second.lease_id, 1, 0, "ok",
                                     received_at_s=time.time() - 60)])
    assert entry_end(router, second, window_ms) == sent_end
    # eight windows later, receipts count again
    until_redis_ms(router, refused + 8 * window_ms + 1)
    late = first_admission(router)
    router.mark_sent([late.lease_id])
    sent_end = entry_end(router, late, window_ms)
    # a receipt long before the send counts from the send (below): the margin, not the
    # guard (75 ms after one halving)
    router.complete_many([Completion(late.lease_id, 1, 0, "ok",
                                     received_at_s=time.time() - 60)])
    assert entry_end(router, late, window_ms) < sent_end


def test_a_call_received_past_its_guard_counts_a_window_from_its_receipt(
        make_router: Callable[..., RouterClient]) -> None:
    # a loaded client or provider: the call reaches the backend later than its send plus
    # the guard (capped at a quarter window); the backend counts it a window from there,
    # so its entry must too, else its place frees while the backend still counts it
    router, (first, second) = started(make_router, 1000, guard_ms=50, guard_share=0)
    sent_end = entry_end(router, first, 1000)
    until_redis_ms(router, sent_end - 1000 + 450)  # 400 ms past its send + guard
    before, after = receive(router, first)
    ends = [entry_end(router, lease, 1000) for lease in (first, second)]
    assert before + 1000 + MARGIN_MS - 1 <= ends[0] <= after + 1000 + MARGIN_MS
    assert ends[1] == sent_end  # not answered: the guard
    assert router.stats().models["a"].counters["late_receipts"] == 1
    # the next place is the late call's, a window after its receipt (the unanswered call,
    # in flight, keeps its own: lib/model_state.lua)
    got = first_admission(router)
    admitted_at = router.redis.zscore(router.core.keys.model("K_WIN", "a"), got.lease_id)
    assert admitted_at is not None and admitted_at >= ends[0]
    assert not isinstance(router.admit(1), Admission)


def test_after_a_429_a_late_receipt_still_keeps_its_entry_longer(
        make_router: Callable[..., RouterClient]) -> None:
    # receipts are not trusted to free a place early after a 429, but one that says the
    # call arrived late only makes its entry count longer
    window_ms = 500
    router, (first, second) = started(make_router, window_ms, guard_ms=50, guard_share=0,
                                      cooldown_ms=1)
    router.complete_many([Completion(first.lease_id, outcome="rate_limited")])
    assert router.stats().models["a"].guard_ms == 100
    sent_end = entry_end(router, second, window_ms)
    until_redis_ms(router, sent_end - window_ms + 200)
    before, _ = receive(router, second)
    assert entry_end(router, second, window_ms) >= before + window_ms + MARGIN_MS - 1


def test_a_receipt_before_the_send_counts_from_the_send(
        make_router: Callable[..., RouterClient]) -> None:
    # a backend whose clock runs behind ours says it received the call before it was
    # sent: the entry counts from the send, plus the margin instead of the guard
    window_ms, guard_ms = 500, 300
    router, (first, _) = started(make_router, window_ms, guard_ms=guard_ms, guard_share=0)
    sent_end = entry_end(router, first, window_ms)
    router.complete_many([Completion(first.lease_id, 1, 0, "ok",
                                     received_at_s=time.time() - 60)])
    assert entry_end(router, first, window_ms) == sent_end - guard_ms + MARGIN_MS


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "2"])
def test_a_bad_receipt_is_refused_naming_the_field(
        make_router: Callable[..., RouterClient], bad: object) -> None:
    router = make_router()
    router.set_quota("a", quota(1.0))
    lease = first_admission(router)
    with pytest.raises(ValueError, match="received_at_s"):
        router.complete_many([Completion(lease.lease_id, 1, 0, "ok",
                                         received_at_s=bad)])  # type: ignore[arg-type]
    assert router.complete(lease.lease_id, 1, 0) == "released"  # nothing was settled


def test_a_receipt_far_ahead_of_our_clock_counts_from_the_settlement(
        make_router: Callable[..., RouterClient]) -> None:
    # a backend clock ahead of ours (here absurdly: /complete's fuzzing found it) says it
    # received the call later than now: the entry counts from the settlement
    window_ms = 500
    router, (first, _) = started(make_router, window_ms, guard_ms=300, guard_share=0)
    before = redis_ms(router)
    assert router.complete_many([Completion(first.lease_id, 1, 0, "ok",
                                            received_at_s=1e308)]) == ["released"]
    assert entry_end(router, first, window_ms) >= before + window_ms + MARGIN_MS
