"""The team's current design, reproduced faithfully as a baseline to compare against.

What the as-is system does (and what the router replaces):

1. pull **all** unsolved task ids from the task table in one query;
2. split them into 20 equal batches and run 20 mapped workers;
3. each worker sends 10 prompts at a time to the backend's ``POST /batch``, which answers only
   when the slowest of the 10 is done, writes the answers back directly (no claim tokens, no
   rate control), and repeats with its next 10;
4. items the backend refused (429) or failed (5xx) are simply left unsolved for the next run;
5. workers are killed after 30 minutes, abandoning the batch in flight.

Each task's model is its first allowed model if it has a list, else the models are spread
evenly by task id. Benchmarks at a time scale shrink the 30 minutes with ``worker_timeout_s``
(enforced by the worker itself, since ``execution_timeout`` is fixed when the file is parsed).
"""

from __future__ import annotations

import logging
import re
import time
from datetime import timedelta
from typing import Any

import httpx
from airflow.sdk import DAG, BaseHook, Param, task
from airflow.sdk.exceptions import AirflowTaskTimeout

POSTGRES_CONN_ID = "postgres_default"
BACKEND_CONN_ID = "models_backend_default"
N_WORKERS = 20
ITEMS_PER_CALL = 10
WORKER_TIMEOUT = timedelta(minutes=30)

log = logging.getLogger(__name__)
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _table(params: dict[str, Any]) -> str:
    schema, table = params["store_schema"], params["store_table"]
    if not (_IDENT.match(schema) and _IDENT.match(table)):
        raise ValueError(f"store_schema/store_table must be lower-case names: {schema}.{table}")
    return f'"{schema}"."{table}"'


def _backend_url() -> str:
    return str(BaseHook.get_connection(BACKEND_CONN_ID).host).rstrip("/")


def split_equal(ids: list[int], n: int) -> list[list[int]]:
    """``n`` contiguous batches whose sizes differ by at most one (some empty if few ids)."""
    size, extra = divmod(len(ids), n)
    batches, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        batches.append(ids[start:end])
        start = end
    return batches


def pick_model(task_id: int, allowed: list[str] | None, models: list[str]) -> str:
    """The as-is rule: the task's first allowed model, else spread over all models by id."""
    return allowed[0] if allowed else models[task_id % len(models)]


def _solve_ten(client: httpx.Client, conn: Any, table: str, rows: list[tuple], models: list[str],
               timeout_s: float) -> int:
    """One ``/batch`` call for up to 10 tasks; write the 200s back. Returns how many were solved."""
    chosen = {tid: pick_model(tid, allowed, models) for tid, _, allowed in rows}
    items = [{"id": str(tid), "model": chosen[tid], "prompt": prompt} for tid, prompt, _ in rows]
    response = client.post("/batch", json={"items": items}, timeout=timeout_s)
    response.raise_for_status()
    ok = [r for r in response.json()["results"] if r.get("status") == 200]
    if ok:
        with conn.cursor() as cur:
            cur.execute(
                f"UPDATE {table} AS t SET status = 'solved', answer = r.answer, "
                "model = r.model, input_tokens = r.inp, output_tokens = r.out, "
                "solved_at = now(), updated_at = now() "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::int[], %s::int[]) "
                "AS r(id, answer, model, inp, out) WHERE t.id = r.id AND t.status = 'pending'",
                (
                    [int(r["id"]) for r in ok],
                    [r["answer"] for r in ok],
                    [chosen[int(r["id"])] for r in ok],
                    [r["usage"]["input_tokens"] for r in ok],
                    [r["usage"]["output_tokens"] for r in ok],
                ),
            )
        conn.commit()
    return len(ok)


def _unsolved(conn: Any, table: str, ids: list[int]) -> list[tuple]:
    """(id, prompt, allowed_models) of the ids still unsolved."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, prompt, allowed_models FROM {table} "
                    "WHERE id = ANY(%s) AND status = 'pending' ORDER BY id", (ids,))
        rows = [(int(i), p, list(a) if a else None) for i, p, a in cur.fetchall()]
    conn.commit()
    return rows


def _call(client: httpx.Client, conn: Any, table: str, rows: list[tuple], models: list[str],
          timeout_s: float, deadline: float) -> int:
    """:func:`_solve_ten`, where a failed call only leaves its tasks for the next run."""
    try:
        return _solve_ten(client, conn, table, rows, models, timeout_s)
    except httpx.TimeoutException as err:
        if time.monotonic() >= deadline:  # the kill abandons the batch in flight
            raise AirflowTaskTimeout("worker killed during a /batch call") from err
        log.warning("/batch timed out; its %d tasks stay unsolved", len(rows))
    except httpx.HTTPError as err:
        log.warning("/batch failed (%s); its %d tasks stay unsolved", err, len(rows))
    return 0


with DAG(
    dag_id="as_is_baseline",
    schedule=None,
    catchup=False,
    tags=["llm-router", "baseline"],
    params={
        "store_schema": Param("llm_router", type="string"),
        "store_table": Param("tasks", type="string"),
        "models": Param(None, type=["null", "array"],
                        description="backend models; null = ask the backend's GET /limits"),
        "worker_timeout_s": Param(WORKER_TIMEOUT.total_seconds(), type="number", exclusiveMinimum=0,
                                  description="a worker is killed after this (30 min as-is)"),
        "backend_timeout_s": Param(300, type="number", exclusiveMinimum=0),
    },
    doc_md=__doc__,
) as dag:

    @task
    def fetch_unsolved(params: dict[str, Any] | None = None) -> list[list[int]]:
        """All unsolved ids at once (the as-is design), split into 20 equal batches."""
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        assert params is not None
        rows = PostgresHook(postgres_conn_id=POSTGRES_CONN_ID).get_records(
            f"SELECT id FROM {_table(params)} WHERE status = 'pending' ORDER BY id"
        )
        return split_equal([int(r[0]) for r in rows], N_WORKERS)

    @task
    def backend_models(params: dict[str, Any] | None = None) -> list[str]:
        assert params is not None
        if params.get("models"):
            return list(params["models"])
        return list(httpx.get(f"{_backend_url()}/limits", timeout=30).json())

    @task(execution_timeout=WORKER_TIMEOUT)
    def solve_batch(task_ids: list[int], models: list[str],
                    params: dict[str, Any] | None = None) -> dict[str, int]:
        """10 prompts per ``/batch`` call until the batch is done or the worker is killed."""
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        assert params is not None
        deadline = time.monotonic() + float(params["worker_timeout_s"])
        table, solved, sent = _table(params), 0, 0
        conn = PostgresHook(postgres_conn_id=POSTGRES_CONN_ID).get_conn()
        with httpx.Client(base_url=_backend_url()) as client:
            try:
                for start in range(0, len(task_ids), ITEMS_PER_CALL):
                    rows = _unsolved(conn, table, task_ids[start:start + ITEMS_PER_CALL])
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise AirflowTaskTimeout(
                            f"worker killed after {params['worker_timeout_s']} s")
                    if rows:
                        solved += _call(client, conn, table, rows, models,
                                        min(remaining, float(params["backend_timeout_s"])),
                                        deadline)
                        sent += len(rows)
            finally:
                conn.close()
        return {"sent": sent, "solved": solved}

    solve_batch.partial(models=backend_models()).expand(task_ids=fetch_unsolved())
