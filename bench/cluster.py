"""Admissions/s on a Redis Cluster of 1 and of 3 masters, for one namespace and for
namespaces spread over the masters; on demand, not in CI.

    python -m bench.cluster                    # 1 and 3 masters, 1 and 3 namespaces
    python -m bench.cluster --seconds 10 --clients 4 --out bench/out/cluster.json

Every key of a namespace carries the hash tag ``{namespace}``, so a namespace lives in one
slot, on one master: more masters can only spread namespaces. Each configuration runs the
same ``--clients`` processes (each a sync ``RouterClient`` looping ``admit_many(--batch)``
then ``complete_many`` of what it got, over 10 models with quotas far above the load), the
clients dealt over the namespaces in turn; the namespaces are named so each one's slot is
on a different master. Reported: admissions/s over all clients, and each master's CPU
(``/proc``) per admission and share of a core over the run, which says where the ceiling
is: a master at one core is the limit, whatever the others do; and the clients' CPU per
admission and cores. Clients and servers share this machine's cores: on a small box the
clients' CPU, not a master, binds, and the ceilings are projected from the CPU figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.admission.model import HUGE, TOKENS
from bench.common import guarded
from bench.proc_cpu import ProcessCpu

MODELS = [f"m{i}" for i in range(10)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--masters", type=int, nargs="+", default=[1, 3],
                        help="cluster sizes measured (1: one plain redis-server)")
    parser.add_argument("--namespaces", type=int, nargs="+", default=[1, 3],
                        help="namespace counts measured on each cluster (at most its masters)")
    parser.add_argument("--clients", type=int, default=3, help="client processes")
    parser.add_argument("--batch", type=int, default=64, help="admissions per admit_many")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds a cell")
    parser.add_argument("--out", type=Path, help="also write the JSON results here")
    return parser


def _client(url: str, namespace: str, batch: int, go: Any, stop_at: Any, out: Any) -> None:
    """One client process: admit and complete in a loop from ``go`` until ``stop_at``."""
    from airflow_llm_router.engine import (
        Admission,
        AdmitRequest,
        Completion,
        RouterClient,
        RouterSettings,
    )

    client = RouterClient.from_url(url, RouterSettings(namespace=namespace))
    client.admit_many([AdmitRequest(TOKENS)])  # connected, scripts loaded, outside the run
    out.put(None)
    go.wait()
    cpu0, admitted = time.process_time(), 0
    while time.time() < stop_at.value:
        got = client.admit_many([AdmitRequest(TOKENS) for _ in range(batch)])
        leases = [d for d in got if isinstance(d, Admission)]
        client.complete_many([Completion(a.lease_id, TOKENS // 2, TOKENS // 2)
                              for a in leases])
        admitted += len(leases)
    cpu = time.process_time() - cpu0
    client.close()
    out.put((admitted, cpu))


class _OneMaster:
    """One plain ``redis-server``: what a 1-master cluster is (``redis-cli --cluster
    create`` wants 3), with a cluster's ``nodes`` and ``url``."""

    def __init__(self) -> None:
        from llm_router_devkit.redis_tools import PrivateRedis

        self.nodes = [PrivateRedis()]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def __enter__(self) -> _OneMaster:
        self.nodes[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.nodes[0].close()


def _spread_namespaces(cluster: Any, count: int) -> list[str]:
    """``count`` namespace names whose slots are on ``count`` different masters."""
    import redis

    if len(cluster.nodes) == 1:
        return [f"ns{i}" for i in range(count)]

    owners: list[tuple[int, int]] = []  # (first slot, last slot) per master
    with redis.Redis(port=cluster.nodes[0].port) as c:
        for first, last, *_ in c.execute_command("CLUSTER", "SLOTS"):
            owners.append((int(first), int(last)))
        names: list[str] = []
        taken: set[int] = set()
        i = 0
        while len(names) < count:
            name = f"ns{i}"
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", "{" + name + "}"))
            owner = next(k for k, (a, b) in enumerate(owners) if a <= slot <= b)
            if owner not in taken:
                taken.add(owner)
                names.append(name)
            i += 1
    return names


def _set_quotas(url: str, namespace: str) -> None:
    from airflow_llm_router.engine import RouterClient, RouterSettings

    router = RouterClient.from_url(url, RouterSettings(namespace=namespace))
    for model in MODELS:
        router.set_quota(model, dict(HUGE))
    router.close()


def measure(cluster: Any, namespaces: int, opts: argparse.Namespace) -> dict[str, Any]:
    """One cell: ``namespaces`` namespaces on ``cluster``, ``--clients`` processes."""
    names = _spread_namespaces(cluster, namespaces)
    for name in names:
        _set_quotas(cluster.url, name)
    ctx = multiprocessing.get_context("spawn")
    go, out, stop_at = ctx.Event(), ctx.Queue(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_client, daemon=True, args=(
        cluster.url, names[i % len(names)], opts.batch, go, stop_at, out))
        for i in range(opts.clients)]
    for p in procs:
        p.start()
    for _ in procs:
        out.get(timeout=120)
    masters = ProcessCpu({f"master{i}": n.pid for i, n in enumerate(cluster.nodes)})
    masters.start()
    t0 = time.monotonic()
    stop_at.value = time.time() + opts.seconds
    go.set()
    ends = [out.get(timeout=opts.seconds + 120) for _ in procs]
    admitted, client_cpu = sum(e[0] for e in ends), sum(e[1] for e in ends)
    wall = time.monotonic() - t0
    spent = masters.stop()
    for p in procs:
        p.join(timeout=30)
    return {"masters": len(cluster.nodes), "namespaces": namespaces,
            "clients": opts.clients, "batch": opts.batch,
            "admissions_per_s": round(admitted / wall),
            "redis_us_per_admission": round(1e6 * sum(spent.values()) / admitted, 1),
            "master_cores": [round(spent[k] / wall, 2) for k in sorted(spent)],
            "client_us_per_admission": round(1e6 * client_cpu / admitted, 1),
            "client_cores": round(client_cpu / wall, 2),
            "load1": round(os.getloadavg()[0], 1)}


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if min(opts.masters + opts.namespaces) < 1 or opts.clients < 1 or opts.batch < 1:
        print("error: --masters, --namespaces, --clients and --batch must be >= 1",
              file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []

    def run_all() -> int:
        from llm_router_devkit.redis_tools import LocalCluster

        for masters in opts.masters:
            with _OneMaster() if masters == 1 else LocalCluster(masters) as cluster:
                for namespaces in opts.namespaces:
                    if namespaces <= masters:
                        rows.append(measure(cluster, namespaces, opts))
                        print(json.dumps(rows[-1]), flush=True)
        return 0

    status = guarded(run_all)
    if status:
        return status
    if opts.out:
        opts.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
