"""The yardstick of each workload: the exact-window LP lower bound, the clairvoyant
reference schedule and the reference with costs unknown (``llm_router_devkit.yardstick``),
and each recorded run against them.

    python -m bench.e2e.yardstick bench/out/<stamp>     # the runs of that directory

(a directory of ``python -m bench.e2e`` or of ``python -m bench.direct``: the routing
without Airflow, each run measured against the yardstick of its own quota change's time)

W3's quota change (the busiest model's limits halved one window in) and W4's arrivals are
part of the instance. Time 0 is the run's first call as the backend's timeline has it (the
start of its 0.2 s bucket: at or before the real first call), and each run is measured
against the times it really had, read from its raw record (:func:`timing_of`), each on the
side that keeps the bound a bound:

- the **quota change** when the router was told: the target binds from then, so the
  reference keeps the old limits no longer than the router's target did. The router is
  told ``CUT_GRACE_S`` before the provider enforces the cut (``lower_limits``), and the
  recorded stamp is taken after the provider's limits were lowered, so the change is
  placed at the stamp less the grace: at or after the moment the router was told (the
  nominal one window was 0.4-0.8 s early in the recorded W3 runs);
- the **arrivals** at the earliest they can have happened: the benchmark enqueues a batch
  once ``at_windows`` windows have passed since it saw the first call.

A run faster than the LP bound is flagged: it would mean the bound is wrong.

A workload with ordered preference lists (W2) is also measured against the reference that
keeps them (``reference_schedule(..., ordered=True)``: the best schedule found in which
each prompt goes to a later model of its list only while every earlier one cannot take
it, holding prompts in the backlog where that pays; checked send by send): the plain
reference treats a list as a set and may send a prompt past its first choice while that
has room, which makes it faster than any schedule that keeps the order.

For each run it also prints each model's calls per window next to the reference's (a
``bench.direct`` run records them, a ``bench.e2e`` run's metrics count them from the
backend's timeline): where a run falls short of the reference, the windows and models
that carry the difference (a bottleneck measured on the same run).

The reference with costs unknown (``blind_reference_schedule``, with the LP plan of the
expected instance) makes the same choices knowing only what a router knows before a call
answers (each model's mean latency, each prompt's reservation: input + the model's 95th
percentile of output) and is charged the real draws: a makespan reachable without
knowing them. Where the workload has ordered lists it is also given with them kept.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import interruptible
from bench.e2e.analyse import read_raw
from bench.e2e.run import CUT_GRACE_S, busiest_model
from bench.e2e.workloads import Workload, build
from llm_router_devkit.product_path import speed_share
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.yardstick import (
    Instance,
    Limits,
    blind_reference_schedule,
    instance_from_profile,
    lp_bound,
    reference_schedule,
)

#: The benchmark's backend models (the simulator's default profile), by name.
MODELS = [m.name for m in SimulatorProfile.default().models]

__all__ = ["NOMINAL", "Timing", "Yardstick", "calls_per_window", "direct_runs", "instance_of",
           "main", "measure", "relevant", "timing_of", "windows_table"]


@dataclass(frozen=True)
class Yardstick:
    """``kept_s``: the reference that keeps the ordered preference lists (None: the
    workload has none, and it is the reference); ``blind_s`` and ``blind_kept_s``: the
    same two with costs unknown (None: not computed)."""

    workload: str
    lp_bound_s: float
    reference_s: float
    seconds: float
    kept_s: float | None = None
    blind_s: float | None = None
    blind_kept_s: float | None = None
    #: the reference's calls per model per window (``calls_per_window``)
    windows: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """When a run's quota change and arrivals happened, in seconds from time 0 (its first
    call's bucket). ``seen_s``: when the benchmark saw the first call (arrivals count from
    it); ``change_s``: when the router was told of the quota change (its stamp less
    ``CUT_GRACE_S``), or None for the nominal time."""

    seen_s: float = 0.0
    change_s: float | None = None


NOMINAL = Timing()


def timing_of(raw: dict[str, Any], first_call_s: float) -> Timing:
    """The times of a recorded run (``raw``: its raw record; ``first_call_s``: its time 0 on
    the record's clock, the ``first_call_s`` of its metrics)."""
    seen = next((e["at"] for e in raw.get("events", ()) if e["event"] == "first_call_seen"),
                first_call_s)
    change = next((e["at"] for e in raw.get("events", ()) if e["event"] == "quota_change"),
                  None)
    return Timing(seen_s=max(0.0, seen - first_call_s),
                  change_s=None if change is None else change - first_call_s - CUT_GRACE_S)


def relevant(timing: Timing, workload: Workload) -> Timing:
    """``timing`` with only what ``workload`` has (arrivals, a change): runs of a workload
    without either share one yardstick."""
    return Timing(seen_s=timing.seen_s if workload.arrivals else 0.0,
                  change_s=timing.change_s if workload.quota_change else None)


def instance_of(workload: Workload, profile: SimulatorProfile,
                timing: Timing = NOMINAL) -> Instance:
    """The scheduling instance the benchmark makes of ``workload`` on ``profile``, with the
    quota change and arrivals at ``timing``'s times (default: the nominal ones), and each
    task's allowed models as an ordered preference (the drain admits with ``ordered=True``)."""
    tasks = workload.tasks
    window = profile.scaled_window_s
    arrivals: list[float] = [0.0] * len(workload.initial)
    for arrival in workload.arrivals:
        arrivals.extend([timing.seen_s + arrival.at_windows * window] * len(arrival.tasks))
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
        if timing.change_s is not None:
            change_at = timing.change_s
    return instance_from_profile(
        profile, [t.prompt for t in tasks], [t.allowed_models for t in tasks],
        arrivals_s=arrivals if workload.arrivals else (), limits_after=limits_after,
        change_at_s=change_at, ordered=True)


def measure(name: str, seed: int, time_scale: float, timing: Timing = NOMINAL) -> Yardstick:
    """LP bound and reference makespans of workload ``name`` (seconds from the first call):
    the reference also with the preferences kept if the workload has ordered lists, and
    both with costs unknown (planned by the LP of the expected instance)."""
    import time

    started = time.monotonic()
    profile = SimulatorProfile.default(time_scale=time_scale, seed=seed)
    instance = instance_of(build(name, seed, [m.name for m in profile.models]), profile,
                           timing)
    bound = lp_bound(instance)
    reference = reference_schedule(instance, bound.plan)
    kept = reference_schedule(instance, bound.plan, ordered=True) if instance.ordered else None
    plan = lp_bound(instance.as_expected()).plan
    blind = blind_reference_schedule(instance, plan)
    blind_kept = blind_reference_schedule(instance, plan, ordered=True) \
        if instance.ordered else None
    return Yardstick(name, bound.makespan_s, reference.makespan_s, time.monotonic() - started,
                     None if kept is None else kept.makespan_s, blind.makespan_s,
                     None if blind_kept is None else blind_kept.makespan_s,
                     calls_per_window(reference.sends, profile.scaled_window_s))


def calls_per_window(sends: Sequence[tuple[str, float]], window_s: float
                     ) -> dict[str, tuple[int, ...]]:
    """Each model's calls in each window ``[k W, (k+1) W)`` from time 0, out to the last
    window any model sends in (the models in the order of their first send)."""
    windows = 1 + max((int(t // window_s) for _, t in sends), default=-1)
    counts: dict[str, list[int]] = {}
    for model, t in sends:
        counts.setdefault(model, [0] * windows)[int(t // window_s)] += 1
    return {m: tuple(v) for m, v in counts.items()}


def windows_table(run: Mapping[str, Sequence[int]], reference: Mapping[str, Sequence[int]]
                  ) -> str:
    """A run's calls per model per window (its hedges included) next to the reference's,
    as "run (reference)" cells, with the totals per window; models by the reference's
    calls, most first."""
    windows = max((len(v) for v in (*run.values(), *reference.values())), default=0)

    def at(counts: Sequence[int], k: int) -> int:
        return counts[k] if k < len(counts) else 0

    models = sorted(set(run) | set(reference),
                    key=lambda m: (-sum(reference.get(m, ())), -sum(run.get(m, ())), m))
    head = "| model | " + " | ".join(f"window {k + 1}" for k in range(windows)) + " |"
    lines = [head, "|---|" + "---|" * windows]
    for m in models:
        cells = [f"{at(run.get(m, ()), k)} ({at(reference.get(m, ()), k)})"
                 for k in range(windows)]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    totals = [f"{sum(at(v, k) for v in run.values())} "
              f"({sum(at(v, k) for v in reference.values())})" for k in range(windows)]
    lines.append("| all | " + " | ".join(totals) + " |")
    return "\n".join(lines)


def _share(yardstick_s: float, made_s: float, finished: bool) -> str:
    """The run's speed as a share of a schedule taking ``yardstick_s`` (cut: unfinished)."""
    share = speed_share(yardstick_s, made_s, finished)
    return "cut" if share is None else f"{share:.0%}"


def _cell(yardstick_s: float | None, made_s: float, finished: bool) -> str:
    """A yardstick's makespan and the run's share of its speed (-: none)."""
    return "-" if yardstick_s is None else \
        f"{yardstick_s:.1f} ({_share(yardstick_s, made_s, finished)})"


def _table(runs: Sequence[dict[str, Any]], sticks: Sequence[Yardstick]) -> str:
    lines = ["| workload | LP bound s | reference s | design | makespan s | % of reference "
             "speed | % of LP bound speed | reference, preferences kept s (% speed) | "
             "reference, costs unknown s (% speed) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r, y in zip(runs, sticks, strict=True):
        made = r.get("makespan_s") or 0.0
        finished = r.get("solved") == r.get("tasks")
        flag = " **faster than the LP bound: the bound is wrong**" \
            if finished and 0 < made < y.lp_bound_s else ""
        blind = _cell(y.blind_s, made, finished)
        if y.blind_kept_s is not None:
            blind += f"; preferences kept {_cell(y.blind_kept_s, made, finished)}"
        lines.append(f"| {r['workload']} | {y.lp_bound_s:.1f} | {y.reference_s:.1f} | "
                     f"{r['design']} | {made:.1f} | {_share(y.reference_s, made, finished)} | "
                     f"{_share(y.lp_bound_s, made, finished)}{flag} | "
                     f"{_cell(y.kept_s, made, finished)} | {blind} |")
    return "\n".join(lines)


def direct_runs(record: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Timing]]:
    """The runs of a ``bench.direct`` record (its ``runs.json``) as rows of the table, and
    each one's timing: its quota change when the router was told, the stamp it recorded
    (``change_s``: when the provider's limits had been lowered, from the start of the
    first call's bucket, so never earlier than it was) less ``CUT_GRACE_S``; its arrivals
    at their nominal time from the first call, the earliest they can have happened. A run
    without a change stamp (recorded before there was one) is measured at the nominal
    change. The placement is rounded up to a tenth of a second (later, so never in the
    run's favour), so runs of a series share a yardstick (its LP takes minutes)."""
    workload = record.get("workload")
    if not workload:
        return [], []
    design = "router (bench.direct" + (", warm)" if "--warm" in record["command"] else ")")
    rows, timings = [], []
    for run in record["runs"]:
        counts = run["counts"]
        rows.append({"workload": workload, "design": design, "makespan_s": run["makespan_s"],
                     "solved": counts["solved"], "tasks": sum(counts.values()),
                     "time_scale": record["time_scale"],
                     "calls_per_window": run.get("calls_per_window") or {}})
        change = next((e["change_s"] for e in run.get("fired") or ()
                       if e.get("event") == "quota_change" and "change_s" in e), None)
        timings.append(Timing(change_s=None if change is None else
                              math.ceil(round((change - CUT_GRACE_S) * 10, 6)) / 10))
    return rows, timings


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.e2e.yardstick", description=__doc__)
    p.add_argument("results", type=Path,
                   help="a bench/out/<stamp> directory (of bench.e2e or bench.direct)")
    p.add_argument("--seed", type=int, default=1, help="the runs' seed (default 1)")
    args = p.parse_args(argv)
    metrics = args.results / "metrics.json"
    direct = args.results / "runs.json"
    if metrics.is_file():
        runs = json.loads(metrics.read_text())
        timings = []
        for r in runs:
            raw_path = args.results / f"{r['workload']}-{r['design']}.raw.json.gz"
            timings.append(timing_of(read_raw(raw_path), r["first_call_s"])
                           if raw_path.is_file() else NOMINAL)
    elif direct.is_file():
        runs, timings = direct_runs(json.loads(direct.read_text()))
        if not runs:
            print(f"error: {direct} names no workload (written before bench.direct recorded "
                  "it); run python -m bench.direct again", file=sys.stderr)
            return 2
    else:
        print(f"error: {args.results} holds neither metrics.json nor runs.json; give a "
              "directory written by python -m bench.e2e or python -m bench.direct",
              file=sys.stderr)
        return 2
    sticks: list[Yardstick] = []
    done: dict[tuple[str, float, Timing], Yardstick] = {}
    for r, timing in zip(runs, timings, strict=True):
        timing = relevant(timing, build(r["workload"], args.seed, MODELS))
        key = (r["workload"], r["time_scale"], timing)
        if key not in done:
            done[key] = y = measure(r["workload"], args.seed, r["time_scale"], timing)
            change = "" if timing.change_s is None else f", change at {timing.change_s:.2f} s"
            kept = "" if y.kept_s is None else \
                f", reference with preferences kept {y.kept_s:.1f} s"
            if y.blind_s is not None:
                kept += f", reference with costs unknown {y.blind_s:.1f} s"
            if y.blind_kept_s is not None:
                kept += f" ({y.blind_kept_s:.1f} s with preferences kept)"
            print(f"{r['workload']} ({r['design']}{change}): LP bound {y.lp_bound_s:.1f} s, "
                  f"reference {y.reference_s:.1f} s{kept} ({y.seconds:.0f} s to compute)",
                  flush=True)
        sticks.append(done[key])
    print(_table(runs, sticks))
    for k, (r, y) in enumerate(zip(runs, sticks, strict=True)):
        if r.get("calls_per_window") and y.windows:
            print(f"\n{r['workload']}, run {k + 1} ({r['makespan_s']:.2f} s): calls per window, "
                  "the run's (the reference's)")
            print(windows_table(r["calls_per_window"], y.windows))
    return 0


if __name__ == "__main__":
    sys.exit(interruptible(main))  # Ctrl-C or SIGTERM: its services stopped
