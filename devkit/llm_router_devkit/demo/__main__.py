"""Command line of the demo: ``python -m llm_router_devkit.demo [--prompts N] ...``."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_llm_router.cli import CliParser
from llm_router_devkit.demo.run import DemoOptions, main_guarded

_DEFAULTS = DemoOptions()

#: Why the design the router replaces is not a demo mode, and where it is compared.
AS_IS_REFUSAL = (
    "as_is_baseline is not a demo mode: dag.test() runs mapped tasks one after another, so "
    "its 20 workers would run one at a time (~20x slower than that design really is); the "
    "benchmark compares it, its workers in parallel as in production: python -m bench.e2e "
    "--designs as-is router (docs/benchmarks.md)")


def _dag(name: str) -> str:
    """The drain DAG's name; the old design's gets the reason and the benchmark's command."""
    if name == "as_is_baseline":
        raise argparse.ArgumentTypeError(AS_IS_REFUSAL)
    return name


def _number(kind: type[int] | type[float], low: float, *, above: bool = False,
            high: float | None = None) -> Any:
    """An argparse type: a ``kind`` number >= ``low`` (> with ``above``), <= ``high`` if
    given; a value out of range is refused with the range, before anything starts."""
    name = "an integer" if kind is int else "a number"
    floor = f"> {low:g}" if above else f">= {low:g}"
    wanted = f"{name} {floor}" if high is None else f"{name} from {low:g} to {high:g}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        ok = (math.isfinite(value) and (value > low if above else value >= low)
              and (high is None or value <= high))
        if not ok:
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {wanted}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _parser() -> argparse.ArgumentParser:
    d = _DEFAULTS
    parser = CliParser(
        prog="python -m llm_router_devkit.demo",
        description="Drain a seeded backlog through Airflow, the router and the Models Backend "
        "simulator, and report traffic per model against its limits.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--prompts", type=_number(int, 1), default=d.prompts, help="tasks to seed")
    add("--time-scale", type=_number(float, 0, above=True), default=d.time_scale,
        help="simulator speed-up: latencies and the 60 s window are divided by this")
    add("--seed", type=int, default=d.seed, help="seed of the backlog and the simulator")
    add("--error-rate", type=_number(float, 0, high=1), default=d.error_rate,
        help="probability that the simulator answers 500 to an accepted call")
    add("--dag", default=d.dag, choices=["llm_router_drain"], type=_dag,
        help="the example DAG that drains the backlog (the design it replaces is compared "
        "in the benchmark, where its workers run in parallel as in production: python -m "
        "bench.e2e --designs as-is router)")
    add("--fan-out", type=_number(int, 0), default=d.fan_out,
        help="solvers, the lead included (drain DAG); 0: as many as the router advises")
    add("--claim-batch", type=_number(int, 1), default=d.claim_batch,
        help="the most tasks one claim takes (drain DAG)")
    add("--max-in-flight", type=_number(int, 1), default=d.max_in_flight,
        help="model calls in flight per solver (drain DAG)")
    add("--time-budget-s", type=_number(float, 0, above=True), default=d.time_budget_s,
        help="wall-clock seconds after which a solver claims no new task (drain DAG)")
    add("--redis-url", help="use this Redis instead of starting an embedded one")
    add("--postgres-dsn", help="use this PostgreSQL instead of starting an embedded one")
    add("--schema", default=d.schema,
        help="PostgreSQL schema of the demo's task table (dropped and recreated!)")
    add("--workdir", type=Path, default=d.workdir, help="where the embedded servers and "
        "Airflow keep their files")
    add("--dags-folder", type=Path, default=d.dags_folder, help="the example DAGs")
    add("--progress-interval", type=_number(float, 0, above=True), default=d.progress_interval_s,
        help="seconds between progress lines")
    add("--no-yardstick", action="store_true",
        help="skip the LP lower bound and the reference schedules after the run (minutes "
        "on 2 cores for a few thousand prompts); the report then has the fluid "
        "approximation only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    opts = DemoOptions(
        prompts=args.prompts, time_scale=args.time_scale, seed=args.seed,
        error_rate=args.error_rate, dag=args.dag, fan_out=args.fan_out,
        claim_batch=args.claim_batch, max_in_flight=args.max_in_flight,
        time_budget_s=args.time_budget_s, redis_url=args.redis_url,
        postgres_dsn=args.postgres_dsn, workdir=args.workdir, dags_folder=args.dags_folder,
        schema=args.schema, progress_interval_s=args.progress_interval,
        yardstick=not args.no_yardstick,
    )
    return main_guarded(opts)


if __name__ == "__main__":
    sys.exit(main())
