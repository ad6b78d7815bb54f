"""Where a design's time goes, from one run's own records (pure functions).

- **Batch tails**: the as-is design writes the answers of one ``/batch`` call in one UPDATE,
  so rows solved at the same instant are one call's solved items; the call lasted as long as
  its slowest item (the simulator's drawn latency of each item is known), and every other
  item's slot waited for it.
- **Fan-out mismatch**: which share of the calls each model was offered against its share
  of the capacity, and per window which models idled while others were refused.
- **Restarts and cold start**: from Airflow's records, per DAG run, the time from the run
  being queued to its first call at the backend, and how busy the mapped workers were.
- **Tail**: who answered last, and how long the last 5 % took.
- **Calls per window**: each model's calls (hedges and calls that lost a hedge's race
  included) in each window from the first call, as the yardstick's reference counts its
  own: with W1's windows full on the fast models, what the second window has to carry
  decides how long the run's tail is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean
from typing import Any

from bench.e2e.metrics import tumbling
from llm_router_devkit.product_path import first_arrival_s

__all__ = ["batch_tails", "calls_per_window", "fan_out", "milestones", "restarts", "tail"]

#: Below this share of its capacity in a window a model counts as idle.
IDLE_UTIL = 0.10


def batch_tails(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Batches rebuilt from rows solved at one same instant (the as-is write-back).

    ``slot_idle_share``: of the item-seconds the batch calls held, the share in which an item
    was already done and waited for the slowest (``sum(max - latency) / sum(n * max)``);
    ``wait_s``: the summed time calls lasted beyond their items' mean latency.
    """
    batches: dict[float, list[float]] = defaultdict(list)
    for r in rows:
        if r["solved"] is not None and r["latency_s"] is not None:
            batches[r["solved"]].append(float(r["latency_s"]))
    if not batches:
        return {"batches": 0, "items": 0, "slot_idle_share": 0.0, "wait_s": 0.0,
                "mean_call_s": 0.0, "mean_item_s": 0.0}
    held = sum(len(v) * max(v) for v in batches.values())
    idle = sum(max(v) - x for v in batches.values() for x in v)
    return {
        "batches": len(batches),
        "items": sum(len(v) for v in batches.values()),
        "slot_idle_share": idle / held if held else 0.0,
        "wait_s": sum(max(v) - fmean(v) for v in batches.values()),
        "mean_call_s": fmean(max(v) for v in batches.values()),
        "mean_item_s": fmean(x for v in batches.values() for x in v),
    }


def calls_per_window(timeline: Mapping[str, Any], start_s: float, k: int
                     ) -> dict[str, list[int]]:
    """Each model's calls accepted at the backend per window of ``k`` buckets from the
    bucket holding ``start_s`` (the run's first call: the yardstick's time 0), up to the
    last window any model called in; models that took none are left out."""
    bucket = float(timeline["bucket_s"])
    lo = int(round(start_s / bucket, 6))
    out = {m: [int(n) for n in tumbling(s["requests"], k, lo)]
           for m, s in timeline["models"].items() if any(s["requests"][lo:])}
    windows = max((i + 1 for v in out.values() for i, n in enumerate(v) if n), default=0)
    return {m: v[:windows] for m, v in out.items()}


def fan_out(timeline: Mapping[str, Any], rates: Mapping[str, float], k: int,
            start_s: float, end_s: float) -> dict[str, Any]:
    """Offered and accepted shares per model against its capacity share, and per window
    (``k`` buckets, from ``start_s`` to ``end_s``) which models idled or were refused.

    :param rates: R_m per model (calls per second).
    """
    bucket = float(timeline["bucket_s"])
    lo, hi = int(start_s / bucket), int(end_s / bucket) + 1
    total_rate = sum(rates.values())
    offered = {m: sum(s["requests"][lo:hi]) + sum(s["rejected"][lo:hi])
               for m, s in timeline["models"].items() if m in rates}
    all_offered = sum(offered.values()) or 1
    window_s = k * bucket
    models: dict[str, Any] = {}
    idle_by_window: list[set[str]] = []
    flooded_by_window: list[set[str]] = []
    for m, s in timeline["models"].items():
        if m not in rates:
            continue
        accepted = tumbling(s["requests"], k, lo, hi)
        rejected = tumbling(s["rejected"], k, lo, hi)
        full = rates[m] * window_s
        util = [a / full for a in accepted]
        for i, (u, r) in enumerate(zip(util, rejected, strict=True)):
            while len(idle_by_window) <= i:
                idle_by_window.append(set())
                flooded_by_window.append(set())
            if u < IDLE_UTIL:
                idle_by_window[i].add(m)
            if r > 0:
                flooded_by_window[i].add(m)
        models[m] = {
            "capacity_share": rates[m] / total_rate,
            "offered_share": offered[m] / all_offered,
            "utilisation": sum(accepted) / (rates[m] * max(end_s - start_s, 1e-9)),
            "idle_windows": sum(u < IDLE_UTIL for u in util) / max(len(util), 1),
            "flooded_windows": sum(r > 0 for r in rejected) / max(len(util), 1),
        }
    mismatch = [bool(i and f) for i, f in zip(idle_by_window, flooded_by_window, strict=True)]
    return {
        "models": models,
        "share_distance": 0.5 * sum(abs(v["offered_share"] - v["capacity_share"])
                                    for v in models.values()),
        "mismatch_windows": sum(mismatch) / max(len(mismatch), 1),
        "idle_model_windows": fmean(v["idle_windows"] for v in models.values())
        if models else 0.0,
    }


