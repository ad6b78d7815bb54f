"""From a run's raw record to its figures: makespan, throughput against the bound, 429s,
peak windows against targets, time to answer, the W3/W4 judgements and the bottlenecks.

``analyse`` is a pure function of the raw record (the workload and the bound are rebuilt
from its name, seed and time scale); ``analyse_dir`` does it for every run saved in a
directory and writes ``metrics.json``, the plots and, if asked, the docs.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.e2e import bottlenecks, start_path
from bench.e2e.bound import PhasedBound, halved, phased_bound, release_bound
from bench.e2e.metrics import (
    follow_change,
    last_arrival_s,
    percentile,
    target_ratios,
    time_to_answer,
)
from bench.e2e.workloads import Workload, build
from llm_router_devkit.claim_log import first_claim_epoch
from llm_router_devkit.demo.fluid_bound import capacities
from llm_router_devkit.product_path import first_arrival_s, timed
from llm_router_devkit.simulator import SimulatorProfile

__all__ = ["analyse", "analyse_dir"]

#: The drain DAG's default ``max_in_flight`` per solver (the benchmark does not change it).
ROUTER_MAX_IN_FLIGHT = 100


def _events(raw: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in raw["events"] if e["event"] == kind]


def workload_bound(raw: Mapping[str, Any], workload: Workload, capacity: Mapping[str, Any],
                   first_call: float) -> PhasedBound:
    """The bound for this run's workload, with its events at the times they happened."""
    groups = Counter(t.allowed_models for t in workload.tasks)
    changes = _events(raw, "quota_change")
    if workload.quota_change is not None and changes:
        model = changes[0]["model"]
        after = dict(capacity)
        after[model] = halved(capacity[model], workload.quota_change.factor)
        return phased_bound(groups, capacity, after, changes[0]["at"] - first_call)
    if workload.arrivals:
        arrivals = _events(raw, "arrival")
        releases = [(0.0, len(workload.initial))]
        releases += [(max(0.0, e["at"] - first_call), e["tasks"]) for e in arrivals]
        missing = workload.size - sum(n for _, n in releases)  # cut short before arriving
        return release_bound(releases if not missing else [(0.0, workload.size)], capacity)
    return phased_bound(groups, capacity)


def as_is_routing_bound(workload: Workload, capacity: Mapping[str, Any]) -> dict[str, Any]:
    """The least makespan the as-is design's fixed routing allows, however well it ran:
    each task goes to one model (its first allowed one, else ``models[id % 10]``, ids from
    1 in enqueue order, as ``example_dags/as_is_baseline.py`` picks), so the model with the
    most work for its capacity sets ``max_m n_m / R_m``."""
    models = list(capacity)
    counts = Counter(t.allowed_models[0] if t.allowed_models else models[i % len(models)]
                     for i, t in enumerate(workload.tasks, start=1))
    times = {m: counts[m] / capacity[m].rate for m in counts}
    worst = max(times, key=times.__getitem__)
    return {"makespan_s": times[worst], "model": worst, "tasks": counts[worst]}


def _peaks(stats: Mapping[str, Any], changes: list[dict[str, Any]]) -> dict[str, Any]:
    """Busiest windows over targets. A lowered model is held to its original target here
    (``/stats`` peaks span the whole run); the new one is judged by :func:`_w3`."""
    models = {m: dict(s) for m, s in stats["models"].items()}
    for change in changes:
        models[change["model"]]["limits"] = change["before"]
    per_model = {m: {"accepted": target_ratios(s), "offered": target_ratios(s, offered=True)}
                 for m, s in models.items()}

    def worst(kind: str) -> float:
        return max((max(v[kind].values(), default=0.0) for v in per_model.values()),
                   default=0.0)

    return {"models": per_model, "max_accepted": worst("accepted"),
            "max_offered": worst("offered")}


