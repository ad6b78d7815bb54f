"""Where the time from the DAG run's start to the first call goes, step by step.

The steps are read from records with their own clocks, all epoch seconds: Airflow's
metadata database (the run queued and started, each task instance queued and started), a
claim log in the task store's schema (below) and the simulator's timeline (the first call
the backend received, to its bucket of a hundredth of a window).

The claim log is the harness's, not the product's (:mod:`llm_router_devkit.claim_log`,
which the demo installs too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_router_devkit.claim_log import first_claim_epoch

__all__ = ["STEPS", "steps"]

#: The steps of the start path, in order, each timed from the DAG run's start. (A task
#: instance's ``queued_dttm`` is its last queueing: a deferred task's resumption
#: overwrites it, so the lead's is not a step.)
STEPS = ("run started", "lead started", "first claim", "first call")


def steps(raw: Mapping[str, Any], first_call_s: float) -> dict[str, float | None]:
    """Seconds from the first DAG run's start (its ``queued_at``: when Airflow has the run,
    as an asset event or a trigger creates it) to each of :data:`STEPS`; None where a
    record is missing. ``first_call_s`` is on the simulator's clock (seconds after the
    reset at ``raw["reset_epoch"]``)."""
    airflow = raw["airflow"]
    runs = [r for r in airflow["runs"] if r["queued"] is not None]
    if not runs:
        return dict.fromkeys(STEPS)
    run = runs[0]
    start = run["queued"]

    def since(epoch: float | None) -> float | None:
        return None if epoch is None else epoch - start

    lead = [t for t in airflow["task_instances"]
            if t["run_id"] == run["run_id"] and t["task_id"] == "lead"]
    return {
        "run started": since(run["start"]),
        "lead started": since(lead[0]["start"]) if lead else None,
        "first claim": since(first_claim_epoch(raw.get("claims", []))),
        "first call": since(raw["reset_epoch"] + first_call_s),
    }
