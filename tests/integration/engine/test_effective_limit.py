"""The effective limit: a provider whose real limit is below the quota says so with 429s,
and admission learns the share of the quota it can really have (lib/effective.lua)."""

from __future__ import annotations

import time
from collections.abc import Callable

from airflow_llm_router.engine import Completion, RouterClient
from airflow_llm_router.engine.types import Admission
from tests.integration.engine import admitting
from tests.integration.engine.admitting import admit_all, admit_at_once

WINDOW_S = 0.4
QUOTA = {"rpm": 40, "tpm": 10**6, "max_concurrency": 100, "window_s": WINDOW_S}


def provider_takes(router: RouterClient, leases: list[Admission], accepted: int) -> None:
    """Settle a burst as a provider that takes ``accepted`` calls and refuses the rest."""
    router.complete_many([
        Completion(lease.lease_id, 1, 0, "ok" if k < accepted else "rate_limited", 0.001)
        for k, lease in enumerate(leases)])


def next_burst(router: RouterClient) -> list[Admission]:
    """What admission lets in once the window (and the cooldown) has room again. The last
    burst's entries leave the window over the milliseconds it took to admit them (more of
    them on a loaded machine): gather what it lets in over half a window (their new
    entries stay in it)."""
    burst = admitting.until_admits(router, every_s=WINDOW_S / 20)
    gather_until = time.monotonic() + WINDOW_S / 2
    while time.monotonic() < gather_until:
        burst += admit_all(router)
        time.sleep(WINDOW_S / 40)
    return burst


def test_429s_cut_the_share_at_most_by_half_down_to_what_the_provider_took(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router(cooldown_ms=1)
    router.set_quota("a", QUOTA)
    # in one admission call: admitted one by one, the first entries of a 0.4 s window
    # could leave it before the last is admitted on a loaded machine
    first = admit_at_once(router, 41)
    assert len(first) == 40  # the quota, before anything is known
    provider_takes(router, first, accepted=3)
    stats = router.stats().models["a"]
    # the first 429 cuts; the other 36 were admitted under the old share and do not
    assert stats.counters["limit_cuts"] == 1
    assert stats.limit_share == 0.5  # at most half at once (3/40 said more)
    assert stats.effective is not None and stats.effective["rpm"] == 20

    for admitted, share in [(20, 0.25), (10, 0.125), (5, 3 / 40)]:
        burst = next_burst(router)
        assert len(burst) == admitted
        provider_takes(router, burst, accepted=3)
        assert abs(router.stats().models["a"].limit_share - share) < 1e-6

    stats = router.stats().models["a"]
    assert stats.counters["limit_cuts"] == 4
    assert stats.effective is not None and stats.effective["rpm"] == 3  # what it took
    last = next_burst(router)
    assert len(last) == 3  # the provider's real limit: no 429 from here on
    provider_takes(router, last, accepted=3)
    assert router.stats().models["a"].counters["limit_cuts"] == 4


def test_after_clean_windows_the_share_probes_back_up_and_a_new_quota_resets_it(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router(cooldown_ms=1)
    router.set_quota("a", QUOTA)
    burst = admit_all(router)
    cut_at = time.monotonic()  # at or before the cut: time since it is at least the hold's
    provider_takes(router, burst, accepted=20)
    assert router.stats().models["a"].limit_share == 0.5
    # held for two whole windows, then one call more (1/40 of the quota), then two, four...
    shares = [router.stats().models["a"].limit_share]
    while shares[-1] < 0.6:
        assert time.monotonic() - cut_at < 20 * WINDOW_S, shares
        time.sleep(WINDOW_S / 10)
        shares.append(router.stats().models["a"].limit_share)
    assert time.monotonic() - cut_at >= 5 * WINDOW_S  # hold + three windows, not sooner
    assert abs(shares[-1] - 0.675) < 1e-6
    assert sorted(set(shares)) == [0.5, 0.525, 0.575, 0.675], shares

    router.set_quota("a", QUOTA)  # the same quota: what was learned stays
    assert router.stats().models["a"].limit_share > 0.5
    router.set_quota("a", {**QUOTA, "rpm": 30})  # a new target: learned again from it
    stats = router.stats().models["a"]
    assert stats.limit_share == 1.0 and stats.effective is None


def test_errors_and_a_429_on_an_expired_lease_do_not_cut(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router(cooldown_ms=1, breaker_failures=100, lease_ttl_s=0.2)
    router.set_quota("a", QUOTA)
    burst = admit_at_once(router, 41)  # in one call (see above)
    assert len(burst) == 40
    router.complete_many([Completion(lease.lease_id, 1, 0, "error") for lease in burst[:20]])
    stats = router.stats().models["a"]
    assert stats.limit_share == 1.0 and stats.counters["limit_cuts"] == 0
    # the other 20 expire (their slots come back); a late 429 cannot say when it was
    # admitted any more, so it says nothing of the limit
    deadline = time.monotonic() + 5
    while router.stats().models["a"].counters["expired"] < 20:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    provider_takes(router, burst[20:], accepted=0)
    stats = router.stats().models["a"]
    assert stats.counters["rate_limited"] == 20
    assert stats.limit_share == 1.0 and stats.counters["limit_cuts"] == 0
