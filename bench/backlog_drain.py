"""A long drain's memory: the solver process's RSS and Redis's ``used_memory`` from the start
to the end of a drain of a large backlog; on demand, not in CI.

    python -m bench.backlog_drain                       # 100,000 tasks
    python -m bench.backlog_drain --tasks 1000000       # a million (16 min on 2 quiet cores)

One ``DrainTrigger`` in this process (as ``bench/solver_cpu.py`` runs it) against the
devkit's simulator with fast models and roomy quotas, a private ``redis-server`` and, by
default, a private PostgreSQL with the packaged defaults (``bench/private_pg.py``). A thread
samples every ``--every`` seconds: this process's RSS (``/proc/self/status``), Redis's
``used_memory`` and key count, and the tasks solved so far (from the solved index). What is
reported: per third of the run after its first 10 %, the median of each figure and the
solving rate (a drain whose cost grows with what it has done slows down), the growth from
the first third to the last, and the largest Redis keys at the end. Raw samples go to
``bench/out/backlog_drain.json``; ``--plot PNG`` draws the samples (RSS, Redis memory, tasks
solved per second over the tasks solved) once the run ends, ``--plot PNG --replot JSON``
from a saved run, when matplotlib is installed (``pip install -e "devkit[bench]"``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg import sql

from bench.common import (
    drain_once,
    enqueue_synthetic,
    interruptible,
    private_services,
    pyplot,
)
from bench.private_pg import private_postgres
from bench.solver_cpu import default_connections, roomy_quotas, sim_profile

OUT = Path(__file__).resolve().parent / "out" / "backlog_drain.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.backlog_drain",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--max-in-flight", type=int, default=200, help="the drain's max_in_flight")
    p.add_argument("--models", type=int, default=4, help="models with a roomy quota")
    p.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--postgres-dsn", help="a running server (default: a private one)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--plot", type=Path, metavar="PNG", help="draw the samples here")
    p.add_argument("--replot", type=Path, metavar="JSON",
                   help="with --plot: draw a saved run's samples, run nothing")
    return p


def plot(result: dict[str, Any], path: Path) -> bool:
    """RSS and Redis memory, and the solving rate between samples, against the tasks
    solved; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    samples = [x for x in result["samples"] if x["solved"] > 0]
    solved = [x["solved"] / 1000 for x in samples]
    rate = [0.0] + [(b["solved"] - a["solved"]) / max(1e-9, b["t"] - a["t"])
                    for a, b in itertools.pairwise(samples)]
    fig, axes = plt.subplots(3, 1, figsize=(7, 6.5), sharex=True)
    for ax, ys, label in ((axes[0], [x["rss_mb"] for x in samples], "drain RSS, MB"),
                          (axes[1], [x["redis_mb"] for x in samples], "Redis used_memory, MB"),
                          (axes[2], rate, "tasks solved / s")):
        ax.plot(solved, ys, linewidth=0.8)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[2].set_xlabel("tasks solved (thousands)")
    axes[0].set_title(f"A drain of {result['tasks']:,} tasks "
                      f"({result['per_s']:,} tasks/s over {result['drain_s']:.0f} s)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    """Samples RSS, Redis memory and keys, and tasks solved, until stopped."""

    def __init__(self, dsn: str, schema: str, redis_url: str, every: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.schema, self.redis_url, self.every = dsn, schema, redis_url, every
        self.samples: list[dict[str, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        r = redis.Redis.from_url(self.redis_url)
        solved = sql.SQL("SELECT count(*) FROM {} WHERE status = 'solved'").format(
            sql.Identifier(self.schema, "tasks"))
        t0 = time.monotonic()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                row = conn.execute(solved).fetchone()
                info = r.info("memory")
                self.samples.append({
                    "t": round(time.monotonic() - t0, 2), "solved": int(row[0]) if row else 0,
                    "rss_mb": round(_rss_mb(), 1),
                    "redis_mb": round(int(info["used_memory"]) / 2**20, 2),
                    "redis_keys": int(r.dbsize())})
                self.stop.wait(self.every)
        r.close()


def summarize(samples: list[dict[str, float]], total: int) -> dict[str, Any]:
    """Per third of the drain after its first 10 % (the start-up: connections, pools,
    learned estimates): the median RSS and Redis memory, and the solving rate. Redis holds
    each model's window log (one entry per call of the last window), so its memory follows
    the rate of the last minute, not the work done; the rate is beside it to tell."""
    bounds = [0.1, 0.4, 0.7, 1.01]
    thirds = []
    for low, high in itertools.pairwise(bounds):
        part = [s for s in samples if low * total <= s["solved"] < high * total]
        if len(part) < 2:
            part = samples[-2:]
        thirds.append({
            "solved_from": part[0]["solved"],
            "rss_mb": round(statistics.median(s["rss_mb"] for s in part), 1),
            "redis_mb": round(statistics.median(s["redis_mb"] for s in part), 2),
            "redis_keys": max(s["redis_keys"] for s in part),
            "per_s": round((part[-1]["solved"] - part[0]["solved"])
                           / max(1e-9, part[-1]["t"] - part[0]["t"]))})
    first, last = thirds[0], thirds[-1]
    return {"thirds": thirds,
            "rss_growth_pct": round(100 * (last["rss_mb"] / first["rss_mb"] - 1), 1),
            "redis_growth_pct": round(100 * (last["redis_mb"] / first["redis_mb"] - 1), 1),
            "rss_max_mb": max(s["rss_mb"] for s in samples),
            "redis_max_mb": max(s["redis_mb"] for s in samples)}


def biggest_keys(redis_url: str, top: int = 8) -> dict[str, int]:
    """Bytes of the largest keys (``MEMORY USAGE``): what Redis's memory is made of."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        sizes = {k: int(r.memory_usage(k) or 0) for k in r.scan_iter(count=1000)}
    finally:
        r.close()
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:top])


