"""A Redis Cluster connection with several startup nodes: with the node the connection
names down (the cluster healthy again, its replica promoted) a new client still starts
from another; with every startup node down, the solver's outage path retries instead of
ending the drain at once. A cluster of 3 masters and one replica, on loopback ports."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from airflow_llm_router.engine import Admission, AsyncRouterClient, RouterSettings
from airflow_llm_router.engine.connect import target_from_url
from airflow_llm_router.exceptions import ConnectionConfigError
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.solver.outage import RedisOutage
from llm_router_devkit.redis_tools import LocalCluster, PrivateRedis, wait_until

QUOTA = {"rpm": 100, "tpm": 10_000, "max_concurrency": 10}
CLUSTER_ARGS = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000"]



@pytest.fixture
def lost_first_node() -> Iterator[LocalCluster]:
    """A healthy cluster whose first node is dead: its replica has taken its slots."""
    with LocalCluster(3) as cluster:
        replica = PrivateRedis(CLUSTER_ARGS)
        try:
            replica.start()
            first = cluster.nodes[0]
            with redis.Redis(port=first.port) as node:
                master_id = node.execute_command("CLUSTER", "MYID").decode()
            subprocess.run([shutil.which("redis-cli") or "redis-cli", "--cluster", "add-node",
                            f"127.0.0.1:{replica.port}", f"127.0.0.1:{first.port}",
                            "--cluster-slave", "--cluster-master-id", master_id],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with redis.Redis(port=replica.port) as r:
                wait_until(lambda: r.info("replication").get("master_link_status") == "up",
                       "the replica's link")
                first.stop()
                wait_until(lambda: r.info("replication").get("role") == "master",
                       "the replica's promotion")
            for node in (*cluster.nodes[1:], replica):
                with redis.Redis(port=node.port) as c:
                    wait_until(lambda c=c: b"cluster_state:ok" in c.execute_command(
                        "CLUSTER", "INFO"), "the cluster's state ok")
            yield cluster
        finally:
            replica.close()


def _settings() -> RouterSettings:
    return RouterSettings(namespace=f"nodes-{uuid.uuid4().hex[:8]}", guard_ms=20)


async def test_a_new_client_starts_from_the_next_node(lost_first_node: LocalCluster,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      ) -> None:
    dead, alive = lost_first_node.nodes[0].port, lost_first_node.nodes[1].port
    # the one-node form fails, as it did before several nodes were accepted
    alone = AsyncRouterClient.from_url(f"redis+cluster://127.0.0.1:{dead}", _settings())
    try:
        with pytest.raises(redis.exceptions.RedisClusterException, match="cannot be connected"):
            await alone.set_quota("m", QUOTA)
    finally:
        await alone.aclose()
    url = f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{alive}"
    router = AsyncRouterClient.from_url(url, _settings())
    try:
        await router.set_quota("m", QUOTA)
        assert isinstance(await router.admit(10), Admission)
    finally:
        await router.aclose()
    namespace = _settings().namespace
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_NODES", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": dead,
         "extra": {"cluster": True, "cluster_nodes": [f"127.0.0.1:{alive}"],
                   "namespace": namespace}}))
    hook = RouterHook("llm_router_nodes")
    hook.client.set_quota("m", QUOTA)  # the blocking client
    assert isinstance(hook.client.admit(10), Admission)
    client = await hook.get_async_client()
    try:
        assert isinstance(await client.admit(10), Admission)
    finally:
        await client.aclose()


async def test_every_startup_node_down_is_an_outage(lost_first_node: LocalCluster) -> None:
    """Retried for the outage budget, then raised: not an error at the first call."""
    dead = lost_first_node.nodes[0].port
    router = AsyncRouterClient.from_url(f"redis+cluster://127.0.0.1:{dead}", _settings())
    outage = RedisOutage(1.0)
    started = time.monotonic()
    try:
        with pytest.raises(redis.exceptions.RedisClusterException):
            await outage.call(router.admit, 10, what="admit")
    finally:
        await router.aclose()
    assert outage.outages == 1
    assert time.monotonic() - started >= 1.0


def test_the_url_takes_several_nodes() -> None:
    target = target_from_url("rediss+cluster://u:p%40@h1:7000,h2:7001")
    assert (target.mode, target.host, target.port) == ("cluster", "h1", 7000)
    assert target.cluster_nodes == (("h2", 7001),)
    assert target.options == {"username": "u", "password": "p@", "ssl": True}
    with pytest.raises(ValueError, match="node 'h2' is not host:port"):
        target_from_url("redis+cluster://h1:7000,h2")
    with pytest.raises(ValueError, match="database 0 only"):
        target_from_url("redis+cluster://h1:7000,h2:7001/3")


@pytest.mark.parametrize(("extra", "message"), [
    ({"cluster": True, "cluster_nodes": "h:1"}, "is not a list"),
    ({"cluster": True, "cluster_nodes": ["h"]}, "'h' is not 'host:port'"),
    ({"cluster_nodes": ["h:1"]}, "add \"cluster\": true"),
])
def test_bad_startup_nodes_are_named(extra: dict, message: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_BAD", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 1, "extra": extra}))
    with pytest.raises(ConnectionConfigError, match=r"extra\.cluster_nodes") as err:
        _ = RouterHook("llm_router_bad").client
    assert message in str(err.value)
