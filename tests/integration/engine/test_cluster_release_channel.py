"""A fresh async client on a Redis Cluster subscribes to the release channel before any
other command: what a drain does first in the triggerer (``BatchAdmitter.__aenter__`` ->
``ReleaseListener.start``).

Found by the Celery run (``bench/celery_run.py``): every ``DrainTrigger`` on a cluster
hung at start, claiming nothing. redis-py's async ``ClusterPubSub`` of a ``RedisCluster``
that has not run a command yet waits forever for a node (the cluster's nodes are not
discovered until ``initialize()``). The engine's own cluster tests missed it because each
sets a quota before it waits. ``ReleaseListener.start`` now initializes a cluster client
first; without that, the first test times out.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from airflow_llm_router.engine import AsyncRouterClient, RouterSettings
from llm_router_devkit.redis_tools import LocalCluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as c:
        yield c


async def test_a_fresh_cluster_client_subscribes_first(cluster: LocalCluster) -> None:
    router = AsyncRouterClient.from_url(
        cluster.url, RouterSettings(namespace=f"rel-{uuid.uuid4().hex[:8]}"))
    try:
        await asyncio.wait_for(router.releases.start(), 5)
    finally:
        await asyncio.wait_for(router.aclose(), 10)


async def test_a_cluster_client_that_ran_a_command_subscribes(cluster: LocalCluster) -> None:
    """The same subscription after one command (the state the engine's tests are in)."""
    router = AsyncRouterClient.from_url(
        cluster.url, RouterSettings(namespace=f"rel-{uuid.uuid4().hex[:8]}"))
    try:
        await router.stats()
        await asyncio.wait_for(router.releases.start(), 5)
    finally:
        await asyncio.wait_for(router.aclose(), 10)
