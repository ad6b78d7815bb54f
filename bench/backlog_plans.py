"""The task store's hot statements under ``EXPLAIN (ANALYZE, BUFFERS)``, for bench.backlog.

Each statement the claim cycle, a drain or the backlog page runs is explained with the
parameters it runs with, inside a transaction that is rolled back (an explained UPDATE
still writes). What each plan reports: the scans it uses on the tasks table (a ``Seq Scan``
there is a statement whose cost grows with the table), its execution time and the buffers
it touched (shared hit + read: how much of the table and its indexes it had to visit).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from airflow_llm_router.solver.upkeep import BACKLOG_REPORT_CAP
from airflow_llm_router.store import TaskStore
from airflow_llm_router.store.backlog_queries import BacklogQueries
from airflow_llm_router.store.backlog_records import COUNT_CAP, THROUGHPUT_WINDOW_S
from airflow_llm_router.store.queries import RECLAIM_BATCH

__all__ = ["explain_hot_queries"]


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _summary(name: str, doc: dict[str, Any], table: str) -> dict[str, Any]:
    plan = doc["Plan"]
    scans = sorted({f"{n['Node Type']}" + (f" {n['Index Name']}" if "Index Name" in n else "")
                    for n in _nodes(plan) if n.get("Relation Name") == table
                    or str(n.get("Index Name", "")).startswith(f"{table}_")})
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    return {"query": name, "scans": scans,
            "seq_scan": any(s.startswith("Seq Scan") for s in scans),
            "ms": round(float(doc.get("Execution Time", 0.0)), 3), "buffers": int(buffers)}


def _explain(conn: psycopg.Connection[Any], query: sql.Composable,
             params: Any) -> dict[str, Any]:
    prefix = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ")
    row = conn.execute(prefix + query, params).fetchone()
    assert row is not None
    return dict(row[0][0])


def explain_hot_queries(store: TaskStore, dsn: str, batch: int) -> list[dict[str, Any]]:
    """Explain every hot statement once on the store's table as it is now (some tasks are
    claimed first, and a few dead-lettered, so each statement has rows to find)."""
    names = store.connection.names
    q, bq = store.connection.queries, BacklogQueries.build(names)
    claimed = store.claim(batch, worker_id="bench-explain", claim_ttl_s=600)
    if claimed[:3]:
        store.fail_many([{"task_id": t.id, "claim_token": t.claim_token, "error": "bench",
                          "retryable": False} for t in claimed[:3]])
    live = claimed[3:]
    ids = [t.id for t in live]
    tokens = [t.claim_token for t in live]
    dead = {"kind": None, "model": None, "error": None}
    statements: list[tuple[str, sql.Composable, Any]] = [
        ("claim", q.claim, {"n": batch, "worker_id": "bench-explain", "ttl": 300.0}),
        ("complete_many", q.complete, (ids, tokens, ["answer"] * len(ids), ["m0"] * len(ids),
                                       [10] * len(ids), [20] * len(ids))),
        ("fail_many", q.fail, (ids, tokens, ["e"] * len(ids), [True] * len(ids),
                               ["m0"] * len(ids))),
        ("extend_claims", q.extend, (300.0, ids, tokens)),
        ("release_many", q.release, (ids, tokens)),
        ("reclaim (none expired)", q.reclaim, {"limit": RECLAIM_BATCH}),
        ("backlog_size (a drain's report, capped)", q.backlog, {"cap": BACKLOG_REPORT_CAP}),
        ("backlog_size (is there any: cap 1)", q.backlog, {"cap": 1}),
        ("backlog_size() (full count)", q.backlog, {"cap": None}),
        ("claims_in_progress", q.live_claims, None),
        ("next_expiry (watch)", q.next_expiry, None),
        ("adopt", q.adopt, {"worker_id": "bench-nobody", "ttl": 300.0}),
        ("get", q.get, (ids[0] if ids else 1,)),
        ("summary: status counts", bq.status_counts, {"cap": COUNT_CAP}),
        ("summary: age and rate", bq.pending_age_and_rate, {"window": THROUGHPUT_WINDOW_S}),
        ("dead_tasks page", bq.dead_page, {**dead, "limit": 50, "offset": 0, "chars": 200}),
        ("dead_tasks count", bq.dead_count, {**dead, "cap": COUNT_CAP}),
        ("counts() (whole table, not a hot path)", q.counts, None),
    ]
    # the claim cycle's reading transactions keep to the indexes (store/queries.py)
    by_index = {"claim", "reclaim (none expired)", "claims_in_progress"} | {
        name for name, _, _ in statements if name.startswith("backlog_size")}
    out = []
    with psycopg.connect(dsn) as conn:
        for name, query, params in statements:
            with conn.transaction(force_rollback=True):
                if name in by_index:
                    conn.execute(q.index_plans)
                out.append(_summary(name, _explain(conn, query, params), names.table))
        # expired claims: make the live ones expired inside the rolled-back transaction
        with conn.transaction(force_rollback=True):
            conn.execute(sql.SQL("UPDATE {} SET claim_expires_at = now() - interval '1 s' "
                                 "WHERE id = ANY(%s)").format(names.tasks), (ids,))
            conn.execute(q.index_plans)
            out.append(_summary("reclaim (expired)", _explain(
                conn, q.reclaim, {"limit": RECLAIM_BATCH}), names.table))
    store.release_many({t.id: t.claim_token for t in live})
    return out

