"""Where the time from the DAG run's start to the first call goes, step by step.

The steps are read from records with their own clocks, all epoch seconds: Airflow's
metadata database (the run queued and started, each task instance queued and started), a
claim log in the task store's schema (below) and the simulator's timeline (the first call
the backend received, to its bucket of a hundredth of a window).

The claim log is the harness's, not the product's: a statement-level trigger on the
store's table that records, per claiming statement, when it ran, which solver made it and
how many tasks it took (rows going from ``pending`` to ``claimed``). One insert per claim
statement, not per row, so it costs the drain next to nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

__all__ = ["STEPS", "install_claim_log", "read_claim_log", "steps"]

#: The steps of the start path, in order, each timed from the DAG run's start. (A task
#: instance's ``queued_dttm`` is its last queueing: a deferred task's resumption
#: overwrites it, so the lead's is not a step.)
STEPS = ("run started", "lead started", "first claim", "first call")

_LOG = "bench_claim_log"


def install_claim_log(dsn: str, schema: str, table: str = "tasks") -> None:
    """Create the claim log and its trigger on ``schema.table`` (see the module docstring)."""
    ident = sql.Identifier
    statements = [
        sql.SQL("CREATE TABLE {} (at double precision NOT NULL, worker text, n int NOT NULL)"
                ).format(ident(schema, _LOG)),
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO {} SELECT extract(epoch FROM clock_timestamp()), n.claimed_by, "
            "count(*) FROM new_rows n JOIN old_rows o USING (id) "
            "WHERE o.status = 'pending' AND n.status = 'claimed' GROUP BY n.claimed_by; "
            "RETURN NULL; END $$").format(ident(schema, _LOG + "_fn"), ident(schema, _LOG)),
        sql.SQL("CREATE TRIGGER {} AFTER UPDATE ON {} REFERENCING OLD TABLE AS old_rows "
                "NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {}()").format(
            ident(_LOG + "_trg"), ident(schema, table), ident(schema, _LOG + "_fn")),
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def read_claim_log(dsn: str, schema: str) -> list[dict[str, Any]]:
    """Every claim statement: ``at`` (epoch s), ``worker`` (the solver), ``n`` (tasks)."""
    query = sql.SQL("SELECT at, worker, n FROM {} ORDER BY at").format(
        sql.Identifier(schema, _LOG))
    with psycopg.connect(dsn) as conn:
        return [{"at": float(at), "worker": worker, "n": int(n)}
                for at, worker, n in conn.execute(query)]


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
    claims = [c["at"] for c in raw.get("claims", [])]
    return {
        "run started": since(run["start"]),
        "lead started": since(lead[0]["start"]) if lead else None,
        "first claim": since(min(claims)) if claims else None,
        "first call": since(raw["reset_epoch"] + first_call_s),
    }
