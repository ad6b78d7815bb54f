"""The guard (lib/guard.lua): how long past its window an admission keeps counting, per
model: a base that grows with the window, widened by measured arrival delays and by 429s,
decaying back; and what a provider states of its limits (announced limits, holds)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from airflow_llm_router.engine import Completion, RouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, Wait
from tests.integration.engine.admitting import admit_at_once, first_admission


def test_the_base_guard_grows_with_the_window(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router(guard_ms=50, guard_share=0.01)
    router.set_quota("short", {"rpm": 5, "tpm": 1000, "max_concurrency": 5, "window_s": 1})
    router.set_quota("long", {"rpm": 5, "tpm": 1000, "max_concurrency": 5, "window_s": 60})
    stats = router.stats().models
    assert stats["short"].guard_ms == 50  # 1 % of a second is less than the least guard
    assert stats["long"].guard_ms == 600  # 1 % of a minute


def test_a_measured_arrival_delay_widens_the_guard_and_admission_keeps_to_it(
        make_router: Callable[..., RouterClient]) -> None:
    window_s = 0.5
    router = make_router(guard_ms=20, guard_share=0)
    router.set_quota("a", {"rpm": 2, "tpm": 10**6, "max_concurrency": 10,
                           "window_s": window_s})
    before = time.monotonic()  # at or before the window entries' stamps
    first = admit_at_once(router, 3)  # one call: no stall between them outlasts the window
    assert len(first) == 2
    # the provider said the call reached it 80 ms after it was sent
    router.complete_many([Completion(first[0].lease_id, 1, 0, "ok", arrival_delay_s=0.08)])
    stats = router.stats().models["a"]
    assert stats.guard_ms == 105  # 1.25 x 80 ms + 5
    assert stats.counters["guard_widened"] == 1
    first_admission(router)
    # the window's entries counted for window + 105 ms, not window + 20 ms (less the 1 ms
    # the engine's clock drops: window stamps are Redis TIME in whole milliseconds)
    assert time.monotonic() - before >= window_s + 0.105 - 0.001
    # a shorter delay does not narrow it
    router.complete_many([Completion(first[1].lease_id, 1, 0, "ok", arrival_delay_s=0.01)])
    assert router.stats().models["a"].guard_ms == 105


def test_the_guard_is_capped_at_a_quarter_window_and_decays_back(
        make_router: Callable[..., RouterClient]) -> None:
    window_s = 0.2
    router = make_router(guard_ms=10, guard_share=0)
    router.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 100,
                           "window_s": window_s})
    lease = first_admission(router)
    widened = time.monotonic()  # at or before the widening
    router.complete_many([Completion(lease.lease_id, 1, 0, "ok", arrival_delay_s=5.0)])
    assert router.stats().models["a"].guard_ms == 50  # a quarter of 200 ms, not 6.25 s
    # what it holds above the base halves every 8 windows without a widening
    deadline = time.monotonic() + 10
    while (guard := router.stats().models["a"].guard_ms) > 30:
        assert time.monotonic() < deadline, guard
        time.sleep(0.02)
    assert guard == 30  # 10 + 40 / 2
    assert time.monotonic() - widened >= 8 * window_s


def test_a_429_doubles_the_guard_once_per_burst(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router(guard_ms=40, guard_share=0, cooldown_ms=1)
    router.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 100,
                           "window_s": 1})
    burst = [first_admission(router) for _ in range(5)]
    router.complete_many([Completion(x.lease_id, outcome="rate_limited") for x in burst])
    stats = router.stats().models["a"]
    assert stats.guard_ms == 80 and stats.counters["guard_widened"] == 1
    # the burst also cut the effective limit; below the quota a 429 is the learned
    # limit's answer, not a timing one: the guard stays
    assert stats.limit_share < 1
    late = first_admission(router)
    router.complete_many([Completion(late.lease_id, outcome="rate_limited")])
    assert router.stats().models["a"].guard_ms == 80
    # at the full quota again (a new quota resets what was learned), a call admitted after
    # the widening that is refused widens again
    router.set_quota("a", {"rpm": 90, "tpm": 10**6, "max_concurrency": 100, "window_s": 1})
    assert router.stats().models["a"].limit_share == 1
    late = first_admission(router)
    router.complete_many([Completion(late.lease_id, outcome="rate_limited")])
    stats = router.stats().models["a"]
    assert stats.guard_ms == 160 and stats.counters["guard_widened"] == 2


def test_announced_limits_cap_the_share_while_they_are_stated(
        make_router: Callable[..., RouterClient]) -> None:
    window_s = 0.3
    router = make_router(cooldown_ms=1)
    router.set_quota("a", {"rpm": 40, "tpm": 10**6, "max_concurrency": 100,
                           "window_s": window_s})
    lease = first_admission(router)
    said = time.monotonic()  # at or before the announcement
    router.complete_many([Completion(lease.lease_id, 1, 0, "ok", announced_rpm=10)])
    stats = router.stats().models["a"]
    assert stats.limit_share == 0.25 and stats.effective is not None
    assert stats.effective["rpm"] == 10
    assert stats.counters["rate_limited"] == 0 and stats.counters["limit_cuts"] == 0
    # admission keeps to it: 9 more in the window of the first (asked in one call)
    assert len(admit_at_once(router, 10)) == 9
    # unstated for 4 windows, the announcement lapses
    deadline = time.monotonic() + 10
    while router.stats().models["a"].limit_share < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert time.monotonic() - said >= 4 * window_s
    # tokens count too: the lower of the two shares
    lease = first_admission(router)
    router.complete_many([Completion(lease.lease_id, 1, 0, "ok", announced_rpm=40,
                                     announced_tpm=100_000)])
    assert router.stats().models["a"].limit_share == 0.1


def test_nothing_remaining_cools_the_model_down_without_a_429(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router()
    router.set_quota("a", {"rpm": 40, "tpm": 10**6, "max_concurrency": 100, "window_s": 1})
    lease = first_admission(router)
    router.complete_many([Completion(lease.lease_id, 1, 0, "ok", hold_s=0.5)])
    got = router.admit(1)
    assert isinstance(got, Wait) and got.reason == "cooldown", got
    stats = router.stats().models["a"]
    assert stats.cooldown_ms > 0
    assert stats.counters["rate_limited"] == 0 and stats.breaker == "closed"


def test_an_admission_with_a_hop_counts_from_when_its_call_may_reach_the_backend(
        make_router: Callable[..., RouterClient]) -> None:
    # a caller whose call reaches the backend up to 300 ms after its admission (an HTTP
    # hop): its window entry counts from then, so a later admission, by any caller, waits
    # for window + guard + hop, not window + guard, and never shares the call's backend
    # window over the limit
    window_s = 0.5
    router = make_router(guard_ms=20, guard_share=0)
    router.set_quota("a", {"rpm": 1, "tpm": 10**6, "max_concurrency": 10,
                           "window_s": window_s})
    before = time.monotonic()  # at or before the admission's stamp
    got = router.admit_many([AdmitRequest(estimated_tokens=1, hop_ms=300)])[0]
    assert isinstance(got, Admission)
    waiting = router.admit(1)
    assert isinstance(waiting, Wait) and waiting.reason == "rpm"
    first_admission(router)
    assert time.monotonic() - before >= window_s + 0.020 + 0.300 - 0.001


def test_a_hop_out_of_range_is_refused_naming_the_field(router: RouterClient) -> None:
    router.set_quota("a", {"rpm": 10, "tpm": 10**6, "max_concurrency": 10})
    with pytest.raises(ValueError, match="hop_ms"):
        router.admit_many([AdmitRequest(estimated_tokens=1, hop_ms=-1)])
    with pytest.raises(ValueError, match="hop_ms"):
        router.admit_many([AdmitRequest(estimated_tokens=1, hop_ms=120_000)])
    with pytest.raises(ValueError, match="hop_ms: True is not a whole number"):  # not 1 ms
        router.admit_many([AdmitRequest(estimated_tokens=1, hop_ms=True)])
    assert router.stats().models["a"].counters.get("admitted", 0) == 0
