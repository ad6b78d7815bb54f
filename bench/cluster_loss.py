"""What a Redis Cluster master's SIGKILL loses of the router's admissions.

A local cluster of three masters with one replica each (``LocalCluster(3, replicas=1)``,
failure detected after 2 s); ``--clients`` asyncio tasks of one router client admit
without pause (limits far above their rate, 60 s windows: nothing is refused) while the
master of the namespace's slot is SIGKILLed; the tasks retry through the outage
(every 50 ms) until its replica is promoted, then go on for half a second. Lost: the
admissions the clients got that the promoted replica's ``admitted`` counter and window do
not hold (replication is asynchronous: what the master wrote and had not sent when it
died). Raw results go to ``bench/out/cluster_loss.json``.

    python -m bench.cluster_loss --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from typing import Any

import redis

from airflow_llm_router.engine import Admission, AsyncRouterClient, RouterKeys, RouterSettings
from bench.common import OUT_DIR, guarded
from llm_router_devkit.redis_tools import LocalCluster, PrivateRedis

__all__ = ["main", "one_run"]

OUT = OUT_DIR / "cluster_loss.json"


def _promoted(cluster: LocalCluster, key: str, old: PrivateRedis) -> bool:
    try:
        new = cluster.owner(key)
        if new is old:
            return False
        with redis.Redis(port=new.port) as c:
            return b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO")
    except redis.exceptions.RedisError:
        return False


async def one_run(clients: int) -> dict[str, Any]:
    """One SIGKILL of the namespace's master under ``clients`` admitting tasks."""
    with LocalCluster(3, replicas=1) as cluster:
        namespace = f"loss-{uuid.uuid4().hex[:8]}"
        key = RouterKeys(namespace).prefix
        url = "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
        router = AsyncRouterClient.from_url(url, RouterSettings(namespace=namespace))
        try:
            await router.set_quota("m", {"rpm": 10**8, "tpm": 10**12,
                                         "max_concurrency": 10**6, "window_s": 60})
            got = 0
            stop = asyncio.Event()

            async def admitting() -> None:
                nonlocal got
                while not stop.is_set():
                    try:
                        decision = await router.admit(1)
                    except (redis.exceptions.RedisError, OSError):
                        await asyncio.sleep(0.05)  # the outage: retried until promoted
                        continue
                    got += isinstance(decision, Admission)

            tasks = [asyncio.create_task(admitting()) for _ in range(clients)]
            await asyncio.sleep(1.0)
            old = cluster.owner(key)
            before, killed = got, time.monotonic()
            old.stop()
            while not _promoted(cluster, key, old):
                await asyncio.sleep(0.05)  # a poll of the nodes: no event to wait on
            promotion_s = time.monotonic() - killed
            await asyncio.sleep(0.5)
            stop.set()
            await asyncio.gather(*tasks)
            stats = (await router.stats()).models["m"]
        finally:
            await router.aclose()
    return {"clients": clients, "promotion_s": round(promotion_s, 2),
            "admitted_before_kill": before, "admitted": got,
            "counted_by_router": stats.counters["admitted"], "in_window": stats.requests,
            "lost": got - stats.counters["admitted"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_loss",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="kills, one cluster each")
    parser.add_argument("--clients", type=int, default=8, help="admitting tasks")
    opts = parser.parse_args(argv)
    if opts.runs < 1 or opts.clients < 1:
        print("error: --runs and --clients must be >= 1", file=sys.stderr)
        return 2

    def body() -> int:
        runs = [asyncio.run(one_run(opts.clients)) for _ in range(opts.runs)]
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(runs, indent=2) + "\n")
        for run in runs:
            print(json.dumps(run))
        return 0

    # SIGTERM as Ctrl-C: the cluster's redis-servers are stopped by LocalCluster's exit
    return guarded(body)


if __name__ == "__main__":
    sys.exit(main())
