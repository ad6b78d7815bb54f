"""``python -m bench.admission``: runs the matrix, the limit check, the repeated target
cells and the per-operation breakdown, prints the report and writes it into the docs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import admission
from bench.admission.load import limit_check, run_cell
from bench.admission.model import BATCH, SECTION, Cell, Result, pct
from bench.admission.monitor import QUIET, machine_facts
from bench.admission.ops import breakdown, profile_client
from bench.admission.report import find, progress, render
from bench.common import BENCHMARKS_MD, interruptible, write_section

ROOT = Path(__file__).resolve().parents[2]


def matrix(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for client in args.clients:
        for callers in args.callers:
            for models in args.models:
                for batch in (1, BATCH):
                    cells.append(Cell(client, callers, models, batch))
    return cells


def timing(cell: Cell, done: list[Result], args: argparse.Namespace) -> tuple[float, float]:
    """Warm-up and measured time of a cell. When one round of every caller's call takes a
    while (256 callers x a batch over 100 models: seconds), both are stretched so the
    interval holds several rounds, estimated from the one-caller cell of the same kind."""
    one = find(done, client=cell.client, callers=1, models=cell.models, batch=cell.batch)
    round_s = pct(one.tally.lat_admit, 50) * cell.callers if one else 0.0
    if round_s != round_s:  # nan: no admission measured
        round_s = 0.0
    warmup = max(args.warmup, 1.5 * round_s)
    seconds = max(args.duration, min(4 * round_s, 12.0))
    return warmup, seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.admission",
                                description=(admission.__doc__ or "").split("\n\n")[0])
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--quick", action="store_true", help="~1 s per cell")
    p.add_argument("--duration", type=float, help="measured seconds per cell (default 3)")
    p.add_argument("--out", type=Path, default=BENCHMARKS_MD,
                   help="Markdown file to write the section into")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--json", type=Path, help="also dump raw figures here")
    p.add_argument("--clients", nargs="+", default=["sync", "async"])
    p.add_argument("--callers", nargs="+", type=int, default=[1, 16, 256])
    p.add_argument("--models", nargs="+", type=int, default=[10, 100])
    p.add_argument("--uvloop", action="store_true", help="run the asyncio cells on uvloop")
    p.add_argument("--target-repeats", type=int,
                   help="extra runs of the two target cells (default 3, --quick 2)")
    p.add_argument("--limit-repeats", type=int,
                   help="runs of each cost-vs-limit case (default 3, --quick 2)")
    p.add_argument("--quiet-wait", type=float,
                   help="before each cell, wait up to this many s for other processes to "
                   "go (nearly) idle (default 5, --quick 2; 0 = don't)")
    p.add_argument("--profile", action="store_true",
                   help="also print a cProfile of the client side (one sync caller)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.duration is None:
        args.duration = 1.0 if args.quick else 3.0
    args.warmup = 0.3 if args.quick else 0.5
    if args.target_repeats is None:
        args.target_repeats = 2 if args.quick else 3
    if args.limit_repeats is None:
        args.limit_repeats = 2 if args.quick else 3
    if args.quiet_wait is None:
        args.quiet_wait = 2.0 if args.quick else 5.0
    QUIET["max_wait_s"] = args.quiet_wait
    return args


def repeat_targets(args: argparse.Namespace, results: list[Result]) -> dict[int, list[Result]]:
    """Run the target cells again (machine speed drifts on a VM): median over all runs."""
    runs: dict[int, list[Result]] = {}
    for batch in (1, BATCH):
        found = find(results, client="async", callers=16, models=10, batch=batch)
        runs[batch] = [found] if found else []
    for k in range(args.target_repeats):
        for batch in (1, BATCH):
            res = run_cell(args.url, Cell("async", 16, 10, batch), 2000 + 2 * k + batch,
                           args.warmup, args.duration, args.uvloop)
            runs[batch].append(res)
            progress(res)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    facts = machine_facts(args.url)
    print(f"machine: {json.dumps(facts)}", flush=True)
    cells = matrix(args)
    print(f"matrix: {len(cells)} cells x {args.duration:g} s", flush=True)
    results: list[Result] = []
    for i, cell in enumerate(cells):
        warmup, seconds = timing(cell, results, args)
        results.append(run_cell(args.url, cell, i, warmup, seconds, args.uvloop))
        progress(results[-1])
    print("cost vs limit:", flush=True)
    limits = limit_check(args)
    print("target cells, repeated:", flush=True)
    targets = repeat_targets(args, results)
    print("per-operation breakdown:", flush=True)
    costs = breakdown(args.url, args.quick)
    text = render(args, facts, results, limits, costs, targets)
    print("\n" + text)
    if args.profile:
        print(profile_client(args.url, 2.0))
    if not args.no_write:
        write_section(args.out, SECTION, text)
        print(f"wrote {SECTION!r} into {args.out}")
    if args.json:
        args.json.write_text(json.dumps({
            "facts": facts,
            "cells": [_raw(r) for r in results],
            "limits": [[_raw(r) for r in rs] for rs in limits],
            "targets": {str(b): [_raw(r) for r in rs] for b, rs in targets.items()},
            "ops": [c.__dict__ for c in costs],
        }, indent=1, default=str))
    return 0


def _raw(r: Result) -> dict[str, Any]:
    t = r.tally
    return {
        **r.cell.__dict__, "seconds": r.seconds, "admissions": t.admissions,
        "waits": t.waits, "rate": r.rate,
        "p50_ms": pct(t.lat_admit, 50) * 1e3, "p99_ms": pct(t.lat_admit, 99) * 1e3,
        "wait_p50_ms": pct(t.lat_wait, 50) * 1e3, "wait_p99_ms": pct(t.lat_wait, 99) * 1e3,
        "lua_usec": r.server.lua_usec, "lua_calls": r.server.lua_calls,
        "my_scripts": t.scripts, "redis_cpu_s": r.server.redis_cpu,
        "client_cpu_s": r.server.client_cpu, "wall_s": r.server.wall,
        "window_log": r.window_log, "inner": r.server.inner, "probe_ms": r.probe_ms,
        "other_cpu_s": r.server.other_cpu,
    }


if __name__ == "__main__":
    sys.exit(interruptible(main))  # Ctrl-C or SIGTERM: its services stopped
