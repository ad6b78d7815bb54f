"""Finish-time-aware choice (lib/finish.lua): a request that lets the engine choose tries
the models likeliest to finish it first, and waits for a fast model when that is sooner
than a slow model with room now (a model's room is used whenever using it does not make
the request finish later); the likely latency is the learned mean plus five mean
deviations, the deviation never below half the mean, and the mean is learned from the
quota's prior."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings, Wait

ROOMY = {"rpm": 1000, "tpm": 10**6, "max_concurrency": 100}


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _call(router: RouterClient, latency_s: float | None = None) -> None:
    """One call admitted and settled at once (``latency_s``: as its caller measured it)."""
    lease = router.admit(100)
    assert isinstance(lease, Admission), lease
    router.complete(lease.lease_id, 50, 50, latency_s=latency_s)


def _set_estimates(raw: redis.Redis, namespace: str, values: dict[str, float]) -> None:
    """Set learned estimates by hand. The engine keeps the models' order by likely latency
    as it learns them (lib/speed.lua); dropping that index makes it rebuild the order from
    the estimates, as it does for a namespace an older engine wrote."""
    keys = RouterKeys(namespace)
    raw.hset(keys.router("K_EST"), mapping=values)
    raw.delete(keys.router("K_SPEED"))


def _model(router: RouterClient, **kwargs: object) -> str:
    lease = router.admit(100, **kwargs)  # type: ignore[arg-type]
    assert isinstance(lease, Admission), lease
    return lease.model


def test_with_room_on_both_the_faster_model_takes_the_requests(router: RouterClient) -> None:
    router.set_quota("fast", {**ROOMY, "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "expected_latency_s": 30.0})
    # the weighted fair share would alternate; the finish time sends each to the fast one
    assert {_model(router) for _ in range(8)} == {"fast"}
    # an ordered list is the caller's choice: its first model with room
    assert _model(router, models=["slow", "fast"]) == "slow"


def test_a_request_waits_for_a_fast_model_that_frees_sooner(router: RouterClient) -> None:
    # fast: full after 2 calls for its 10 s window; likely done 10 s + 3.5 s from now.
    # slow: room now, likely done in 105 s (30 s mean + five deviations of half the mean)
    router.set_quota("fast", {**ROOMY, "rpm": 2, "window_s": 10,
                              "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "expected_latency_s": 30.0})
    assert [_model(router) for _ in range(2)] == ["fast", "fast"]
    decision = router.admit(100)
    assert isinstance(decision, Wait) and decision.reason == "rpm"
    assert 8_000 <= decision.retry_after_ms <= 12_000  # until fast's window frees
    # a batch decides the same way, request by request
    assert all(isinstance(d, Wait) for d in router.admit_many([AdmitRequest(100)] * 3))
    # the slow model still takes what only it is allowed
    assert _model(router, models=["slow"]) == "slow"


def test_by_default_a_slow_model_with_room_is_not_taken_when_it_would_end_later(
        make_router: Callable[..., RouterClient]) -> None:
    # the same models as above, at the settings a deployment gets without setting any:
    # the slow model has room, but its call would end after the fast model's, so the
    # requests wait for the fast one (a router that used any room would send them to slow)
    default = make_router()
    assert default.settings == RouterSettings(namespace=default.settings.namespace)
    default.set_quota("fast", {**ROOMY, "rpm": 2, "window_s": 10,
                               "expected_latency_s": 1.0})
    default.set_quota("slow", {**ROOMY, "expected_latency_s": 30.0})
    assert [_model(default) for _ in range(2)] == ["fast", "fast"]
    decisions = default.admit_many([AdmitRequest(100)] * 3)
    assert all(isinstance(d, Wait) and d.reason == "rpm" for d in decisions), decisions


def test_a_slow_model_is_taken_while_its_call_ends_before_the_fast_one_frees(
    router: RouterClient,
) -> None:
    # fast frees in ~100 s; slow likely ends in 17.5 s: the slow model is the sooner finish
    router.set_quota("fast", {**ROOMY, "rpm": 2, "window_s": 100,
                              "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "expected_latency_s": 5.0})
    assert [_model(router) for _ in range(4)] == ["fast", "fast", "slow", "slow"]


def test_equally_fast_models_share_by_weight(router: RouterClient) -> None:
    # within 1.5 x of each other's likely latency, models count as equally fast
    router.set_quota("fast", {**ROOMY, "expected_latency_s": 1.0})
    router.set_quota("fast2", {**ROOMY, "expected_latency_s": 1.4, "weight": 2.0})
    router.set_quota("slower", {**ROOMY, "expected_latency_s": 1.6})
    served = Counter(_model(router) for _ in range(12))
    assert served == {"fast": 4, "fast2": 8}


def test_without_a_latency_for_every_model_the_fair_share_decides(
    router: RouterClient,
) -> None:
    router.set_quota("fast", {**ROOMY, "expected_latency_s": 1.0})
    router.set_quota("unknown", ROOMY)
    assert {_model(router) for _ in range(8)} == {"fast", "unknown"}


def test_a_spread_out_latency_counts_against_a_model(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # fast frees in ~20 s. jumpy averages 3 s; its calls stray 1.5 s from it on average
    # (likely 10.5 s: sooner), then 4 s (likely 23 s: later than fast)
    router.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 20,
                              "expected_latency_s": 0.1})
    router.set_quota("jumpy", {**ROOMY, "expected_latency_s": 3.0})
    assert _model(router) == "fast"
    _set_estimates(raw, namespace, {"jumpy|lat": 3000, "jumpy|latd": 1500})
    assert _model(router) == "jumpy"
    _set_estimates(raw, namespace, {"jumpy|latd": 4000})
    assert isinstance(router.admit(100), Wait)


def test_a_deviation_learned_too_small_is_taken_as_half_the_mean(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # steady averages 6 s and its first calls strayed little (0.1 s): judged by that, it
    # would end in 6.5 s, before fast frees (~20 s); with the floor, in 6 + 5 x 3 = 21 s
    router.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 20,
                              "expected_latency_s": 0.1})
    router.set_quota("steady", {**ROOMY, "expected_latency_s": 6.0})
    assert _model(router) == "fast"
    _set_estimates(raw, namespace, {"steady|lat": 6000, "steady|latd": 100})
    decision = router.admit(100)
    assert isinstance(decision, Wait) and decision.reason == "rpm"


def test_a_slower_model_is_passed_when_it_would_end_later_by_any_margin(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # fast: full for ~10 s, likely 1 + 2.5 = 3.5 s: the request likely ends in ~13.5 s on it.
    # medium (another group): room now, likely 4 + 10 = 14 s: later, by less than one of
    # fast's calls; it is passed all the same (waiting to save less than a call is for
    # equally fast models only), and the request waits for fast
    router.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 10,
                              "expected_latency_s": 1.0})
    router.set_quota("medium", {**ROOMY, "expected_latency_s": 4.0})
    assert _model(router) == "fast"
    decision = router.admit(100)
    assert isinstance(decision, Wait) and decision.reason == "rpm"
    # had medium been likely to end sooner (3 s mean: 10.5 s), it would have taken it
    _set_estimates(raw, namespace, {"medium|lat": 3000, "medium|latd": 1500})
    assert _model(router) == "medium"


def test_a_slow_member_of_a_group_is_passed_on_its_own_latency(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # fast (likely 3.5 s) is full for ~8 s: the request likely ends in ~11.5 s on it.
    # lead (likely 10 s, its one slot taken) and trailing (likely 14 s, within 1.5 x of
    # lead: one group) are slower; trailing has room, but would likely end later than
    # fast, while its group's lead would not: it is passed on its own latency
    router.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 8, "expected_latency_s": 1.0})
    router.set_quota("lead", {**ROOMY, "max_concurrency": 1,
                              "expected_latency_s": 10 / 3.5})
    router.set_quota("trailing", {**ROOMY, "expected_latency_s": 4.0})
    assert _model(router) == "fast"
    assert _model(router, models=["lead"]) == "lead"
    assert isinstance(router.admit(100), Wait)
    assert _model(router, models=["trailing"]) == "trailing"  # it had room


def test_a_models_latency_is_learned_from_its_prior(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # a model expected to take 10 s whose first call ends at once: one sample moves the
    # estimate a fifth of the way (the prior weighs as four calls), it does not replace
    # the prior; the deviation starts from half the prior
    router.set_quota("m", {**ROOMY, "expected_latency_s": 10.0})
    _call(router)
    est = RouterKeys(namespace).router("K_EST")
    assert 7_900 <= float(raw.hget(est, "m|lat") or 0) <= 8_100
    assert 5_900 <= float(raw.hget(est, "m|latd") or 0) <= 6_000


def test_a_callers_measured_latency_is_what_the_model_learns(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # settled at once, but the caller measured 2 s from its send to the answer: the model
    # learns 2 s (not the few ms since the admission); a settlement without a measure
    # counts from the admission, as before
    router.set_quota("m", ROOMY)
    est = RouterKeys(namespace).router("K_EST")
    _call(router, latency_s=2.0)
    assert float(raw.hget(est, "m|lat") or 0) == 2000
    _call(router)
    assert 990 <= float(raw.hget(est, "m|lat") or 0) < 1_050  # the mean of 2 s and ~0


def test_a_burst_that_ends_in_order_of_latency_is_learned_at_its_mean(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # a burst's calls end shortest first: 100 ms, 200 ms, ... 1.6 s, settled one by one
    # (a model's first 16 calls are all observed). An average by order (each call moving
    # the estimate a fifth of the way) ends near its slowest calls (1.21 s); weighed by
    # time, they count alike: their mean, 0.85 s
    router.set_quota("m", ROOMY)
    for k in range(16):
        _call(router, latency_s=0.1 * (k + 1))
    est = RouterKeys(namespace).router("K_EST")
    assert 845 <= float(raw.hget(est, "m|lat") or 0) <= 855
    # |x - mean| (the mean so far) averages 0.43 s
    assert 400 <= float(raw.hget(est, "m|latd") or 0) <= 450


def test_a_models_latency_that_changes_is_followed_once_the_old_calls_are_old(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    # 100 calls' worth of 1 s, last updated 5 minutes ago (ten times the memory): a new
    # call of 5 s outweighs them
    router.set_quota("m", ROOMY)
    est = RouterKeys(namespace).router("K_EST")
    seconds, micros = raw.time()
    now_ms = seconds * 1000 + micros // 1000
    raw.hset(est, mapping={"m|lat": 1000, "m|latd": 100, "m|latw": 100,
                           "m|latt": now_ms - 300_000})
    _call(router, latency_s=5.0)
    assert float(raw.hget(est, "m|lat") or 0) >= 4_900
    # recent ones are not outweighed by one call
    raw.hset(est, mapping={"m|lat": 1000, "m|latw": 100, "m|latt": now_ms})
    _call(router, latency_s=5.0)
    assert float(raw.hget(est, "m|lat") or 0) <= 1_050


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf"), True, "2"])
def test_a_bad_measured_latency_is_refused_naming_the_field(
    router: RouterClient, bad: object,
) -> None:
    router.set_quota("m", ROOMY)
    lease = router.admit(100)
    assert isinstance(lease, Admission)
    with pytest.raises(ValueError, match="latency_s"):
        router.complete(lease.lease_id, 50, 50, latency_s=bad)  # type: ignore[arg-type]
    assert router.complete(lease.lease_id, 50, 50) == "released"  # nothing was settled


def test_completions_learn_the_mean_deviation(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    router.set_quota("m", ROOMY)
    est = RouterKeys(namespace).router("K_EST")

    def call(hold_s: float) -> None:
        lease = router.admit(100)
        assert isinstance(lease, Admission)
        time.sleep(hold_s)  # the call's duration is what is learned
        router.complete(lease.lease_id, 50, 50)

    call(0.0)
    assert raw.hget(est, "m|lat") is not None and raw.hget(est, "m|latd") is None
    call(0.4)  # 400 ms away from the first: the first deviation
    first = float(raw.hget(est, "m|latd") or 0)
    assert 350 <= first < 1000
    call(float(raw.hget(est, "m|lat") or 0) / 1000)  # at the mean: the deviation shrinks
    assert float(raw.hget(est, "m|latd") or 0) < first


def test_a_full_concurrency_counts_the_waiters_queued_ahead(router: RouterClient) -> None:
    # fast: one slot, 1 s a call (likely 3.5 s); slow: room, likely 17.5 s. A request with
    # n waiters ahead would get fast's slot in about (n + 1) s, done 3.5 s later; slow is
    # another group, passed while it would end no sooner: the first 14 wait for fast, the
    # rest are sooner done on slow
    router.set_quota("fast", {**ROOMY, "max_concurrency": 1, "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "expected_latency_s": 5.0})
    assert _model(router) == "fast"
    decisions = router.admit_many([AdmitRequest(100) for _ in range(20)])
    assert [type(d).__name__ for d in decisions] == ["Wait"] * 14 + ["Admission"] * 6
    assert {d.model for d in decisions if isinstance(d, Admission)} == {"slow"}
    assert {d.reason for d in decisions if isinstance(d, Wait)} == {"concurrency"}


def test_a_waiter_holds_back_only_the_model_it_waits_for(router: RouterClient) -> None:
    router.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 10, "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "max_concurrency": 1, "expected_latency_s": 30.0})
    assert _model(router) == "fast"
    # a hot waiter holds back what it needs from bulk requests at once (lib/waiters.lua)
    waiting = router.admit(100, priority="hot", request_id="waits-for-fast")
    assert isinstance(waiting, Wait) and waiting.reason == "rpm"
    # it allows slow too, but would not take it: slow's one slot stays free for others
    assert _model(router, models=["slow"]) == "slow"


def _scarce_pair(router: RouterClient) -> None:
    """fast: 2 calls per 10 s window, likely 3.5 s; slow: as scarce, likely 28 s (8 s mean
    and five deviations of half of it). Together they serve 0.4 calls a second."""
    router.set_quota("fast", {**ROOMY, "rpm": 2, "window_s": 10, "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "rpm": 2, "window_s": 10, "expected_latency_s": 8.0})


def test_a_long_backlog_behind_the_waiters_sends_work_to_a_slower_model(
    router: RouterClient,
) -> None:
    """A request that waits for a fast model is served no sooner than the backlog ahead of
    it: with 60 tasks reported behind (150 s at 0.4 calls a second), the slow model's 28 s
    call ends long before the backlog could, so it is taken; alone (fast frees in 10 s), the
    request waits for the fast model."""
    _scarce_pair(router)
    assert [_model(router) for _ in range(2)] == ["fast", "fast"]
    assert isinstance(router.admit(100, request_id="alone"), Wait)
    assert router.report_backlog("store.tasks", 60) == 1
    assert _model(router) == "slow"
    # the waiter queued before the report is decided again the same way
    assert _model(router, request_id="alone") == "slow"


def test_a_short_backlog_still_waits_for_the_fast_model(router: RouterClient) -> None:
    """Two tasks behind: the backlog drains in 5 s at the pair's rate, the fast model
    frees in 10 s; the slow one's 28 s would end last."""
    _scarce_pair(router)
    assert [_model(router) for _ in range(2)] == ["fast", "fast"]
    router.report_backlog("store.tasks", 2)
    assert isinstance(router.admit(100), Wait)


