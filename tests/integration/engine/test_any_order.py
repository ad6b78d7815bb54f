"""An any-model request reads its candidates from the head of an order the engine keeps in
Redis (lib/speed.lua, lib/anyorder.lua) and declares only that head: the choice is the one
the engine made when it read every model (finish time, then fair share by weight), and a
request that has to look past the head is sent again declaring more."""

from __future__ import annotations

from collections import Counter

import redis

from airflow_llm_router.engine import Admission, AdmitRequest, RouterClient, Wait
from airflow_llm_router.engine.keys import RouterKeys

ROOMY = {"rpm": 10**6, "tpm": 10**9, "max_concurrency": 10**4}


def _models(router: RouterClient, n: int) -> Counter[str]:
    got = router.admit_many([AdmitRequest(10) for _ in range(n)])
    assert all(isinstance(d, Admission) for d in got), got
    return Counter(d.model for d in got if isinstance(d, Admission))


def test_a_large_group_shares_by_weight_and_slower_models_wait_their_turn(
        router: RouterClient) -> None:
    # 100 equally fast models (one group, larger than the engine reads whole), ten of them
    # weighing twice; 30 slower ones, never needed: each round of the fair share gives
    # the fast ones their weight, whatever the slower ones' tags
    for k in range(100):
        router.set_quota(f"f{k:03}", {**ROOMY, "expected_latency_s": 1.0,
                                      "weight": 2.0 if k < 10 else 1.0})
    for k in range(30):
        router.set_quota(f"s{k:02}", {**ROOMY, "expected_latency_s": 5.0})
    served = _models(router, 110) + _models(router, 110)  # two rounds, batched
    served += Counter(_single(router) for _ in range(110))  # a third, one at a time
    assert {m for m in served if m.startswith("s")} == set()
    assert {served[f"f{k:03}"] for k in range(10)} == {6}
    assert {served[f"f{k:03}"] for k in range(10, 100)} == {3}
    assert len(router.core.head or ()) < 130  # declared: the head, not every model


def _single(router: RouterClient) -> str:
    got = router.admit(10)
    assert isinstance(got, Admission), got
    return got.model


def test_without_every_latency_the_fair_share_decides_over_every_model(
        router: RouterClient) -> None:
    for k in range(80):
        router.set_quota(f"m{k:02}", {**ROOMY, "expected_latency_s": 1.0})
    router.set_quota("new", ROOMY)  # nothing known of its latency
    served = _models(router, 81) + _models(router, 81)
    assert set(served.values()) == {2} and len(served) == 81


def test_a_choice_past_the_declared_head_is_made_after_declaring_more(
        make_router: object) -> None:
    router, other = make_router(), make_router()  # type: ignore[operator]
    for k in range(60):
        router.set_quota(f"m{k:02}", {**ROOMY, "max_concurrency": 1,
                                      "expected_latency_s": 1.0})
    first = router.admit(10)
    assert isinstance(first, Admission)
    head = router.core.head or ()
    assert 0 < len(head) < 60
    # the next models of the fair order fill up without moving in it (an ordered list does
    # not charge the fair share): the next any-model request must look past the head
    for m in head:
        if m != first.model:
            assert isinstance(other.admit(10, models=[m]), Admission)
    got = router.admit(10)
    assert isinstance(got, Admission) and got.model not in head, (got, head)
    # the head named since reaches past the full models: the next request finds its keys
    assert len(router.core.head or ()) > len(head)
    # every model full: it waits, having looked at each
    for k in range(60):
        other.admit(10, models=[f"m{k:02}"])
    assert isinstance(router.admit(10), Wait)


