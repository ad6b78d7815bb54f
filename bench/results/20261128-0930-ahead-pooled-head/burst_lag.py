"""When each window's burst went out, from a ``bench.direct`` run's ``calls_window_starts_3s``.

Prints, per run directory given, the makespan and, for flash-mini and flash, the time (s
from each window's start) by which half of the model's calls of that window's first 3 s
had been sent. A window whose calls run past its first 3 s reads low (the 3 s cut it).

    python bench/results/20261128-0930-ahead-pooled-head/burst_lag.py <run dir> ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BUCKET_S = 0.05  # bench.direct's FIRST_CALL_BUCKET_S


def half_sent_s(buckets: list[int]) -> float | None:
    """When half of ``buckets``' calls had been sent (s from their start), or None."""
    total, seen = sum(buckets), 0
    for k, n in enumerate(buckets):
        seen += n
        if total and seen >= total / 2:
            return round(k * BUCKET_S, 2)
    return None


def main(dirs: list[str]) -> int:
    for d in dirs:
        record = json.loads((Path(d) / "runs.json").read_text())
        for run in record["runs"]:
            lags = {m: [half_sent_s(w.get(m) or []) for w in run.get("calls_window_starts_3s", [])]
                    for m in ("flash-mini", "flash")}
            print(Path(d).name, run["makespan_s"], lags)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
