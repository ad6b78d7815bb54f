"""The yardstick of each workload: the exact-window LP lower bound and the clairvoyant
reference schedule (``llm_router_devkit.yardstick``), and each recorded run against both.

    python -m bench.e2e.yardstick bench/results/<stamp>     # the runs of that directory

W3's quota change (the busiest model's limits halved one window in) and W4's arrivals are
part of the instance, at the times the benchmark applies them (in windows after the first
call). A run faster than the LP bound is flagged: it would mean the bound is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.e2e.run import busiest_model
from bench.e2e.workloads import Workload, build
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.yardstick import (
    Instance,
    Limits,
    instance_from_profile,
    lp_bound,
    reference_schedule,
)

__all__ = ["Yardstick", "instance_of", "main", "measure"]


@dataclass(frozen=True)
class Yardstick:
    workload: str
    lp_bound_s: float
    reference_s: float
    seconds: float


def instance_of(workload: Workload, profile: SimulatorProfile) -> Instance:
    """The scheduling instance the benchmark makes of ``workload`` on ``profile``."""
    tasks = workload.tasks
    window = profile.scaled_window_s
    arrivals: list[float] = [0.0] * len(workload.initial)
    for arrival in workload.arrivals:
        arrivals.extend([arrival.at_windows * window] * len(arrival.tasks))
    limits_after: dict[str, Limits] = {}
    change_at = None
    if workload.quota_change is not None:
        model = busiest_model(profile, workload)
        m = profile.model(model)
        assert m is not None
        factor = workload.quota_change.factor

        def scaled(value: int | None) -> int | None:
            return None if value is None else max(1, int(value * factor))

        limits_after[model] = Limits(window, scaled(m.rpm), scaled(m.tpm),
                                     scaled(m.max_concurrency))
        change_at = workload.quota_change.at_windows * window
    return instance_from_profile(
        profile, [t.prompt for t in tasks], [t.allowed_models for t in tasks],
        arrivals_s=arrivals if workload.arrivals else (), limits_after=limits_after,
        change_at_s=change_at)


def measure(name: str, seed: int, time_scale: float) -> Yardstick:
    """LP bound and reference makespan of workload ``name`` (seconds from the first call)."""
    import time

    started = time.monotonic()
    profile = SimulatorProfile.default(time_scale=time_scale, seed=seed)
    instance = instance_of(build(name, seed, [m.name for m in profile.models]), profile)
    bound = lp_bound(instance)
    reference = reference_schedule(instance, bound.plan)
    return Yardstick(name, bound.makespan_s, reference.makespan_s, time.monotonic() - started)


def _share(yardstick_s: float, made_s: float, finished: bool) -> str:
    """The run's speed as a share of a schedule taking ``yardstick_s`` (cut: unfinished)."""
    return f"{yardstick_s / made_s:.0%}" if finished and made_s > 0 else "cut"


def _table(runs: Sequence[dict[str, Any]], sticks: dict[str, Yardstick]) -> str:
    lines = ["| workload | LP bound s | reference s | design | makespan s | % of reference "
             "speed | % of LP bound speed |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        y = sticks[r["workload"]]
        made = r.get("makespan_s") or 0.0
        finished = r.get("solved") == r.get("tasks")
        flag = " **faster than the LP bound: the bound is wrong**" \
            if finished and 0 < made < y.lp_bound_s else ""
        lines.append(f"| {r['workload']} | {y.lp_bound_s:.1f} | {y.reference_s:.1f} | "
                     f"{r['design']} | {made:.1f} | {_share(y.reference_s, made, finished)} | "
                     f"{_share(y.lp_bound_s, made, finished)}{flag} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.e2e.yardstick", description=__doc__)
    p.add_argument("results", type=Path, help="a bench/results/<stamp> directory")
    p.add_argument("--seed", type=int, default=1, help="the runs' seed (default 1)")
    args = p.parse_args(argv)
    metrics = args.results / "metrics.json"
    if not metrics.is_file():
        print(f"error: {metrics} not found; give a directory written by python -m bench.e2e",
              file=sys.stderr)
        return 2
    runs = json.loads(metrics.read_text())
    sticks = {}
    for name in sorted({r["workload"] for r in runs}):
        scale = next(r["time_scale"] for r in runs if r["workload"] == name)
        sticks[name] = y = measure(name, args.seed, scale)
        print(f"{name}: LP bound {y.lp_bound_s:.1f} s, reference {y.reference_s:.1f} s "
              f"({y.seconds:.0f} s to compute)", flush=True)
    print(_table(runs, sticks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
