"""The task store as its backlog grows: a curve over 10k -> 100k -> 1M rows; on demand.

    python -m bench.backlog                          # 10k, 100k, 1M rows on a private server
    python -m bench.backlog --sizes 10000 100000     # fewer sizes
    python -m bench.backlog --postgres-dsn DSN       # a running server instead

By default a private PostgreSQL with the packaged defaults (``bench/private_pg.py``;
autovacuum on, as a deployment has it; this machine's shared test server runs without).
For each size, a fresh schema:

1. **enqueue**: N tasks in ``store.enqueue`` calls of ``--chunk`` prompts, one producer;
   tasks/s.
2. **claim + complete**: ``--claimers`` threads, each with its own store as drains have,
   claim ``--batch`` tasks and write them back with ``complete_many`` until ``--measure``
   tasks are done; beside them one thread counts the backlog as a drain's report does
   (``backlog_size(cap=BACKLOG_REPORT_CAP)``, spaced by what a count costs). Tasks/s,
   p50/p99 of each call. Measured three times: right after enqueue (the rows it solves
   leave dead entries at the head of the claim index: tasks/s per quarter of the phase),
   again after a ``VACUUM`` (its duration is reported), and once more with full counts
   every 0.1 s beside it (what a drain's report did before it counted up to a cap).
3. **size**: table and index bytes (``pg_relation_size``, ``pg_indexes_size``), live and
   dead tuples before and after (``pg_stat_user_tables``), autovacuum runs.
4. **plans**: every hot statement under ``EXPLAIN (ANALYZE, BUFFERS)``
   (``bench/backlog_plans.py``): the scans on the table, time and buffers.

Raw figures go to ``bench/out/backlog.json``; a table is printed. The machine's load
inflates every figure alike: compare sizes within one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

from airflow_llm_router.solver.upkeep import (
    BACKLOG_COUNT_SPACING,
    BACKLOG_REPORT_CAP,
    BACKLOG_REPORT_MIN_S,
)
from airflow_llm_router.store import TaskResult, TaskStore
from bench.backlog_plans import explain_hot_queries
from bench.common import drop_schema, interruptible
from bench.private_pg import private_postgres

OUT = Path(__file__).resolve().parent / "out"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.backlog",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--claimers", type=int, default=4, help="concurrent claim/complete threads")
    p.add_argument("--batch", type=int, default=100, help="tasks per claim")
    p.add_argument("--measure", type=int, default=20_000,
                   help="tasks claimed and completed per measured phase (at most a quarter "
                   "of the size)")
    p.add_argument("--chunk", type=int, default=10_000, help="prompts per enqueue call")
    p.add_argument("--prompt-chars", type=int, default=200)
    p.add_argument("--postgres-dsn", help="a running server (default: a private one)")
    p.add_argument("--out", type=Path, default=OUT / "backlog.json")
    return p


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered \
        else 0.0


def table_stats(dsn: str, store: TaskStore) -> dict[str, Any]:
    """Bytes of the table and its indexes, live and dead tuples, vacuum runs so far."""
    names = store.connection.names
    rel = f"{names.schema}.{names.table}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT pg_relation_size(%(r)s::regclass), pg_indexes_size(%(r)s::regclass), "
            "       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.vacuum_count "
            "  FROM pg_stat_user_tables s WHERE s.relid = %(r)s::regclass", {"r": rel}
        ).fetchone()
        indexes = conn.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) "
            "  FROM pg_index WHERE indrelid = %s::regclass ORDER BY 1", (rel,)).fetchall()
    assert row is not None
    return {"table_mb": round(row[0] / 2**20, 1), "indexes_mb": round(row[1] / 2**20, 1),
            "live": row[2], "dead": row[3], "autovacuums": row[4], "vacuums": row[5],
            "index_mb": {name.split(".")[-1]: round(size / 2**20, 2) for name, size in indexes}}


def enqueue(store: TaskStore, n: int, chunk: int, chars: int) -> dict[str, Any]:
    pad = "x" * max(0, chars - 20)
    t0, done = time.monotonic(), 0
    while done < n:
        k = min(chunk, n - done)
        store.enqueue([f"task {done + i} {pad}" for i in range(k)])
        done += k
    wall = time.monotonic() - t0
    return {"tasks": n, "wall_s": round(wall, 2), "per_s": round(n / wall)}


def claim_complete(dsn: str, schema: str, opts: argparse.Namespace, measure: int,
                   cap: int | None = BACKLOG_REPORT_CAP) -> dict[str, Any]:
    """``--claimers`` threads claim and complete until ``measure`` tasks are done, beside a
    backlog reporter as a drain runs it: counts up to ``cap``, spaced by ten times what
    the last count took (None: full counts every 0.1 s, as drains did before)."""
    lock, stop = threading.Lock(), threading.Event()
    left = [measure]
    claims: list[float] = []
    completes: list[float] = []
    counts: list[float] = []
    done: list[tuple[float, int]] = []  # (when, tasks) per completed batch
    errors: list[BaseException] = []

    def claimer(k: int) -> None:
        with TaskStore(dsn, schema=schema) as store:
            try:
                while True:
                    with lock:
                        want = min(opts.batch, left[0])
                        left[0] -= want
                    if want <= 0:
                        return
                    t0 = time.monotonic()
                    tasks = store.claim(want, worker_id=f"bench-{k}", claim_ttl_s=300)
                    t1 = time.monotonic()
                    store.complete_many([TaskResult(t.id, t.claim_token, "answer", "m0", 10, 20)
                                         for t in tasks])
                    t2 = time.monotonic()
                    with lock:
                        claims.append(t1 - t0)
                        completes.append(t2 - t1)
                        done.append((t2, len(tasks)))
                        left[0] += want - len(tasks)
            except BaseException as err:  # reported after the join
                errors.append(err)

    def reporter() -> None:
        with TaskStore(dsn, schema=schema) as store:
            while not stop.is_set():
                t0 = time.monotonic()
                store.backlog_size(cap=cap)
                counts.append(time.monotonic() - t0)
                spacing = 0.0 if cap is None else BACKLOG_COUNT_SPACING * counts[-1]
                stop.wait(max(BACKLOG_REPORT_MIN_S, spacing))

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(opts.claimers)]
    watcher = threading.Thread(target=reporter)
    watcher.start()
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    stop.set()
    watcher.join()
    if errors:
        raise errors[0]
    return {"tasks": measure, "wall_s": round(wall, 2), "per_s": round(measure / wall),
            "per_s_by_quarter": _by_quarter(done, t0),
            "claim_p50_ms": _pct(claims, 0.5), "claim_p99_ms": _pct(claims, 0.99),
            "complete_p50_ms": _pct(completes, 0.5), "complete_p99_ms": _pct(completes, 0.99),
            "backlog_size_p50_ms": _pct(counts, 0.5), "backlog_size_p99_ms": _pct(counts, 0.99),
            "backlog_size_calls": len(counts)}


def _by_quarter(done: list[tuple[float, int]], t0: float) -> list[int]:
    """Tasks/s over each quarter of a phase's tasks: flat, or slowing as it goes (dead
    index entries that the claims walk past until a vacuum removes them)."""
    done = sorted(done)
    total = sum(k for _, k in done)
    rates, start, count, quarter = [], t0, 0, 1
    for when, k in done:
        count += k
        if count >= quarter * total / 4:
            rates.append(round((total / 4) / max(1e-9, when - start)))
            start, quarter = when, quarter + 1
    return rates


def vacuum(dsn: str, store: TaskStore) -> float:
    names = store.connection.names
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.monotonic()
        conn.execute(psycopg.sql.SQL("VACUUM {}").format(names.tasks))
        return round(time.monotonic() - t0, 2)


def one_size(dsn: str, n: int, opts: argparse.Namespace) -> dict[str, Any]:
    schema = f"llmr_backlog_{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        store = TaskStore(dsn, schema=schema)
        stack.callback(drop_schema, dsn, schema)
        stack.callback(store.close)
        store.migrate()
        point: dict[str, Any] = {"rows": n, "enqueue": enqueue(store, n, opts.chunk,
                                                               opts.prompt_chars)}
        point["after_enqueue"] = table_stats(dsn, store)
        measure = min(opts.measure, n // 4)  # three phases, and some left
        point["cycle"] = claim_complete(dsn, schema, opts, measure)
        point["after_cycle"] = table_stats(dsn, store)
        point["vacuum_s"] = vacuum(dsn, store)
        point["cycle_after_vacuum"] = claim_complete(dsn, schema, opts, measure)
        point["cycle_full_counts"] = claim_complete(dsn, schema, opts, measure, cap=None)
        point["plans"] = explain_hot_queries(store, dsn, opts.batch)
        point["after_plans"] = table_stats(dsn, store)
        return point


def report(points: list[dict[str, Any]]) -> str:
    lines = ["| rows | enqueue /s | claim+complete /s | by quarter | after VACUUM /s | "
             "full counts /s | claim p99 ms | complete p99 ms | capped count p50 ms | "
             "full count p50 ms | table MB | indexes MB | dead after | VACUUM s |",
             "|" + "---:|" * 14]
    for p in points:
        c, v, s = p["cycle"], p["cycle_after_vacuum"], p["after_cycle"]
        f = p["cycle_full_counts"]
        quarters = "/".join(f"{r:,}" for r in c["per_s_by_quarter"])
        lines.append(f"| {p['rows']:,} | {p['enqueue']['per_s']:,} | {c['per_s']:,} | "
                     f"{quarters} | {v['per_s']:,} | {f['per_s']:,} | {c['claim_p99_ms']} | "
                     f"{c['complete_p99_ms']} | {c['backlog_size_p50_ms']} | "
                     f"{f['backlog_size_p50_ms']} | {s['table_mb']} | {s['indexes_mb']} | "
                     f"{s['dead']:,} | {p['vacuum_s']} |")
    last = points[-1]
    lines += ["", f"Plans at {last['rows']:,} rows:", "",
              "| statement | scans on the table | ms | buffers |", "|---|---|---:|---:|"]
    for plan in last["plans"]:
        lines.append(f"| {plan['query']} | {', '.join(plan['scans']) or '-'} | {plan['ms']} | "
                     f"{plan['buffers']:,} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if min(opts.sizes) < 1000 or min(opts.claimers, opts.batch, opts.measure, opts.chunk) < 1:
        print("error: --sizes must be >= 1000, --claimers, --batch, --measure and --chunk "
              ">= 1", file=sys.stderr)
        return 2

    def body() -> int:
        with ExitStack() as stack:
            dsn = opts.postgres_dsn or stack.enter_context(private_postgres())
            points = []
            for n in opts.sizes:
                points.append(one_size(dsn, n, opts))
                print(json.dumps({k: v for k, v in points[-1].items() if k != "plans"}),
                      flush=True)
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(points, indent=2) + "\n")
        print(report(points))
        return 0

    return interruptible(body)


if __name__ == "__main__":
    sys.exit(main())
