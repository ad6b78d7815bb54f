"""An admission on a list of models costs the same however many models the namespace has:
it reads the quotas and estimates of the models it tries, not every model's.

On a private Redis, so the server's command counts are this test's alone."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest
import redis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    Completion,
    RouterClient,
    RouterSettings,
)
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