def restarts(airflow: Mapping[str, Any], timeline: Mapping[str, Any], reset_epoch: float,
             worker_task: str | tuple[str, ...]) -> list[dict[str, Any]]:
    """Per DAG run (seconds on the timeline's clock): queued, first worker start, first call
    at the backend after it was queued, end; ``cold_start_s`` = first call - queued; worker
    occupancy = the workers' summed run time / (workers x the run's worker span). The
    workers are the tasks ``worker_task`` names (one task id, or several)."""
    tasks = (worker_task,) if isinstance(worker_task, str) else worker_task
    out = []
    for run in airflow["runs"]:
        tis = [t for t in airflow["task_instances"]
               if t["run_id"] == run["run_id"] and t["task_id"] in tasks
               and t["start"] is not None]
        queued = run["queued"] - reset_epoch if run["queued"] else None
        first_call = first_arrival_s(timeline, queued or 0.0)
        end = (run["end"] - reset_epoch) if run["end"] else None
        entry: dict[str, Any] = {"run_id": run["run_id"], "state": run["state"],
                                 "queued_s": queued, "first_call_s": first_call, "end_s": end,
                                 "workers": len(tis),
                                 "failed_workers": sum(t["state"] == "failed" for t in tis)}
        if queued is not None and first_call is not None:
            entry["cold_start_s"] = first_call - queued
        spans = [(t["start"], t["end"]) for t in tis if t["end"] is not None]
        if spans:
            first, last = min(a for a, _ in spans), max(b for _, b in spans)
            entry["worker_start_spread_s"] = max(a for a, _ in spans) - first
            entry["worker_occupancy"] = (sum(b - a for a, b in spans)
                                         / (len(spans) * max(last - first, 1e-9)))
        out.append(entry)
    return out


def tail(rows: Sequence[Mapping[str, Any]], reset_epoch: float, share: float = 0.05
         ) -> dict[str, Any]:
    """The last ``share`` of answers: how long they took after the rest, and which models
    gave them (with their mean drawn latency)."""
    solved = sorted((r for r in rows if r["solved"] is not None), key=lambda r: r["solved"])
    if not solved:
        return {}
    cut = max(0, int(len(solved) * (1 - share)) - 1)
    last = solved[cut + 1:] or solved[-1:]
    by_model: dict[str, list[float]] = defaultdict(list)
    for r in last:
        by_model[str(r["model"])].append(float(r["latency_s"] or 0.0))
    return {
        "share": share,
        "from_s": solved[cut]["solved"] - reset_epoch,
        "to_s": solved[-1]["solved"] - reset_epoch,
        "tail_s": solved[-1]["solved"] - solved[cut]["solved"],
        "models": {m: {"answers": len(v), "mean_latency_s": fmean(v)}
                   for m, v in sorted(by_model.items(), key=lambda kv: -len(kv[1]))},
    }


def milestones(rows: Sequence[Mapping[str, Any]], origin: float, total: int,
               shares: Sequence[float] = (0.5, 0.9, 0.95, 0.99, 1.0)) -> dict[str, float]:
    """Seconds after ``origin`` (an epoch) at which each share of ``total`` tasks had been
    answered; shares not reached are left out."""
    times = sorted(r["solved"] - origin for r in rows if r["solved"] is not None)
    out = {}
    for share in shares:
        n = max(1, round(share * total))
        if n <= len(times):
            out[f"{share:.0%}"] = times[n - 1]
    return out
