"""What spend budgets cost an admission: Redis time per admission (INFO commandstats) and
admissions per second, before budgets (the engine's Lua at a git ref) and after, unpriced
and priced, on a private redis-server so other users of the shared one don't count.

    python -m bench.budget_cost [--before REF] [--after REF] [--seconds 1.5] [--rounds 3]

Variants, interleaved round by round (a shared machine drifts; medians are reported):
``before`` (the Lua of --before, unpriced quotas), ``after`` (the Lua of --after, or the
working tree, unpriced), ``priced`` (prices on every model), ``budgets`` (prices, a model
budget each and a router-wide budget, all far above what the run spends, so every request is
admitted and the cost is that of the checks and the reservation). One caller, 10 models,
``admit_many(64)`` then ``complete_many`` with actual tokens; and single ``admit`` +
``complete``.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    Completion,
    RouterClient,
    RouterSettings,
    scripts,
)
from bench.common import interruptible
from llm_router_devkit.redis_tools import PrivateRedis

MODELS = 10
BATCH = 64
HUGE = {"rpm": 10**9, "tpm": 10**12, "max_concurrency": 10**6, "window_s": 60}
PRICES = {"input_micro_usd_per_mtok": 150_000, "output_micro_usd_per_mtok": 600_000}


def lua_at(ref: str | None) -> Callable[[str], str]:
    """A reader of the engine's Lua files at git ``ref`` (the working tree for None); a file
    missing there (an operation added later) is read from the working tree."""
    working = scripts._read

    def read(name: str) -> str:
        if ref is None:
            return working(name)
        shown = subprocess.run(["git", "show", f"{ref}:airflow_llm_router/engine/lua/{name}"],
                               capture_output=True, text=True)
        return shown.stdout if shown.returncode == 0 else working(name)

    return read


def libraries_at(ref: str | None) -> dict[str, tuple[str, ...]]:
    """Which libraries each operation loads at ``ref`` (scripts.py's ``_LIBRARIES``)."""
    if ref is None:
        return dict(scripts._LIBRARIES)
    source = subprocess.run(["git", "show", f"{ref}:airflow_llm_router/engine/scripts.py"],
                            capture_output=True, text=True, check=True).stdout
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_LIBRARIES":
            assert node.value is not None
            libs: dict[str, tuple[str, ...]] = ast.literal_eval(node.value)
            # operations added since keep today's libraries (they are not measured)
            return {**scripts._LIBRARIES, **libs}
    raise ValueError(f"no _LIBRARIES in scripts.py at {ref}")


def client_with(url: str, ref: str | None) -> RouterClient:
    """A client whose scripts are the engine's Lua at ``ref`` (Python policy of today)."""
    original, libraries = scripts._read, scripts._LIBRARIES
    scripts._read = lua_at(ref)  # type: ignore[assignment]
    scripts._LIBRARIES = libraries_at(ref)
    scripts.script_source.cache_clear()
    try:
        return RouterClient.from_url(url, RouterSettings(namespace=f"b-{uuid.uuid4().hex[:8]}"))
    finally:
        scripts._read, scripts._LIBRARIES = original, libraries
        scripts.script_source.cache_clear()


def quota(variant: str) -> dict[str, Any]:
    if variant in ("before", "after"):
        return HUGE
    q: dict[str, Any] = {**HUGE, **PRICES}
    if variant == "budgets":
        q["budget_micro_usd"] = 10**15
    return q


def evalsha_usec(conn: redis.Redis) -> tuple[int, int]:
    stats = conn.info("commandstats")
    e = stats.get("cmdstat_evalsha", {"usec": 0, "calls": 0})
    return int(e["usec"]), int(e["calls"])


def run(client: RouterClient, conn: redis.Redis, batch: int, seconds: float) -> tuple[float, float]:
    """(admissions per second, Redis µs per admission incl. its completion)."""
    admitted = 0
    usec0, _ = evalsha_usec(conn)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        if batch == 1:
            d = client.admit(100, estimated_output_tokens=50)
            assert isinstance(d, Admission)
            client.complete(d.lease_id, 50, 40)
            admitted += 1
        else:
            ds = client.admit_many([AdmitRequest(100, estimated_output_tokens=50)
                                    for _ in range(batch)])
            leases = [d for d in ds if isinstance(d, Admission)]
            assert len(leases) == batch
            client.complete_many([Completion(d.lease_id, 50, 40) for d in leases])
            admitted += batch
    elapsed = time.perf_counter() - start
    usec1, _ = evalsha_usec(conn)
    return admitted / elapsed, (usec1 - usec0) / max(1, admitted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="eb4472b^", help="git ref of the engine before")
    parser.add_argument("--after", default="HEAD", help="git ref after ('' for the working tree)")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    variants = ["before", "after", "priced", "budgets"]
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    server = PrivateRedis()
    server.start()
    try:
        conn = redis.Redis.from_url(server.url)
        for _ in range(args.rounds):
            for variant in variants:
                client = client_with(server.url, args.before if variant == "before"
                                     else args.after or None)
                if variant == "budgets":
                    client.set_budget({"budget_micro_usd": 10**15})
                for m in range(MODELS):
                    client.set_quota(f"m{m}", quota(variant))
                for batch in (1, BATCH):
                    run(client, conn, batch, 0.2)  # warm-up
                    results.setdefault((variant, batch), []).append(
                        run(client, conn, batch, args.seconds))
                client.close()
        conn.close()
    finally:
        server.close()
    print("| variant | mode | admissions/s | Redis µs / admission (admit + complete) |")
    print("|---|---|--:|--:|")
    for batch in (1, BATCH):
        for variant in variants:
            got = results[(variant, batch)]
            rate = statistics.median(r for r, _ in got)
            usec = statistics.median(u for _, u in got)
            mode = "single" if batch == 1 else f"batch {batch}"
            print(f"| {variant} | {mode} | {rate:,.0f} | {usec:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(interruptible(main))  # Ctrl-C or SIGTERM: its services stopped
