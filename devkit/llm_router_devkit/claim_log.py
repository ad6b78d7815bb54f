"""A claim log on a task store's table: when each claim took tasks, by which solver.

The log is the harness's, not the product's (the benchmark and the demo install it to time
a run from its first claim): a statement-level trigger on the store's table that records,
per claiming statement, when it ran, which solver made it and how many tasks it took (rows
going from ``pending`` to ``claimed``). One insert per claim statement, not per row, so it
costs the drain next to nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

__all__ = ["first_claim_epoch", "install_claim_log", "read_claim_log"]

_LOG = "harness_claim_log"


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


def first_claim_epoch(claims: list[dict[str, Any]]) -> float | None:
    """When the first tasks were claimed (epoch s), from :func:`read_claim_log`'s rows;
    None if no task was."""
    return min((c["at"] for c in claims), default=None)