def _latency(rows: list[dict[str, Any]], priority: str | None = None) -> dict[str, Any]:
    times = time_to_answer(rows, priority)
    return {"n": len(times), "p50_s": percentile(times, 50), "p95_s": percentile(times, 95)}


def _w3(raw: Mapping[str, Any], end_s: float) -> dict[str, Any] | None:
    changes = _events(raw, "quota_change")
    if not changes:
        return None
    change = changes[0]
    timeline = raw["backend"]["timeline"]
    bucket = float(timeline["bucket_s"])
    k = round(raw["window_s"] / bucket)
    follow = follow_change(timeline["models"][change["model"]], bucket, k, change["at"],
                           end_s, change["limits"])
    return {"model": change["model"], "at_s": change["at"], "new_limits": change["limits"],
            **follow.__dict__}


def _w4(raw: Mapping[str, Any], reset: float) -> dict[str, Any] | None:
    rows = raw["rows"]
    if not any(r["priority"] == "hot" for r in rows):
        return None
    bulk_done = [r["solved"] for r in rows if r["priority"] == "bulk" and r["solved"]]
    hot_created = [r["created"] for r in rows if r["priority"] == "hot"]
    hot = _latency(rows, "hot")
    return {"hot": hot, "hot_p95_windows": (hot["p95_s"] or 0.0) / raw["window_s"],
            "hot_unsolved": sum(1 for r in rows if r["priority"] == "hot" and not r["solved"]),
            "last_hot_arrival_s": max(hot_created) - reset,
            "bulk_last_answer_s": (max(bulk_done) - reset) if bulk_done else None,
            "bulk_left_at_end": sum(1 for r in rows if r["priority"] == "bulk"
                                    and not r["solved"])}