def _hedging(router: RouterClient, hedges: bool) -> Admission | Wait:
    got = router.admit_many([AdmitRequest(estimated_tokens=100, hedges_late=hedges)])[0]
    assert isinstance(got, (Admission, Wait)), got
    return got


def test_a_caller_that_hedges_takes_a_slow_model_closer_to_the_backlogs_end(
    router: RouterClient,
) -> None:
    """8 tasks behind: the pair starts them within 20 s (fast frees its 2 in 10 s, then 4
    a window), and a fast call then ends 3.5 s later. The slow model's 99th percentile
    (28 s) ends after that, so a caller that does not hedge waits; its late point (8 s
    mean and one deviation: 12 s) plus a fast call (3.5 s) ends before it, so a caller
    that hedges its late calls takes the slow model."""
    _scarce_pair(router)
    assert [_model(router) for _ in range(2)] == ["fast", "fast"]
    router.report_backlog("store.tasks", 8)
    assert isinstance(_hedging(router, False), Wait)
    got = _hedging(router, True)
    assert isinstance(got, Admission) and got.model == "slow", got
    # judged so only while the backlog lasts: with nothing behind it waits again
    router.report_backlog("store.tasks", 0)
    assert isinstance(_hedging(router, True), Wait)


def _hedging_trio(router: RouterClient, slow_latency_s: float) -> None:
    """fast (likely 1.75 s) is full for its 100 s window; mid (mean 1 s: likely 3.5 s,
    late at 1.5 s) has its one slot taken, free in about a second; slow has room."""
    router.set_quota("fast", {**ROOMY, "rpm": 1, "window_s": 100,
                              "expected_latency_s": 0.5})
    router.set_quota("mid", {**ROOMY, "max_concurrency": 1, "expected_latency_s": 1.0})
    router.set_quota("slow", {**ROOMY, "expected_latency_s": slow_latency_s})
    assert _model(router, models=["fast"]) == "fast"
    assert _model(router, models=["mid"]) == "mid"


