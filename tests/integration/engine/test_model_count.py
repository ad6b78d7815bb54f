"""An admission costs about the same however many models the namespace has: a request on
a list of models reads the quotas and estimates of the models it tries, not every model's;
a request for any model reads the head of the order the engine keeps (lib/anyorder.lua) and
declares only that head's keys.

On a private Redis, so the server's command counts are this test's alone."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    Completion,
    RouterClient,
    RouterSettings,
)
from airflow_llm_router.engine.core import Script
from airflow_llm_router.engine.keys import RouterKeys
from llm_router_devkit.redis_tools import PrivateRedis

HUGE = {"rpm": 10**9, "tpm": 10**12, "max_concurrency": 10**6, "window_s": 60}


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateRedis]:
    s = PrivateRedis()
    try:
        s.start()
        yield s
    finally:
        s.close()


def _namespace(url: str, name: str, models: int) -> RouterClient:
    client = RouterClient.from_url(url, RouterSettings(namespace=name))
    for k in range(models):
        client.set_quota(f"m{k}", HUGE)
    # every model has learned estimates, as after a run: K_EST holds fields of each
    got = client.admit_many([AdmitRequest(100, models=(f"m{k}",)) for k in range(models)])
    client.complete_many([Completion(d.lease_id, 50, 50) for d in got
                          if isinstance(d, Admission)])
    return client


def _calls(r: redis.Redis) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in r.info("commandstats").items()}


def test_a_listed_admission_reads_no_other_models_quota(server: PrivateRedis) -> None:
    client = _namespace(server.url, "many", 1000)
    r = redis.Redis.from_url(server.url)
    try:
        before = _calls(r)
        got = client.admit_many([AdmitRequest(100, models=("m7", "m500"), ordered=False)
                                 for _ in range(8)])
        after = _calls(r)
        assert all(isinstance(d, Admission) for d in got)
        # reading every model's quota or estimates is one HGETALL or HKEYS, whatever else
        assert after.get("hgetall", 0) == before.get("hgetall", 0)
        assert after.get("hkeys", 0) == before.get("hkeys", 0)
    finally:
        client.close()
        r.close()


def _redis_us(r: redis.Redis, client: RouterClient, models: tuple[str, ...]) -> float:
    """Redis time of one admission on ``models`` (and of its completion, unmeasured)."""
    a = r.info("commandstats")["cmdstat_evalsha"]["usec"]
    got = client.admit_many([AdmitRequest(100, models=models, ordered=False)])
    b = r.info("commandstats")["cmdstat_evalsha"]["usec"]
    assert isinstance(got[0], Admission)
    client.complete_many([Completion(got[0].lease_id, 50, 50)])
    return float(b - a)


def test_a_listed_admission_costs_about_the_same_over_1000_models(server: PrivateRedis
                                                                  ) -> None:
    few, many = _namespace(server.url, "few", 10), _namespace(server.url, "lots", 1000)
    r = redis.Redis.from_url(server.url)
    try:
        listed = ("m1", "m2", "m3")
        costs: dict[str, list[float]] = {"few": [], "many": []}
        for _ in range(60):  # interleaved: a loaded machine slows both alike
            costs["few"].append(_redis_us(r, few, listed))
            costs["many"].append(_redis_us(r, many, listed))
        ratio = statistics.median(costs["many"]) / max(1.0, statistics.median(costs["few"]))
        # reading every quota and estimate made it ~20x; a generous bound for a loaded box
        assert ratio < 4, costs
    finally:
        few.close()
        many.close()
        r.close()


@contextmanager
def _declared(client: RouterClient) -> Iterator[list[tuple[str, int]]]:
    """The operation and the number of keys of each script the client runs meanwhile."""
    seen: list[tuple[str, int]] = []
    script_keys = client.core.script_keys

    def counted(action: Script) -> list[str]:
        keys = script_keys(action)
        seen.append((action.op, len(keys)))
        return keys

    client.core.script_keys = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        client.core.script_keys = script_keys  # type: ignore[method-assign]


def _scans(before: dict[str, int], after: dict[str, int]) -> int:
    """The HKEYS and HGETALL run between two counts: reads of every model."""
    return sum(after.get(k, 0) - before.get(k, 0) for k in ("hkeys", "hgetall"))


def _any_cost(r: redis.Redis, client: RouterClient, calls: int,
              hedges: bool = False) -> tuple[float, int, int]:
    """Per single any-model admission: the Redis commands its script ran, the keys it
    declared (the most of any call), and the HKEYS and HGETALL run (reading every model)."""
    with _declared(client) as seen:
        before = _calls(r)
        for _ in range(calls):
            got = client.admit_many([AdmitRequest(100, hedges_late=hedges)])[0]
            assert isinstance(got, Admission)
        after = _calls(r)
    ran = {k: after[k] - before.get(k, 0) for k in after}
    own = sum(n for k, n in ran.items() if k not in ("evalsha", "info", "script|load"))
    declared = max(n for op, n in seen if op == "admit")
    return own / calls, declared, _scans(before, after)


@pytest.mark.parametrize("hedges", [False, True], ids=["plain", "hedged"])
def test_an_any_model_admission_costs_about_the_same_over_1000_models(
        server: PrivateRedis, hedges: bool) -> None:
    # hedged: a caller that hedges late calls (the drain's solver) reads the same index,
    # ordered by hedged latencies; it declared every model before (5,000 keys over 1,000)
    name = "hedged" if hedges else "any"
    few = _namespace(server.url, f"{name}few", 10)
    many = _namespace(server.url, f"{name}lots", 1000)
    r = redis.Redis.from_url(server.url)
    try:
        for client in (few, many):
            # the first call declares every model; its reply, the head
            client.admit_many([AdmitRequest(100, hedges_late=hedges)])
        # what it ran and declared: counted, not timed, so a loaded machine cannot move it
        few_cmds, few_keys, _ = _any_cost(r, few, 20, hedges)
        many_cmds, many_keys, scans = _any_cost(r, many, 20, hedges)
        # before the index: 5,015 keys declared and every model's name, latency and tag
        # read (HKEYS, HMGETs of 2,000 fields): 30-90 times the Redis time over 10 models
        assert scans == 0
        assert many_keys <= 4 * few_keys < 1000, (few_keys, many_keys)
        # the target is 4x (docs/scale.md); measured 1.0-1.4x plain, 1.4-1.6x hedged (a
        # hedged request reads each latency group's fastest model, and under two CPU
        # burners more calls run late: 49 commands against 32 over 10 models)
        assert many_cmds <= 2 * few_cmds, (few_cmds, many_cmds)
        # batched: the head declared grows with the batch, not with the models
        batch_keys, scans = _any_cost_batched(r, many, hedges)
        assert scans == 0 and batch_keys < 1000, batch_keys
    finally:
        few.close()
        many.close()
        r.close()


def _any_cost_batched(r: redis.Redis, client: RouterClient, hedges: bool) -> tuple[int, int]:
    """Over four batches of 64 any-model admissions: the most keys a script declared, and
    the HKEYS and HGETALL run."""
    with _declared(client) as seen:
        before = _calls(r)
        for _ in range(4):
            got = client.admit_many([AdmitRequest(100, hedges_late=hedges)
                                     for _ in range(64)])
            assert all(isinstance(d, Admission) for d in got)
        after = _calls(r)
    return max(n for _, n in seen), _scans(before, after)


@pytest.mark.parametrize("slow", ["a", "s"], ids=["slow-first", "slow-last"])
def test_slower_models_do_not_cost_an_admission_on_a_large_fast_group(
        server: PrivateRedis, slow: str) -> None:
    # 100 models expected in 1 s (one group, larger than the engine reads whole: it is
    # found in the fair order) and 900 in 5 s, never needed, named to sort before or after
    # the fast ones where tags tie. Round after round the fair share moves its virtual
    # time past the slow models' tags: a request must not walk past them again each round
    # (it did: 52.4 commands an admission against 40.0 without them).
    def make(name: str, count: int) -> RouterClient:
        client = RouterClient.from_url(server.url, RouterSettings(namespace=name))
        for k in range(100):
            client.set_quota(f"f{k:03}", {**HUGE, "expected_latency_s": 1.0})
        for k in range(count):
            client.set_quota(f"{slow}{k:03}", {**HUGE, "expected_latency_s": 5.0})
        client.admit_many([AdmitRequest(100)])  # declares every model once; the head
        return client

    alone, beside = make(f"fastalone{slow}", 0), make(f"fastbeside{slow}", 900)
    r = redis.Redis.from_url(server.url)
    try:
        for _ in range(5):  # five rounds of the fair share over the fast group
            alone_cmds, _, _ = _any_cost(r, alone, 100)
            beside_cmds, _, scans = _any_cost(r, beside, 100)
        assert scans == 0
        assert beside_cmds <= 1.25 * alone_cmds, (alone_cmds, beside_cmds)
        # every slow model met is parked, out of the fair order the fast group is read in
        keys = RouterKeys(f"fastbeside{slow}")
        assert r.zcard(keys.router("K_PARK")) == 900
        assert r.zcard(keys.router("K_FAIRQ")) == 100
        served = Counter(d.model for d in beside.admit_many(
            [AdmitRequest(100) for _ in range(100)]) if isinstance(d, Admission))
        assert set(served) == {f"f{k:03}" for k in range(100)}  # one each: a round
    finally:
        alone.close()
        beside.close()
        r.close()