def analyse(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Every figure of one run (see the module docstring)."""
    profile = SimulatorProfile.default(time_scale=raw["time_scale"], seed=raw["seed"])
    workload = build(raw["workload"], raw["seed"], [m.name for m in profile.models])
    capacity = capacities(profile, [t.prompt for t in workload.tasks])
    timeline, stats = raw["backend"]["timeline"], raw["backend"]["stats"]
    reset, rows = raw["reset_epoch"], raw["rows"]
    first_call = first_arrival_s(timeline) or 0.0
    trigger = _events(raw, "trigger")[0]["at"]
    solved = [r["solved"] for r in rows if r["solved"] is not None]
    finished = len(solved) == raw["tasks"]
    last_answer = (max(solved) - reset) if solved else first_call
    end = last_answer if finished else raw["ended_s"]
    first_claim = first_claim_epoch(raw.get("claims", []))
    # the product path: from the DAG run's start, and from the first claim
    times = timed(end, first_call=first_call, run_start=_run_start_s(raw),
                  first_claim=None if first_claim is None else first_claim - reset)
    elapsed = times.from_first_call_s
    bound = workload_bound(raw, workload, capacity, first_call)
    throughput = len(solved) / elapsed if elapsed > 0 else 0.0
    bound_throughput = raw["tasks"] / bound.makespan_s
    k = round(raw["window_s"] / float(timeline["bucket_s"]))
    worker = ("solve_batch",) if raw["design"] == "as-is" else ("lead", "solve")
    runs = bottlenecks.restarts(raw["airflow"], timeline, reset, worker)
    exact_first = stats.get("first_arrival_s")
    path = start_path.steps(raw, first_call if exact_first is None else float(exact_first))
    out: dict[str, Any] = {
        "workload": raw["workload"], "design": raw["design"], "tasks": raw["tasks"],
        "solved": len(solved), "finished": finished, "outcome": raw["outcome"],
        "window_s": raw["window_s"], "time_scale": raw["time_scale"],
        "first_call_s": first_call, "trigger_s": trigger, "last_answer_s": last_answer,
        "makespan_s": elapsed, "end_to_end_s": end - trigger,
        "start_path": path,
        "from_run_start_s": times.from_run_start_s,
        "from_first_claim_s": times.from_first_claim_s,
        "throughput_per_s": throughput,
        "of_bound": throughput / bound_throughput,
        "extrapolated_makespan_s": None if finished or not throughput
        else raw["tasks"] / throughput,
        "bound": {"makespan_s": bound.makespan_s, "fluid_s": bound.fluid_s,
                  "latency_s": bound.latency_s,
                  "binding": ["any" if g is None else "/".join(g) for g in bound.binding],
                  "rates": {m: c.rate for m, c in capacity.items()},
                  "binds": {m: c.binds for m, c in capacity.items()}},
        "rejected_429": stats["totals"]["rejected_429"],
        "requests": stats["totals"]["requests"],
        "peaks": _peaks(stats, _events(raw, "quota_change")),
        "latency": _latency(rows), "dag_runs": runs,
        # Little's law: answered calls' summed latency over the makespan.
        "mean_calls_in_flight": sum(r["latency_s"] or 0.0 for r in rows if r["solved"])
        / max(elapsed, 1e-9),
        "fan_out": bottlenecks.fan_out(timeline, {m: c.rate for m, c in capacity.items()}, k,
                                       first_call, last_answer),
        "tail": bottlenecks.tail(rows, reset),
        "answered_by_s": bottlenecks.milestones(rows, reset + first_call, raw["tasks"]),
        "last_call_s": (last_arrival_s(timeline) or first_call) - first_call,
        # per window from the first call, as the yardstick prints the reference's
        "calls_per_window": bottlenecks.calls_per_window(timeline, first_call, k),
        "w3": _w3(raw, last_answer), "w4": _w4(raw, reset),
        "provenance": raw["provenance"], "load_average": raw.get("load_average"),
    }
    if raw["design"] == "as-is":
        out["batch_tails"] = bottlenecks.batch_tails(rows)
        out["routing_bound"] = as_is_routing_bound(workload, capacity)
    else:
        solvers = max((r["workers"] for r in runs), default=0)
        out["in_flight"] = {
            "solvers": solvers, "cap": solvers * ROUTER_MAX_IN_FLIGHT,
            "needed": sum(c.rate * c.mean_latency_s for c in capacity.values()),
            "peak_at_backend": sum(s["peak_concurrency"] for s in stats["models"].values())}
    return out


def _run_start_s(raw: Mapping[str, Any]) -> float | None:
    """The first DAG run's start (its ``queued_at``) on the simulator's clock."""
    queued = [r["queued"] for r in raw["airflow"]["runs"] if r["queued"] is not None]
    return min(queued) - raw["reset_epoch"] if queued else None


def read_raw(path: Path) -> dict[str, Any]:
    """A raw run record, ``.raw.json`` or gzipped ``.raw.json.gz``."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            return dict(json.load(f))
    return dict(json.loads(path.read_text()))


def analyse_dir(out: Path, docs: bool = False) -> list[dict[str, Any]]:
    """Analyse every ``*.raw.json[.gz]`` in ``out``; write metrics, plots and (if ``docs``) the
    docs. Returns the metrics."""
    from bench.e2e import plots, report

    results = []
    raws = {}
    for path in sorted(out.glob("*.raw.json*")):
        raw = read_raw(path)
        metrics = analyse(raw)
        raws[(raw["workload"], raw["design"])] = raw
        results.append(metrics)
    (out / "metrics.json").write_text(json.dumps(results, indent=1, default=str))
    if plots.available():
        images = plots.write_all(raws, results, out)
    elif docs:
        print("error: --docs draws plots: install matplotlib (pip install -e "
              f"'devkit[bench]'), then re-run with --analyse {out}", file=sys.stderr)
        raise SystemExit(2)
    else:
        images = {}
        print("plots: skipped (matplotlib not installed: pip install -e 'devkit[bench]')")
    print(report.summary_table(results))
    if docs:
        report.write_docs(results, images, out)
    return results
