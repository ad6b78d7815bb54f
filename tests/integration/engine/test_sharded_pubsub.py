"""Events (releases, quota changes) go out on sharded pub/sub where the server has it
(Redis 7+): SPUBLISH from the scripts, SSUBSCRIBE by the listeners, so on a cluster an
event reaches the shard that holds the namespace, not every node; on Redis 6.2, plain
PUBLISH / SUBSCRIBE. Checked with the server's own subscriber counts (PUBSUB SHARDNUMSUB /
NUMSUB: the kind the server's version calls for, and not the other) and by a waiter woken
by a release well before its wait would end, on one node and on a 3-master cluster, with
the sync and the asyncio client. (The test command puts a Redis 6.2 ``redis-server`` first
on PATH, so its clusters take the plain path while the service on 6379, Redis 7, takes
the sharded one.)"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    AsyncRouterClient,
    RouterClient,
    RouterSettings,
)
from airflow_llm_router.engine.keys import RouterKeys
from llm_router_devkit.redis_tools import LocalCluster
from tests.integration.engine.clusters import SERVER_DIRS, SERVER_IDS, cluster_of

pytestmark = pytest.mark.timeout(90)

#: one call at a time, and a long window: a waiter's own wait is the lease's TTL (30 s)
ONE_SLOT = {"rpm": 100, "tpm": 10_000, "max_concurrency": 1, "window_s": 60}


@pytest.fixture(scope="module", params=SERVER_DIRS, ids=SERVER_IDS)
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_of(request.param) as c:
        yield c


def _settings() -> RouterSettings:
    return RouterSettings(namespace=f"shard-{uuid.uuid4().hex[:8]}", max_wait_ms=20_000)


def _sharded(node: redis.Redis) -> bool:
    """Whether this server has sharded pub/sub (Redis 7+)."""
    return int(str(node.info("server")["redis_version"]).split(".")[0]) >= 7


def _expected(node: redis.Redis) -> tuple[int, int]:
    """One subscriber of the kind the server's version calls for, none of the other."""
    return (1, 0) if _sharded(node) else (0, 1)


def _subscribers(node: redis.Redis, channel: str) -> tuple[int, int]:
    """(sharded, plain) subscribers of ``channel`` on one node, as the server counts them."""
    counts = []
    for sub in ("SHARDNUMSUB", "NUMSUB") if _sharded(node) else ("NUMSUB",):
        reply = node.execute_command("PUBSUB", sub, channel)  # [channel, count]
        pairs = reply if isinstance(reply, list) and not isinstance(reply[0], list) else []
        counts.append(int(dict(zip(pairs[::2], pairs[1::2], strict=True)).get(
            channel.encode(), 0)))
    return (counts[0], counts[1]) if len(counts) == 2 else (0, counts[0])


def _owner(cluster: LocalCluster, channel: str) -> redis.Redis:
    rc = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    try:
        node = rc.get_node_from_key(channel)
        return redis.Redis(host=node.host, port=node.port)
    finally:
        rc.close()


async def _async_listener_subscribes(url: str, node_for: Any) -> None:
    settings = _settings()
    channel = RouterKeys(settings.namespace).released_channel
    router = AsyncRouterClient.from_url(url, settings)
    try:
        await asyncio.wait_for(router.releases.start(), 10)
        node = node_for(channel)
        assert _subscribers(node, channel) == _expected(node)
        # and a release reaches it: a quota change counts as an event
        seen = router.releases.mark()
        await router.set_quota("m", ONE_SLOT)
        assert await router.releases.wait(seen, 10)
    finally:
        await asyncio.wait_for(router.aclose(), 10)


async def test_the_async_listener_subscribes_as_the_server_publishes_on_one_node(
        redis_url: str) -> None:
    await _async_listener_subscribes(redis_url, lambda _: redis.Redis.from_url(redis_url))


async def test_the_async_listener_subscribes_as_the_server_publishes_on_a_cluster(
        cluster: LocalCluster) -> None:
    await _async_listener_subscribes(cluster.url, lambda ch: _owner(cluster, ch))


def _sync_waiter_is_woken(router: RouterClient, node_for: Any) -> None:
    """A sync waiter for the only slot subscribes (sharded on Redis 7) and wakes on the
    release, not at the end of its own wait (30 s)."""
    channel = router.core.keys.released_channel
    router.set_quota("m", ONE_SLOT)
    held = router.admit(1)
    assert isinstance(held, Admission)
    got: list[Admission | None] = []
    waiter = threading.Thread(
        target=lambda: got.append(router.wait_for_admission(AdmitRequest(1), 30)))
    waiter.start()
    node = node_for(channel)
    deadline = time.monotonic() + 10
    while _subscribers(node, channel) != _expected(node):
        assert time.monotonic() < deadline, "the waiter never subscribed as the server's kind"
        time.sleep(0.02)
    released = time.monotonic()
    assert router.complete(held.lease_id) == "released"
    waiter.join(15)
    assert not waiter.is_alive() and isinstance(got[0], Admission)
    assert time.monotonic() - released < 8


def test_a_sync_waiter_is_woken_on_one_node(redis_url: str) -> None:
    router = RouterClient.from_url(redis_url, _settings())
    try:
        _sync_waiter_is_woken(router, lambda _: redis.Redis.from_url(redis_url))
    finally:
        router.close()


def test_a_sync_waiter_is_woken_on_a_cluster(cluster: LocalCluster) -> None:
    router = RouterClient.from_url(cluster.url, _settings())
    try:
        _sync_waiter_is_woken(router, lambda ch: _owner(cluster, ch))
    finally:
        router.close()
