"""The triggerer-crash test's drain DAG: two mapped deferrable solvers with short claims.

Parsed by the real DAG processor of ``tests/smoke/test_triggerer_crash.py``, which gives the
store schema (unique per run) in ``LLMR_SMOKE_STORE_SCHEMA``. Claims last the default two
minutes: the re-run drains must take their own claims back at once rather than wait for
them to expire.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_llm_router.operators.solve import SolveTaskOperator

with DAG(
    dag_id="llm_router_crash",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["llm-router", "smoke"],
    doc_md=__doc__,
):
    SolveTaskOperator.partial(
        task_id="solve",
        store_schema=os.environ.get("LLMR_SMOKE_STORE_SCHEMA", "llm_router_crash"),
        deferrable=True,
        retries=0,
    ).expand(settings=[
        # no hedging: the test counts every backend call beyond one per task as a call
        # repeated after the crash, and a hedge is one more call on purpose
        {"max_in_flight": 40, "time_budget_s": 150.0, "claim_batch": 20,
         "hedge_late_calls": False}
        for _ in range(2)
    ])