def test_the_index_follows_learned_latencies_quotas_and_rebuilds_when_dropped(
        router: RouterClient, redis_url: str, namespace: str) -> None:
    speed = RouterKeys(namespace).router("K_SPEED")
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        router.set_quota("a", {**ROOMY, "expected_latency_s": 1.0})
        router.set_quota("b", ROOMY)
        assert raw.zscore(speed, "a") == 3500  # 1 s, plus 5 deviations of half of it
        assert raw.zscore(speed, "b") == float("inf")
        lease = router.admit(10, models=["b"])
        assert isinstance(lease, Admission)
        router.complete(lease.lease_id, 5, 5, latency_s=2.0)  # learned: 2 s
        assert raw.zscore(speed, "b") == 7000
        assert _single(router) == "a"  # 3.5 s likely against 7 s
        router.delete_quota("a")
        assert raw.zrange(speed, 0, -1) == ["b"]
        raw.delete(speed)
        router.set_quota("c", {**ROOMY, "expected_latency_s": 0.5})
        assert _single(router) == "c"
        assert raw.zrange(speed, 0, -1, withscores=True) == [("c", 1750.0), ("b", 7000.0)]
    finally:
        raw.close()


def test_a_caller_that_hedges_is_ordered_by_hedged_latencies_from_the_index(
        router: RouterClient, redis_url: str, namespace: str) -> None:
    # quick: the fastest (a hedge is a call on it), but too small for the requests; wild:
    # slow alone (16 s likely) but late early (4 s), so hedged it ends by 4 + 1.75 s;
    # steady: 9.45 s likely, hedged 4.05 + 1.75 s. A caller that hedges takes wild first,
    # one that does not steady, as lib/finish.lua orders a list of the same models.
    keys = RouterKeys(namespace)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        router.set_quota("quick", {**ROOMY, "tpm": 5, "expected_latency_s": 0.5})
        router.set_quota("steady", {**ROOMY, "expected_latency_s": 2.7})
        raw.hset(keys.router("K_EST"), mapping={"wild|lat": 1000, "wild|latd": 3000})
        router.set_quota("wild", ROOMY)  # its place in the index, from those estimates
        assert raw.zscore(keys.router("K_LATE"), "wild") == 4000
        every = ("quick", "steady", "wild")
        for hedges, first in ((True, "wild"), (False, "steady")):
            got = router.admit_many([AdmitRequest(10, hedges_late=hedges)])[0]
            listed = router.admit_many([AdmitRequest(10, models=every, ordered=False,
                                                     hedges_late=hedges)])[0]
            assert isinstance(got, Admission) and isinstance(listed, Admission)
            assert (got.model, listed.model) == (first, first)
    finally:
        raw.close()


def test_the_slower_idle_models_a_walk_passes_are_parked_out_of_the_fair_order(
        router: RouterClient, redis_url: str, namespace: str) -> None:
    # 100 equally fast models and 70 slower ones (two groups larger than the engine reads
    # whole: each is read from the fair order) whose names sort after the fast ones where
    # tags tie. 95 fast ones are charged (an unordered list charges the fair share): the
    # fair order is then 5 idle fast models, the 70 slow ones, all idle at the virtual
    # time, and the 95 past it. The next any-model call's walk (its decision and the head
    # it names) passes the slow ones: each is parked, the ones met in the same read as the
    # first model past the virtual time too.
    keys = RouterKeys(namespace)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        for k in range(100):
            router.set_quota(f"f{k:03}", {**ROOMY, "expected_latency_s": 1.0})
        for k in range(70):
            router.set_quota(f"s{k:03}", {**ROOMY, "expected_latency_s": 5.0})
        got = router.admit_many([AdmitRequest(10, models=(f"f{k:03}",), ordered=False)
                                 for k in range(95)])
        assert all(isinstance(d, Admission) for d in got)
        assert _single(router) == "f095"
        slow = [f"s{k:03}" for k in range(70)]
        assert sorted(raw.zrange(keys.router("K_PARK"), 0, -1)) == slow
        assert raw.zcard(keys.router("K_FAIRQ")) == 100
        # parked, they are still candidates: with the fast ones gone, a round of the fair
        # share serves each once, read from where they are parked
        for k in range(100):
            router.delete_quota(f"f{k:03}")
        assert sorted(_models(router, 70)) == slow
        assert raw.zcard(keys.router("K_PARK")) == 0
    finally:
        raw.close()
