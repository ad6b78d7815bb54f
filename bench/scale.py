"""How an admission's cost grows with the number of models: a curve, not a point.

    python -m bench.scale [--models 10 100 1000] [--lists 1 10 50] [--calls 300] [--plot]
    python -m bench.scale --ab main [--models 10 1000] [--rounds 5] [--hedges]

On a private ``redis-server`` (other users of a shared one would count), one sync caller,
quotas far above what the run uses (every request is admitted, so the cost measured is the
choice and the reservation). For each number of models and each shape of request (any
model; an allowed list of 1 to 50 models, shared by weight), single ``admit`` and
``admit_many(64)``: the client's latency per call (p50, p99) and the Redis time per
admission (``INFO commandstats``: EVALSHA's microseconds over the admissions it made), and
the ``redis.call()`` commands the script ran per admission. Admissions and their
completions alternate in blocks; only the admissions' blocks are measured.

Raw figures go to ``bench/out/scale.json``; a table is printed; ``--plot`` also draws
``bench/out/scale.png`` when matplotlib is installed. A machine shared with other work
inflates every figure alike: compare within one run (the ratio column).

``--ab REF``: any-model admissions only, single and batched, the working tree's Lua and
REF's each on a private server of its own (Redis runs every script in one Lua VM: the
garbage one side's scripts leave is collected while the other's run), in rounds that
alternate between them (a loaded machine then slows both alike): the median Redis µs per
admission of each, and its ratio to the fewest models (raw: ``bench/out/scale-ab.json``).
``--hedges``: the requests say their caller hedges late calls (``hedges_late``, as the
drain's solver does by default; raw: ``bench/out/scale-ab-hedges.json``).
``--spread``: each model answers at a speed of its own (0.5-4 s, seeded) with noise per
call, so the groups of equally fast models change as the engine learns, as with real
backends; without it every model's learned latency is the few milliseconds from an
admission to its completion (raw: ``scale-spread.json``, ``scale-ab-spread.json``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from airflow_llm_router.engine import Admission, AdmitRequest, Completion, RouterClient
from bench.budget_cost import client_with
from bench.common import interruptible, pyplot, write_raw
from llm_router_devkit.redis_tools import PrivateRedis

OUT = Path(__file__).resolve().parent / "out"
BATCH = 64
TOKENS = 100
HUGE = {"rpm": 10**9, "tpm": 10**12, "max_concurrency": 10**6, "window_s": 60}
#: commands the server counts that are the script call itself, not what it ran
_OUTER = {"evalsha", "eval", "script|load", "script", "info", "hkeys", "ping", "client|setinfo"}


@dataclass
class Point:
    models: int
    allowed: int  # 0: any model
    batch: int
    calls: int
    p50_ms: float  # client latency per call
    p99_ms: float
    redis_us: float  # Redis time per admission (EVALSHA usec / admissions)
    commands: float  # redis.call() commands per admission


def commandstats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    """Per command: (calls, usec)."""
    out = {}
    for name, v in r.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = (int(v["calls"]), int(v["usec"]))
    return out


class Latencies:
    """The latency each call reports with ``--spread``: its model's own speed (0.5-4 s,
    drawn once per model) times 0.7-1.3 (drawn per call), from one seeded generator."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.base: dict[str, float] = {}

    def of(self, model: str) -> float:
        if model not in self.base:
            self.base[model] = self.rng.uniform(0.5, 4.0)
        return self.base[model] * self.rng.uniform(0.7, 1.3)


def _completions(got: Sequence[Any], lat: Latencies | None) -> list[Completion]:
    """The completions of the admissions in ``got``; each reports a latency with ``lat``."""
    return [Completion(d.lease_id, 50, 50, latency_s=lat.of(d.model) if lat else None)
            for d in got if isinstance(d, Admission)]


def _requests(allowed: Sequence[str] | None, n: int, hedges: bool) -> list[AdmitRequest]:
    models = tuple(allowed) if allowed else None
    return [AdmitRequest(TOKENS, models=models, ordered=False, hedges_late=hedges)
            for _ in range(n)]