def test_models_twice_as_slow_are_not_equally_fast_for_a_caller_that_hedges(
    router: RouterClient,
) -> None:
    """Hedged, mid and slow (mean 2 s) look within 1.5 x of each other (3.25 and 4.75 s:
    each late point plus fast's 1.75 s); alone, slow is twice as slow (7 s against 3.5 s).
    Groups are made from the latencies alone: the request waits for mid, which likely
    ends it in 1 + 3.25 s, rather than take slow with room as an equally fast model."""
    _hedging_trio(router, 2.0)
    got = _hedging(router, True)
    assert isinstance(got, Wait) and got.reason == "concurrency", got


def test_models_within_the_tier_alone_share_the_work_of_a_caller_that_hedges(
    router: RouterClient,
) -> None:
    """slow at a mean of 1.4 s (likely 4.9 s alone, within 1.5 x of mid's 3.5 s) is as
    fast as mid: with room, it takes the request while mid is busy."""
    _hedging_trio(router, 1.4)
    got = _hedging(router, True)
    assert isinstance(got, Admission) and got.model == "slow", got


def test_a_bad_hedging_flag_is_refused_naming_the_field(router: RouterClient) -> None:
    with pytest.raises(ValueError, match=r"^hedges_late: 1 is not True or False"):
        router.admit_many([AdmitRequest(estimated_tokens=1, hedges_late=1)])  # type: ignore[arg-type]


