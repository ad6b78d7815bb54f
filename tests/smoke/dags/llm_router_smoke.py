"""The smoke test's drain DAG: mapped deferrable solvers draining the task store.

Parsed by the real DAG processor of ``tests/smoke/test_real_stack.py``. The test gives the
store schema (unique per run) in ``LLMR_SMOKE_STORE_SCHEMA``; every component of the stack
inherits it, so the DAG processor and the workers that re-parse this file agree.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_llm_router.operators.solve import SolveTaskOperator

#: One mapped instance per value: four instances, each draining with its own chunk size.
CHUNK_SIZES = [20, 25, 25, 30]

with DAG(
    dag_id="llm_router_smoke",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["llm-router", "smoke"],
    doc_md=__doc__,
):
    SolveTaskOperator.partial(
        task_id="solve",
        store_schema=os.environ.get("LLMR_SMOKE_STORE_SCHEMA", "llm_router_smoke"),
        deferrable=True,
        retries=0,
    ).expand(settings=[
        {"max_in_flight": 50, "time_budget_s": 120.0, "claim_ttl_s": 300.0,
         "claim_batch": claim_batch}
        for claim_batch in CHUNK_SIZES
    ])
