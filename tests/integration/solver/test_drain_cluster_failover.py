"""A drain whose router namespace lives on a Redis Cluster master, across the loss of that
master: no window over target at the backend, no 429, and a bounded pause.

Three masters with one replica each on loopback ports (``LocalCluster(3, replicas=1)``,
failure detected after 2 s), a whole drain (``drain_across``) and mid-drain either a
SIGKILL of the master holding the namespace's slot (an outage until its replica is
elected: the node timeout plus the election) or ``CLUSTER FAILOVER`` on that replica (a
coordinated switch: the master stops its clients until the replica has caught up, then
answers ``MOVED``). Neither leaves a client writing to an old master, as Sentinel's
failover does: what the replica has is what the drain admitted, but for the writes a
SIGKILL cuts from the replication stream (milliseconds; older than the outage, so out of
their windows when admission resumes in this set-up).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest
import redis

from airflow_llm_router.engine import RouterKeys
from airflow_llm_router.store import TaskStore
from llm_router_devkit.redis_tools import LocalCluster, PrivateRedis, wait_until
from tests.integration.solver.drain_across import GUARD_MS, WINDOW_S, drain_across

pytestmark = pytest.mark.timeout(180)

#: from the failover's end to the first answer after it: the Sentinel test's bound (the
#: client's finding the new master, the outage's backoff up to 2 s, a window + guard of
#: hold and a call's round trip), though no hold runs on a cluster
MAX_PAUSE_S = WINDOW_S + GUARD_MS / 1000 + 2.5
#: the longest a master's loss may take until its replica serves: the 2 s node timeout,
#: the election and the loaded machine's delays
MAX_PROMOTION_S = 15.0


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, replicas=1) as c:
        yield c


def _replica_of(cluster: LocalCluster, master: PrivateRedis) -> PrivateRedis:
    for node in cluster.nodes:
        if node is not master and node.running:
            with redis.Redis(port=node.port) as c:
                if c.info("replication").get("master_port") == master.port:
                    return node
    raise AssertionError(f"no replica of the master on port {master.port}")



def _serving(node: PrivateRedis) -> bool:
    with redis.Redis(port=node.port) as c:
        return (c.info("replication").get("role") == "master"
                and b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"))


def kill_owner(cluster: LocalCluster, key: str) -> None:
    """SIGKILL the master of ``key``'s slot; return once its replica serves the slot."""
    old = cluster.owner(key)
    replica = _replica_of(cluster, old)
    old.stop()
    wait_until(lambda: cluster.owner(key) is replica and _serving(replica), "the promotion",
          MAX_PROMOTION_S)


def fail_over_owner(cluster: LocalCluster, key: str) -> None:
    """``CLUSTER FAILOVER`` on the replica of ``key``'s master; return once the replica
    serves the slot and the old master follows it."""
    old = cluster.owner(key)
    replica = _replica_of(cluster, old)
    with redis.Redis(port=replica.port) as c:
        c.execute_command("CLUSTER", "FAILOVER")
    wait_until(lambda: cluster.owner(key) is replica and _serving(replica), "the failover",
          MAX_PROMOTION_S)
    with redis.Redis(port=old.port) as c:
        wait_until(lambda: c.info("replication").get("role") == "slave", "the demotion",
              MAX_PROMOTION_S)


FAULTS = {"owner-sigkill": kill_owner, "cluster-failover": fail_over_owner}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_drain_across_a_cluster_master_loss_keeps_every_window(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, cluster: LocalCluster, fault: str,
) -> None:
    key = RouterKeys(namespace).prefix
    nodes = [f"127.0.0.1:{n.port}" for n in cluster.nodes]
    drained = await drain_across(
        partial(FAULTS[fault], cluster, key),
        url="redis+cluster://" + ",".join(nodes),
        conn={"host": "127.0.0.1", "port": cluster.nodes[0].port,
              "extra": {"cluster": True, "cluster_nodes": nodes[1:]}},
        monkeypatch=monkeypatch, namespace=namespace, pg_dsn=pg_dsn, pg_schema=pg_schema,
        store=store)
    print(drained.report(fault))
    drained.check(store, MAX_PAUSE_S)