def measure(client: RouterClient, r: redis.Redis, models: int, allowed: int, batch: int,
            calls: int, hedges: bool = False, lat: Latencies | None = None) -> Point:
    names = [f"m{k}" for k in range(models)]
    chosen = names[:allowed] if allowed else None
    took: list[float] = []
    ops, usec, admissions = 0, 0, 0
    blocks = max(1, calls // 50)
    per_block = max(1, calls // blocks)
    for _ in range(blocks):
        got: list[Any] = []
        a = commandstats(r)
        for _ in range(per_block):
            t0 = time.perf_counter()
            got += client.admit_many(_requests(chosen, batch, hedges))
            took.append(time.perf_counter() - t0)
        b = commandstats(r)
        admissions += per_block * batch
        usec += b["evalsha"][1] - a["evalsha"][1]
        for name, (n, _) in b.items():
            if name not in _OUTER:
                ops += n - a.get(name, (0, 0))[0]
        client.complete_many(_completions(got, lat))
    took.sort()
    return Point(models, allowed, batch, len(took), 1000 * statistics.median(took),
                 1000 * took[min(len(took) - 1, int(0.99 * len(took)))],
                 usec / admissions, ops / admissions)


def learn(client: RouterClient, models: int, lat: Latencies | None = None) -> None:
    """One call on each model, so every model has learned estimates (its latency, its
    output), as after a run: an any-model request then weighs every model (finish-time
    choice), as in steady state, not the fair share alone."""
    got = client.admit_many([AdmitRequest(TOKENS, models=(f"m{k}",)) for k in range(models)])
    client.complete_many(_completions(got, lat))


def curve(url: str, model_counts: Sequence[int], lists: Sequence[int], calls: int,
          ref: str | None = None, spread: bool = False) -> list[Point]:
    points = []
    r = redis.Redis.from_url(url)
    for models in model_counts:
        r.flushall()  # the private server: nothing of anyone else's
        client = client_with(url, ref)
        lat = Latencies() if spread else None
        for k in range(models):
            client.set_quota(f"m{k}", HUGE)
        learn(client, models, lat)
        for allowed in [0, *[n for n in lists if n <= models]]:
            for batch in (1, BATCH):
                n = calls if batch == 1 else max(4, calls // 16)
                # warm-up, then measured
                measure(client, r, models, allowed, batch, max(2, n // 10), lat=lat)
                p = measure(client, r, models, allowed, batch, n, lat=lat)
                points.append(p)
                print(_row(p, points), flush=True)
        client.close()
    r.close()
    return points


def _base(p: Point, points: Sequence[Point]) -> Point | None:
    for q in points:
        if q.allowed == p.allowed and q.batch == p.batch:
            return q
    return None


def _row(p: Point, points: Sequence[Point]) -> str:
    base = _base(p, points)
    ratio = p.redis_us / base.redis_us if base and base.redis_us else float("nan")
    shape = "any" if p.allowed == 0 else f"list {p.allowed}"
    return (f"{p.models:>6} {shape:>8} {p.batch:>5} {p.p50_ms:>9.2f} {p.p99_ms:>9.2f} "
            f"{p.redis_us:>10.1f} {ratio:>6.2f}x {p.commands:>8.1f}")


HEADER = (f"{'models':>6} {'request':>8} {'batch':>5} {'p50 ms':>9} {'p99 ms':>9} "
          f"{'Redis µs':>10} {'ratio':>7} {'cmds':>8}\n"
          "(latency per call; Redis µs and cmds per admission; ratio: Redis µs against the "
          "fewest models)")


def plot(points: Sequence[Point], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    shapes = sorted({(p.allowed, p.batch) for p in points})
    for allowed, batch in shapes:
        xs = [p for p in points if p.allowed == allowed and p.batch == batch]
        label = ("any model" if allowed == 0 else f"list of {allowed}") + \
            (" single" if batch == 1 else f" batch {batch}")
        ax.plot([p.models for p in xs], [p.redis_us for p in xs], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("models with a quota")
    ax.set_ylabel("Redis µs per admission")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    return True


def ab(urls: Sequence[str], model_counts: Sequence[int], ref: str, rounds: int, calls: int,
       hedges: bool = False, spread: bool = False) -> list[dict[str, Any]]:
    """Interleaved rounds of any-model admissions, the working tree's Lua (on ``urls[0]``)
    against ``ref``'s (on ``urls[1]``)."""
    servers = {"tree": redis.Redis.from_url(urls[0]), ref: redis.Redis.from_url(urls[1])}
    rows: list[dict[str, Any]] = []
    for models in model_counts:
        for r in servers.values():
            r.flushall()
        clients = {"tree": client_with(urls[0], None), ref: client_with(urls[1], ref)}
        # the same speeds and draws on each side
        lats = {name: Latencies() if spread else None for name in clients}
        for name, client in clients.items():
            for k in range(models):
                client.set_quota(f"m{k}", HUGE)
            learn(client, models, lats[name])
        for batch in (1, BATCH):
            n = calls if batch == 1 else max(4, calls // 16)
            got: dict[str, list[float]] = {name: [] for name in clients}
            for _ in range(rounds):
                for name, client in clients.items():
                    got[name].append(measure(client, servers[name], models, 0, batch,
                                             n, hedges, lats[name]).redis_us)
            row = {"models": models, "batch": batch,
                   **{name: statistics.median(v) for name, v in got.items()}}
            rows.append(row)
            base = next(x for x in rows if x["batch"] == batch)
            print(f"{models:>6} {batch:>5} " + " ".join(
                f"{name} {row[name]:>9.1f} µs ({row[name] / base[name]:.2f}x)"
                for name in clients), flush=True)
        for client in clients.values():
            client.close()
    for r in servers.values():
        r.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--models", nargs="+", type=int, default=[10, 100, 1000])
    p.add_argument("--lists", nargs="+", type=int, default=[1, 10, 50],
                   help="sizes of allowed lists to measure besides any-model")
    p.add_argument("--calls", type=int, default=300, help="single admissions per point "
                   "(batches: a sixteenth)")
    p.add_argument("--plot", action="store_true", help="draw bench/out/scale.png")
    p.add_argument("--out", type=Path, default=OUT / "scale.json")
    p.add_argument("--ref", help="measure the engine's Lua at this git ref (e.g. main) instead "
                   "of the working tree's")
    p.add_argument("--ab", metavar="REF", help="any-model only, the working tree's Lua and "
                   "REF's in alternating rounds")
    p.add_argument("--rounds", type=int, default=5, help="rounds of --ab")
    p.add_argument("--hedges", action="store_true", help="--ab with requests whose caller "
                   "hedges late calls (hedges_late)")
    p.add_argument("--spread", action="store_true", help="each model answers at a speed of "
                   "its own, with noise per call")
    args = p.parse_args(argv)
    if args.calls < 1 or args.rounds < 1 or min(args.models) < 1:
        print("error: --calls, --rounds and each of --models must be >= 1", file=sys.stderr)
        return 2
    server = PrivateRedis()
    server.start()
    if args.ab:
        other = PrivateRedis()
        try:
            other.start()
            print(f"{'models':>6} {'batch':>5} Redis µs per any-model admission, median of "
                  f"{args.rounds} rounds (ratio to the fewest models)")
            rows = ab([server.url, other.url], args.models, args.ab, args.rounds, args.calls,
                      args.hedges, args.spread)
        finally:
            server.close()
            other.close()
        name = "scale-ab" + "-hedges" * args.hedges + "-spread" * args.spread + ".json"
        write_raw(args.out.with_name(name), {"ref": args.ab, "hedges": args.hedges,
                                             "spread": args.spread,
                                             "rows": rows})
        return 0
    try:
        print(HEADER)
        points = curve(server.url, args.models, args.lists, args.calls, args.ref,
                       args.spread)
    finally:
        server.close()
    out = args.out.with_name("scale-spread.json") if args.spread else args.out
    write_raw(out, {"ref": args.ref, "spread": args.spread,
                    "points": [asdict(x) for x in points]})
    if args.plot:
        png = args.out.with_suffix(".png")
        print(f"plot: {png}" if plot(points, png) else "plot: matplotlib not installed")
    return 0


if __name__ == "__main__":
    raise SystemExit(interruptible(main))