def run(opts: argparse.Namespace, dsn: str) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    schema, namespace = f"llmr_drain_{run_id}", f"drain-{run_id}"
    prof = sim_profile(opts.models)
    with ExitStack() as stack:
        redis_server, sim, store = private_services(stack, dsn, schema, prof)
        default_connections(redis_server.port, namespace, dsn, sim.url)
        store.migrate()
        t0 = time.monotonic()
        enqueue_synthetic(store, opts.tasks, 200)
        enqueue_s = time.monotonic() - t0
        roomy_quotas(stack, redis_server.url, namespace, prof)
        sampler = Sampler(dsn, schema, redis_server.url, opts.every)
        sampler.start()
        t0 = time.monotonic()
        event = asyncio.run(drain_once(schema, f"drain-{run_id}", timeout_s=86_400,
                                       max_in_flight=opts.max_in_flight,
                                       claim_batch=opts.max_in_flight))
        wall = time.monotonic() - t0
        time.sleep(opts.every * 1.5)  # one sample after the end
        sampler.stop.set()
        sampler.join()
        keys = biggest_keys(redis_server.url)
        solved = store.counts().get("solved", 0)
    if event.get("status") != "done" or solved != opts.tasks:
        raise RuntimeError(f"the drain solved {solved} of {opts.tasks} tasks: {event}")
    return {"tasks": opts.tasks, "enqueue_s": round(enqueue_s, 1), "drain_s": round(wall, 1),
            "per_s": round(solved / wall), **summarize(sampler.samples, opts.tasks),
            "biggest_keys": keys,
            "samples": sampler.samples}


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.tasks < 1000:
        print("error: --tasks: at least 1000 (a curve needs a long drain)", file=sys.stderr)
        return 2
    if opts.max_in_flight < 1 or opts.models < 1 or opts.every <= 0:
        print("error: --max-in-flight and --models must be >= 1, --every above 0",
              file=sys.stderr)
        return 2
    if opts.replot is not None:
        if opts.plot is None:
            print("error: --replot: give --plot PNG to draw into", file=sys.stderr)
            return 2
        try:
            saved = json.loads(opts.replot.read_text())
        except (OSError, ValueError) as err:
            print(f"error: --replot {opts.replot}: {err}", file=sys.stderr)
            return 2
        if not plot(saved, opts.plot):
            print("error: --plot: matplotlib is not installed (pip install -e "
                  "\"devkit[bench]\")", file=sys.stderr)
            return 2
        print(f"plot: {opts.plot}")
        return 0
    import airflow_llm_router.triggers  # noqa: F401  (Airflow's imports, outside the run)

    def body() -> int:
        with ExitStack() as stack:
            dsn = opts.postgres_dsn or stack.enter_context(private_postgres())
            result = run(opts, dsn)
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
        if opts.plot is not None:
            print(f"plot: {opts.plot}" if plot(result, opts.plot)
                  else "plot: matplotlib not installed")
        return 0

    return interruptible(body)


if __name__ == "__main__":
    sys.exit(main())
