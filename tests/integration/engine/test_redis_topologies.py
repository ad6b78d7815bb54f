"""The router on a Redis Cluster (3 masters) and on a Sentinel-watched master with one
replica, both started by the tests on loopback ports: reached through ``from_url`` (sync
and asyncio) and through the hook's connection extras; windows hold, releases reach
waiters across the cluster's nodes, a Sentinel failover is followed."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    AsyncRouterClient,
    RouterClient,
    RouterSettings,
    Wait,
)
from airflow_llm_router.engine.connect import target_from_url
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.exceptions import ConnectionConfigError
from airflow_llm_router.hooks.router import RouterHook
from llm_router_devkit.redis_tools import LocalCluster, LocalSentinel
from tests.integration.engine.admitting import admit_at_once

QUOTA = {"rpm": 3, "tpm": 10_000, "max_concurrency": 10, "window_s": 0.5}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as c:
        yield c


@pytest.fixture(scope="module")
def sentinel() -> Iterator[LocalSentinel]:
    with LocalSentinel() as s:
        yield s


def _settings() -> RouterSettings:
    return RouterSettings(namespace=f"topo-{uuid.uuid4().hex[:8]}", guard_ms=20)


def _holds_the_window(router: RouterClient) -> None:
    """rpm 3 per 0.5 s: three admitted at once, the fourth told to wait; a completion and
    the window's passing let exactly three more in."""
    router.set_quota("m", QUOTA)
    first = admit_at_once(router, 4)  # in one call: no stall outlasts the 0.5 s window
    assert len(first) == 3
    for lease in first:
        assert router.complete(lease.lease_id, input_tokens=1, output_tokens=1) == "released"
    wait = router.admit(1)
    assert isinstance(wait, Wait) and wait.reason == "rpm"
    time.sleep(wait.retry_after_ms / 1000)
    deadline = time.monotonic() + 5
    again: list[Admission] = []
    while not again and time.monotonic() < deadline:
        again = admit_at_once(router, 4)
    assert len(again) == 3
    stats = router.stats().models["m"]
    assert stats.counters["admitted"] == 6 and stats.counters["completed"] == 3


def test_from_url_on_a_cluster(cluster: LocalCluster) -> None:
    settings = _settings()
    router = RouterClient.from_url(cluster.url, settings)
    try:
        assert type(router.redis).__name__ == "RedisCluster"
        _holds_the_window(router)
        # every key of the namespace lives in one slot: each script runs on one node
        prefix = RouterKeys(settings.namespace).prefix
        keys = list(router.redis.scan_iter(match=prefix + "*"))
        assert len(keys) > 5
        slots = {router.redis.keyslot(k) for k in keys}
        assert len(slots) == 1
    finally:
        router.close()


async def test_async_client_on_a_cluster_is_woken_by_a_release(cluster: LocalCluster) -> None:
    """A waiter for the only slot wakes on the release published from the node that owns
    the namespace, through the cluster's pub/sub, well before its wait would end."""
    # without the release, the waiter would sleep up to max_wait (20 s)
    settings = _settings().model_copy(update={"max_wait_ms": 20_000})
    router = AsyncRouterClient.from_url(cluster.url, settings)
    try:
        assert type(router.redis).__name__ == "RedisCluster"
        await router.set_quota("m", {"rpm": 100, "tpm": 10_000, "max_concurrency": 1,
                                     "window_s": 60})
        held = await router.admit(1)
        assert isinstance(held, Admission)
        waiter = asyncio.create_task(router.wait_for_admission(AdmitRequest(1), 30))
        await asyncio.sleep(0.3)  # the waiter is parked (its wait: the lease's 30 s TTL)
        assert not waiter.done()
        released = time.monotonic()
        assert await router.complete(held.lease_id) == "released"
        got = await asyncio.wait_for(waiter, 10)
        assert isinstance(got, Admission) and time.monotonic() - released < 5
    finally:
        await router.aclose()


def test_waiting_for_replicas_is_refused_on_a_cluster(cluster: LocalCluster) -> None:
    settings = RouterSettings(namespace=f"topo-{uuid.uuid4().hex[:8]}", replicas_to_wait=1)
    with pytest.raises(ValueError, match=r"replicas_to_wait: 1: .* not a Redis Cluster"):
        RouterClient.from_url(cluster.url, settings)


def test_the_hook_reaches_a_cluster(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch,
                                    ) -> None:
    namespace = _settings().namespace
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_CLUSTER", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": cluster.nodes[1].port,
         "extra": {"cluster": True, "namespace": namespace, "guard_ms": 20}}))
    hook = RouterHook("llm_router_cluster")
    assert type(hook.client.redis).__name__ == "RedisCluster"
    _holds_the_window(hook.client)


def test_from_url_and_the_hook_on_sentinel_follow_a_failover(
        sentinel: LocalSentinel, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings()
    router = RouterClient.from_url(sentinel.url, settings)
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_SENTINEL", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": sentinel.sentinel.port,  # type: ignore[union-attr]
         "extra": {"sentinel_master": sentinel.master_name,
                   "namespace": settings.namespace, "guard_ms": 20}}))
    hook = RouterHook("llm_router_sentinel")
    try:
        _holds_the_window(router)
        assert hook.client.stats().models["m"].counters["admitted"] == 6  # the same master
        old = sentinel.master_port()
        # the replica holds the quota once replication caught up; then it is promoted
        with redis.Redis(port=old) as master:
            assert master.wait(1, 5000) == 1
        new = sentinel.failover()  # complete: the old master now follows the new one
        assert new != old
        # each client asks the sentinel again after the old master's refusal (READONLY)
        stats = _following(router)
        # the quota and the counters came across; both clients admit on the new master
        assert stats.models["m"].quota is not None
        assert stats.models["m"].counters["admitted"] == 6
        assert isinstance(router.wait_for_admission(AdmitRequest(1), 5), Admission)
        assert _following(hook.client).models["m"].counters["admitted"] == 7
    finally:
        router.close()


def _following(router: RouterClient) -> RouterStats:
    """The stats, once the client has followed the failover: a client still connected to
    the demoted master gets one refusal, then asks the sentinel for the new master."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return router.stats()
        except redis.RedisError:
            assert time.monotonic() < deadline, "the client did not follow the failover"
            time.sleep(0.1)


@pytest.mark.parametrize(("url", "message"), [
    ("127.0.0.1:6379", "expected scheme://"),
    ("memcached://h:1", "unknown scheme"),
    ("unix+cluster:///tmp/r.sock", "over TCP"),
    ("redis+sentinel://h:26379", "name the master"),
    ("redis+sentinel://h/m", "is not host:port"),
    ("redis+sentinel://h:1/m/x", "must be a number"),
])
def test_a_bad_url_names_the_form(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        target_from_url(url)


@pytest.mark.parametrize(("extra", "field"), [
    ({"cluster": "yes"}, "extra.cluster"),
    ({"cluster": True, "sentinel_master": "m"}, "extra.cluster"),
    ({"cluster": True, "db": 2}, "extra.db"),
    ({"sentinel_master": ""}, "extra.sentinel_master"),
    ({"sentinel_master": "m", "sentinels": ["nohost"]}, "extra.sentinels"),
])
def test_a_bad_topology_extra_is_named(extra: dict, field: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_TOPO", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379, "extra": extra}))
    with pytest.raises(ConnectionConfigError, match=field):
        _ = RouterHook("llm_router_topo").client
