"""``python -m bench.e2e``: the as-is design against the router and the capacity bound.

Runs each workload through each design on its own fresh stack (see ``bench/e2e/services.py``),
one after another, saves each run's raw record under ``bench/out/<stamp>/``, then
analyses them: ``metrics.json``, a traffic plot per run, a summary, and (with ``--docs``)
the benchmark's own section of ``bench/out/benchmarks.md`` and ``docs/bottlenecks.md``.
``--analyse DIR`` re-analyses saved runs without running anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import OUT_DIR
from bench.e2e.run import DESIGNS, RunOptions, run_one
from bench.e2e.workloads import WORKLOADS, Workload, build
from llm_router_devkit.interrupt import interrupted, sigterm_as_interrupt

ROOT = Path(__file__).resolve().parents[2]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    p.add_argument("--time-scale", type=float, default=3.0,
                   help="simulator speed-up (window = 60 s / scale); default 3")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--as-is-deadline-min", type=float, default=6.0,
                   help="wall-clock minutes after which an as-is run is cut short")
    p.add_argument("--router-deadline-min", type=float, default=10.0)
    p.add_argument("--parallelism", type=int, default=32, help="Airflow core parallelism")
    p.add_argument("--warm", action="store_true",
                   help="router runs start with learned estimates (one call per model first)")
    p.add_argument("--warm-airflow", action="store_true",
                   help="router runs start on an Airflow that has run the DAG before (one "
                        "run on an empty store first): the DAG run's start to the first "
                        "call as a deployment's, not a new stack's")
    p.add_argument("--router-param", action="append", default=[], metavar="NAME=N",
                   help="a parameter of the router's drain DAG run, e.g. fan_out=4 or "
                        "max_in_flight=200 (default: the DAG's, solvers as advised)")
    p.add_argument("--redis-url", default=os.environ.get("LLMR_TEST_REDIS_URL",
                                                         "redis://127.0.0.1:6379/0"))
    p.add_argument("--postgres-dsn", default=os.environ.get(
        "LLMR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    p.add_argument("--out", type=Path, default=OUT_DIR)
    p.add_argument("--docs", action="store_true",
                   help="rewrite this benchmark's section of bench/out/benchmarks.md, "
                        "docs/bottlenecks.md and the plots in docs/img/")
    p.add_argument("--analyse", type=Path, metavar="DIR",
                   help="only analyse the raw runs saved in DIR")
    p.add_argument("--runs", type=int, default=1,
                   help="run each workload and design this many times, interleaved")
    p.add_argument("--baseline", action="store_true",
                   help="record the router's runs as the product path's baselines "
                        "(bench/baselines/product-<workload>*.json, first-call-cold or "
                        "first-call-warm), the figures of docs/benchmarks.md's targets table")
    p.add_argument("--airflow-home", type=Path, metavar="DIR",
                   help="keep each run's AIRFLOW_HOME (component and task logs) in "
                        "DIR/<workload>-<design> instead of a temporary directory")
    return p.parse_args(argv)


def run_all(args: argparse.Namespace, out: Path) -> None:
    from llm_router_devkit.simulator import SimulatorProfile

    models = [m.name for m in SimulatorProfile.default().models]
    opts = RunOptions(time_scale=args.time_scale, seed=args.seed,
                      deadline_s={"as-is": args.as_is_deadline_min * 60,
                                  "router": args.router_deadline_min * 60},
                      redis_url=args.redis_url, postgres_dsn=args.postgres_dsn,
                      parallelism=args.parallelism, warm=args.warm,
                      warm_airflow=args.warm_airflow,
                      router_params=_router_params(args.router_param))
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text(_command() + "\n")
    for k in range(1, args.runs + 1):
        for name in args.workloads:
            workload = build(name, args.seed, models)
            for design in args.designs:
                run_and_save(args, opts, out, workload, design, k)


def run_and_save(args: argparse.Namespace, opts: RunOptions, out: Path, workload: Workload,
                 design: str, k: int) -> None:
    """One run, its raw record saved as ``<workload>-<design>[-<k>].raw.json.gz``."""
    name = workload.name + (f" run {k}" if args.runs > 1 else "")
    print(f"\n=== {name} ({workload.description}) / {design} ===", flush=True)
    stem = f"{workload.name}-{design}" + (f"-{k}" if args.runs > 1 else "")
    home = args.airflow_home / stem if args.airflow_home else None
    raw = run_one(workload, design, dataclasses.replace(opts, keep_home=home))
    raw["load_average"] = os.getloadavg()
    path = out / f"{stem}.raw.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(raw, f, separators=(",", ":"))
    print(f"saved {path}", flush=True)


class UsageError(Exception):
    """Input the benchmark cannot run with: main() prints ``error: <it>`` and exits 2."""


def _router_params(given: list[str]) -> tuple[tuple[str, int], ...]:
    params = []
    for item in given:
        name, _, value = item.partition("=")
        if not name or not value.isdigit():
            raise UsageError(f"--router-param {item!r}: expected NAME=N, e.g. fan_out=4")
        params.append((name, int(value)))
    return tuple(params)


def record_baselines(args: argparse.Namespace, results: list[dict[str, Any]],
                     out: Path, directory: Path | None = None) -> None:
    """The router's runs as baselines: per workload, the makespan from the DAG run's start
    (``product-<workload>``, with ``--warm-airflow`` ``product-<workload>-warm``) and from
    the first claim (the same with ``-claim``), with
    their 429s; and the DAG run's start to the first call (``first-call-cold``, or with
    ``--warm-airflow`` ``first-call-warm``) over every run. A workload with no baseline file is
    skipped; a run cut short is refused. The command is the one that made the runs
    (``command.txt`` of ``out``, which ``--analyse`` re-reads)."""
    from bench.baselines import DIR, Check, record

    directory = directory or DIR
    router = [m for m in results if m["design"] == "router"]
    cut = [m["workload"] for m in router if not m["finished"]]
    if cut:
        raise UsageError(f"--baseline: runs of {', '.join(cut)} were cut short; "
                         "re-run them to the end (--router-deadline-min)")
    saved = out / "command.txt"
    command = (saved.read_text().strip() if saved.is_file() else _command())
    command = command.replace(" --baseline", "")
    for workload in sorted({m["workload"] for m in router}):
        runs = [m for m in router if m["workload"] == workload]
        rejected = Check("429s", sum(m["rejected_429"] for m in runs), "<=", 0,
                         f"in {len(runs)} run{'s' if len(runs) > 1 else ''}")
        for suffix, key in (("", "from_run_start_s"), ("-claim", "from_first_claim_s")):
            warm = "-warm" if args.warm_airflow else ""
            target = f"product-{workload.lower()}{warm}{suffix}"
            if (directory / f"{target}.json").is_file():
                path = record(target, [m[key] for m in runs], command, also=[rejected],
                              directory=directory)
                print(f"wrote {path}")
    firsts = [m["start_path"]["first call"] for m in router
              if m["start_path"].get("first call") is not None]
    if firsts:
        target = "first-call-warm" if args.warm_airflow else "first-call-cold"
        print(f"wrote {record(target, firsts, command, directory=directory)}")


def _command() -> str:
    return "python -m bench.e2e " + shlex.join(sys.argv[1:])


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    args = parse(argv)
    from bench.e2e.analyse import analyse_dir

    out = args.analyse or args.out / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    try:
        with sigterm_as_interrupt():
            if args.analyse is None:
                run_all(args, out)
            results = analyse_dir(out, docs=args.docs)
            if args.baseline:
                record_baselines(args, results, out)
    except KeyboardInterrupt as err:  # Ctrl-C: 130, SIGTERM: 143
        return interrupted(err, "every stack was stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
