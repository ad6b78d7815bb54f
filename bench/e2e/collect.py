"""What a run leaves behind, read once it is over: the backend's counts, the task store's
rows and Airflow's own records of its runs and task instances.

Times are seconds on one clock: the simulator's timeline counts from its last ``/stats/reset``
(the harness notes the epoch of that reset), the databases' timestamps become epoch seconds.
Prompts are not kept: each solved row carries instead the latency the simulator drew for it
on the model that solved it (wall-clock seconds), which is all the batch-tail analysis needs.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from psycopg import sql

from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.workload import draw

__all__ = ["airflow_records", "backend_records", "store_rows"]

#: Timeline buckets per window: fine enough that a sliding window summed over whole
#: buckets is within 1 % of the exact one.
BUCKETS_PER_WINDOW = 100


def backend_records(url: str, profile: SimulatorProfile) -> dict[str, Any]:
    """``/stats``, ``/timeline`` in buckets of a hundredth of a window, and ``/limits``."""
    bucket = profile.scaled_window_s / BUCKETS_PER_WINDOW
    with httpx.Client(base_url=url, timeout=60) as http:
        stats = http.get("/stats").json()
        timeline = http.get("/timeline", params={"bucket_s": bucket}).json()
        limits = http.get("/limits").json()
    return {"stats": stats, "timeline": timeline, "limits": limits}


def store_rows(dsn: str, schema: str, profile: SimulatorProfile) -> list[dict[str, Any]]:
    """One dict per task: id, kind, priority, status, model, attempts, created, solved
    (epoch s) and ``latency_s``, the simulator's drawn latency on the solving model."""
    query = sql.SQL(
        "SELECT id, kind, priority, status, model, attempts, prompt, "
        "extract(epoch FROM created_at), extract(epoch FROM solved_at) "
        "FROM {} ORDER BY id").format(sql.Identifier(schema, "tasks"))
    models = {m.name: m for m in profile.models}
    scale = profile.slowdown / profile.time_scale
    out = []
    with psycopg.connect(dsn) as conn:
        for tid, kind, prio, status, model, attempts, prompt, created, solved in conn.execute(
                query):
            spec = models.get(model) if model else None
            latency = draw(profile, spec, prompt).latency_s * scale if spec else None
            out.append({"id": int(tid), "kind": kind, "priority": prio, "status": status,
                        "model": model, "attempts": int(attempts),
                        "created": float(created),
                        "solved": float(solved) if solved is not None else None,
                        "latency_s": latency})
    return out


def _epoch(column: str) -> sql.Composable:
    return sql.SQL("extract(epoch FROM {})").format(sql.Identifier(column))


def airflow_records(dsn: str, dag_id: str) -> dict[str, Any]:
    """The DAG's runs and task instances from the metadata database (epoch seconds)."""
    runs_q = sql.SQL("SELECT run_id, state, {}, {}, {} FROM dag_run WHERE dag_id = %s "
                     "ORDER BY queued_at").format(
        _epoch("queued_at"), _epoch("start_date"), _epoch("end_date"))
    tis_q = sql.SQL("SELECT run_id, task_id, map_index, state, try_number, {}, {}, {} "
                    "FROM task_instance WHERE dag_id = %s ORDER BY start_date").format(
        _epoch("queued_dttm"), _epoch("start_date"), _epoch("end_date"))

    def num(value: Any) -> float | None:
        return float(value) if value is not None else None

    with psycopg.connect(dsn) as conn:
        runs = [{"run_id": r[0], "state": r[1], "queued": num(r[2]), "start": num(r[3]),
                 "end": num(r[4])} for r in conn.execute(runs_q, (dag_id,))]
        tis = [{"run_id": r[0], "task_id": r[1], "map_index": int(r[2]), "state": r[3],
                "try_number": int(r[4]), "queued": num(r[5]), "start": num(r[6]),
                "end": num(r[7])} for r in conn.execute(tis_q, (dag_id,))]
    return {"runs": runs, "task_instances": tis}
