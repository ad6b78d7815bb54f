"""The benchmark's plots: per-model traffic against its targets, and answers over time
against the bound. The series are computed by pure functions (tested); matplotlib only draws.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.e2e.metrics import rolling

__all__ = ["progress_series", "traffic_series", "write_all"]

#: Points per window in the traffic plots (the timeline has 100 buckets per window).
POINTS_PER_WINDOW = 20


def _targets_at(limits: Mapping[str, Any], changes: list[dict[str, Any]], model: str,
                t: float) -> Mapping[str, Any]:
    for change in changes:
        if change["model"] == model and t >= change["at"]:
            return {**limits, **{k: v for k, v in change["limits"].items() if v}}
    return limits


def traffic_series(raw: Mapping[str, Any], model: str, first_call: float, end: float
                   ) -> dict[str, list[float]]:
    """One model's busiest-window usage over time, as % of the target in force at each
    window's end: ``t`` (s after the first call), ``rpm`` and ``tpm`` (accepted),
    ``offered`` (accepted + refused requests, % of rpm)."""
    timeline = raw["backend"]["timeline"]
    bucket = float(timeline["bucket_s"])
    k = round(raw["window_s"] / bucket)
    series = timeline["models"][model]
    base = raw["backend"]["limits"].get(model) or series["limits"]
    changes = [e for e in raw["events"] if e["event"] == "quota_change"]
    for change in changes:  # the limits read at the end are the lowered ones
        if change["model"] == model:
            base = change["before"]
    reqs, toks = rolling(series["requests"], k), rolling(series["tokens"], k)
    refused = rolling(series["rejected"], k)
    step = max(1, k // POINTS_PER_WINDOW)
    out: dict[str, list[float]] = {"t": [], "rpm": [], "tpm": [], "offered": []}
    for i in range(int(first_call / bucket), min(len(reqs), int(end / bucket) + 1), step):
        t = (i + 1) * bucket
        limits = _targets_at(base, changes, model, t)
        out["t"].append(t - first_call)
        out["rpm"].append(100 * reqs[i] / limits["rpm"] if limits.get("rpm") else 0.0)
        out["tpm"].append(100 * toks[i] / limits["tpm"] if limits.get("tpm") else 0.0)
        out["offered"].append(100 * (reqs[i] + refused[i]) / limits["rpm"]
                              if limits.get("rpm") else 0.0)
    return out


def progress_series(rows: list[Mapping[str, Any]], origin: float) -> tuple[list[float],
                                                                             list[int]]:
    """Answers so far over time (seconds after ``origin``, an epoch)."""
    times = sorted(r["solved"] - origin for r in rows if r["solved"] is not None)
    return times, list(range(1, len(times) + 1))


def available() -> bool:
    """Whether matplotlib can be imported (it is in the devkit's ``bench`` extra)."""
    return importlib.util.find_spec("matplotlib") is not None


def _traffic_plot(raw: Mapping[str, Any], metrics: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(raw["backend"]["timeline"]["models"])
    fig, axes = plt.subplots(5, 2, figsize=(9, 9), sharex=True, dpi=60)
    first, end = metrics["first_call_s"], metrics["first_call_s"] + metrics["makespan_s"]
    for ax, model in zip(axes.flat, models, strict=False):
        s = traffic_series(raw, model, first, end)
        ax.plot(s["t"], s["offered"], color="tab:red", lw=0.8, alpha=0.6, label="offered/rpm")
        ax.plot(s["t"], s["rpm"], color="tab:blue", lw=1.2, label="requests/rpm")
        ax.plot(s["t"], s["tpm"], color="tab:green", lw=1.0, label="tokens/tpm")
        ax.axhline(100, color="black", ls="--", lw=0.8)
        for e in raw["events"]:
            if e["event"] == "quota_change" and e["model"] == model:
                ax.axvline(e["at"] - first, color="grey", ls=":", lw=1)
        ax.set_title(model, fontsize=9)
        ax.set_ylim(0, max(120, min(400, max(s["offered"] + [0]) * 1.1)))
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7, loc="upper right")
    for ax in axes[-1]:
        ax.set_xlabel("s after the first call", fontsize=8)
    fig.suptitle(f"{raw['workload']} / {raw['design']}: busiest sliding window "
                 f"({raw['window_s']:g} s) as % of the target in force (dashed = 100 %)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, pil_kwargs={"optimize": True})
    plt.close(fig)


def _progress_plot(workload: str, raws: Mapping[str, Mapping[str, Any]],
                   metrics: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=60)
    bound = None
    for design, raw in raws.items():
        m = metrics[design]
        t, n = progress_series(raw["rows"], raw["reset_epoch"] + m["first_call_s"])
        ax.plot(t, n, label=f"{design} ({m['solved']}/{m['tasks']})")
        bound = m["bound"]["makespan_s"], m["tasks"]
    if bound:
        ax.plot([0, bound[0]], [0, bound[1]], "k--", lw=1, label="capacity bound")
    ax.set_xlabel("s after the design's first call at the backend")
    ax.set_ylabel("tasks answered")
    ax.set_title(f"{workload}: answers over time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, pil_kwargs={"optimize": True})
    plt.close(fig)


def write_all(raws: Mapping[tuple[str, str], Mapping[str, Any]],
              results: Sequence[Mapping[str, Any]], out: Path) -> dict[str, Path]:
    """Every plot of the runs in ``out``; name -> path."""
    by_key = {(m["workload"], m["design"]): m for m in results}
    images: dict[str, Path] = {}
    for (workload, design), raw in sorted(raws.items()):
        path = out / f"{workload}-{design}-traffic.png"
        _traffic_plot(raw, by_key[(workload, design)], path)
        images[path.stem] = path
    for workload in sorted({w for w, _ in raws}):
        designs = {d: r for (w, d), r in raws.items() if w == workload}
        path = out / f"{workload}-progress.png"
        _progress_plot(workload, designs, {d: by_key[(workload, d)] for d in designs}, path)
        images[path.stem] = path
    return images
