"""Traffic history: the scripts record each model's traffic into time buckets in Redis
(lib/history.lua), bounded and expiring, and both clients read the same."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from airflow_llm_router.engine import AsyncRouterClient, Completion, RouterClient
from airflow_llm_router.engine.history import ModelHistory, RouterHistory
from airflow_llm_router.engine.types import Admission, RouterSettings, Wait

QUOTA = {"rpm": 40, "tpm": 100_000, "max_concurrency": 6}
#: lib/history.lua's bucket length and the buckets it keeps
BUCKET_MS, KEEP = 10_000, 360


def admit(router: RouterClient, n: int, tokens: int = 100) -> list[Admission]:
    leases = [router.admit(tokens, models=["a"]) for _ in range(n)]
    assert all(isinstance(x, Admission) for x in leases), leases
    return leases  # type: ignore[return-value]


def model(history: RouterHistory, name: str = "a") -> ModelHistory:
    return history.models[name]


def peak(h: ModelHistory, field: str) -> int:
    return max(getattr(b, field) or 0 for b in h.buckets)


def last(h: ModelHistory, field: str) -> int | None:
    """The value of ``field`` in the newest bucket that recorded one."""
    values = [getattr(b, field) for b in h.buckets if getattr(b, field) is not None]
    return values[-1] if values else None


def test_admissions_window_peaks_and_targets_are_recorded(router: RouterClient) -> None:
    assert model(router.history(["a"])).buckets == ()  # nothing before any traffic
    router.set_quota("a", QUOTA)
    leases = admit(router, 6, tokens=250)
    router.complete_many([Completion(x.lease_id, 100, 50) for x in leases[:4]])
    leases += admit(router, 3, tokens=250)  # 9 in the window, 5 in flight
    assert isinstance(router.admit(10, models=["a"]), Admission)  # the 6th slot
    assert isinstance(router.admit(10, models=["a"]), Wait)  # the slots are full

    h = model(router.history())
    assert h.totals() == {"admitted": 10, "rate_limited": 0, "errors": 0,
                          "breaker_opened": 0}
    assert peak(h, "requests") == 10  # what the window held, against rpm
    assert peak(h, "in_flight") == 6  # against max_concurrency
    # tokens in the window at its peak: 4 settled at 150, 5 estimates of 250, one of 10
    assert peak(h, "tokens") == 4 * 150 + 5 * 250 + 10
    assert (last(h, "rpm"), last(h, "tpm"), last(h, "max_concurrency")) == (40, 100_000, 6)
    assert last(h, "window_ms") == 60_000
    assert last(h, "eff_rpm") is None  # no learned limit: the target holds
    now = router.history().now_ms
    assert all(now - KEEP * BUCKET_MS < b.start_ms <= now for b in h.buckets)
    assert [b.start_ms for b in h.buckets] == sorted(b.start_ms for b in h.buckets)


def test_429s_errors_and_breaker_openings_are_marked(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router(breaker_failures=2, breaker_open_ms=60_000, cooldown_ms=1)
    router.set_quota("a", QUOTA)
    leases = admit(router, 6)
    router.complete_many([Completion(leases[0].lease_id, 10, 10, "rate_limited", 0.001),
                          Completion(leases[1].lease_id, 10, 10, "ok")])
    router.complete(leases[2].lease_id, outcome="error")
    router.complete(leases[3].lease_id, outcome="error")  # the second in a row opens it
    h = model(router.history())
    assert h.totals() == {"admitted": 6, "rate_limited": 1, "errors": 2,
                          "breaker_opened": 1}
    counters = router.stats().models["a"].counters  # the engine's own counters agree
    assert (counters["rate_limited"], counters["errors"], counters["breaker_opened"]) \
        == (1, 2, 1)


def test_a_learned_effective_limit_and_a_quota_change_are_recorded(
        make_router: Callable[..., RouterClient]) -> None:
    router = make_router(cooldown_ms=1)
    router.set_quota("a", {**QUOTA, "max_concurrency": 100})
    leases = admit(router, 40)
    # the provider took 3 and refused the rest: the share is cut to half
    router.complete_many([Completion(x.lease_id, 1, 0, "ok" if k < 3 else "rate_limited",
                                     0.001) for k, x in enumerate(leases)])
    assert isinstance(router.admit(1, models=["a"]), Wait)  # loads the model: a sample
    h = model(router.history())
    assert (last(h, "eff_rpm"), last(h, "eff_tpm"), last(h, "eff_max_concurrency")) \
        == (20, 50_000, 50)
    assert h.totals()["rate_limited"] == 37

    router.set_quota("a", {**QUOTA, "rpm": 80})  # a new target, recorded when set
    h = model(router.history())
    assert last(h, "rpm") == 80
    assert h.buckets[-1].eff_rpm is None  # a new quota forgets the learned limit


def test_history_is_bounded_and_expires(router: RouterClient, redis_url: str) -> None:
    key = router.core.keys.model("K_HIST", "a")
    r = redis.Redis.from_url(redis_url)
    try:
        now_bucket = router.history().now_ms // BUCKET_MS
        # a full hour of buckets that ended an hour ago, with a gap since
        old = range(now_bucket - 2 * KEEP, now_bucket - KEEP)
        r.hset(key, mapping={str(b): "1,1,1,1,0,0,0,40,100000,6,-1,-1,-1,60000" for b in old})
        assert r.hlen(key) == KEEP
        router.set_quota("a", {**QUOTA, "rpm": 1000, "max_concurrency": 1000})  # makes room
        assert r.hlen(key) <= KEEP
        assert 0 < r.pttl(key) <= (KEEP + 1) * BUCKET_MS  # and it goes away when idle
        started = time.monotonic()
        for _ in range(300):  # many calls in a bucket add no field
            admit(router, 1)
        spanned = int((time.monotonic() - started) * 1000 // BUCKET_MS) + 2
        assert r.hlen(key) <= KEEP
        h = model(router.history())
        assert h.totals()["admitted"] == 300  # only the last hour is read
        assert len(h.buckets) <= spanned
    finally:
        r.close()


def test_minutes_and_model_names_are_checked(router: RouterClient) -> None:
    for bad in (0, 61, 1.5, True):
        with pytest.raises(ValueError, match="minutes"):
            router.history(minutes=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model"):
        router.history(["bad name"])
    assert router.history(minutes=1).span_ms == 60_000


def test_many_models_are_read_in_several_calls(router: RouterClient) -> None:
    names = [f"m{k:02d}" for k in range(70)]
    for name in names:
        router.set_quota(name, QUOTA)
    history = router.history()
    assert sorted(history.models) == names
    assert all(last(h, "rpm") == 40 for h in history.models.values())


async def test_sync_and_async_clients_read_the_same(
        router: RouterClient, namespace: str, redis_url: str) -> None:
    client = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    try:
        await client.set_quota("a", QUOTA)
        leases = [await client.admit(100, models=["a"]) for _ in range(3)]
        assert all(isinstance(x, Admission) for x in leases)
        admit(router, 2)  # both callers' traffic lands in the same buckets
        await client.complete(leases[0].lease_id, outcome="rate_limited")  # type: ignore[union-attr]
        seen_async = await client.history(["a"])
        seen_sync = router.history(["a"])
        assert seen_async.models == seen_sync.models
        assert model(seen_sync).totals()["admitted"] == 5
        assert model(seen_sync).totals()["rate_limited"] == 1
    finally:
        await client.aclose()