def test_a_backlog_report_lapses_unless_renewed(
    router: RouterClient, raw: redis.Redis, namespace: str,
) -> None:
    """A drain that died stops counting: its report holds for its TTL only, and the next
    report of any source drops it."""
    _scarce_pair(router)
    assert [_model(router) for _ in range(2)] == ["fast", "fast"]
    router.report_backlog("dead.tasks", 60, ttl_s=0.05)
    key = RouterKeys(namespace).router("K_BACKLOG")
    until_ms = int(raw.hget(key, "dead.tasks").split(":")[1])  # type: ignore[union-attr]
    while router.stats().now_ms <= until_ms:  # the Redis clock, as the scripts read it
        time.sleep(0.01)
    assert isinstance(router.admit(100), Wait)  # lapsed: as if nothing were behind
    assert router.report_backlog("live.tasks", 0) == 1
    assert raw.hkeys(key) == ["live.tasks"]


@pytest.mark.parametrize(("field", "kwargs"), [
    ("source", {"source": "", "tasks": 1}),
    ("tasks", {"source": "s", "tasks": -1}),
    ("tasks", {"source": "s", "tasks": 1.5}),
    ("ttl_s", {"source": "s", "tasks": 1, "ttl_s": 0}),
    ("ttl_s", {"source": "s", "tasks": 1, "ttl_s": float("nan")}),
])
def test_a_bad_backlog_report_is_refused_naming_the_field(
    router: RouterClient, field: str, kwargs: dict[str, object],
) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        router.report_backlog(**kwargs)  # type: ignore[arg-type]
