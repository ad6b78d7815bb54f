"""The triggerer benchmark's drain DAGs (``python -m bench.triggerers``): the task store's
backlog drained by N mapped solvers, in the triggerer or in the worker.

- ``llm_router_scale_deferrable``: ``SolveTaskOperator`` (each solver defers to a
  ``DrainTrigger`` in a triggerer);
- ``llm_router_scale_async``: ``SolveTaskAsyncOperator`` (each solver is an async task
  holding a worker slot).

The benchmark starts a fresh stack per configuration and sets, in every component's
environment (so the DAG processor and the workers that re-parse this file agree):
``LLMR_SCALE_FAN_OUT`` (mapped solvers), ``LLMR_SCALE_MAX_IN_FLIGHT`` (calls per solver),
``LLMR_SCALE_CLAIM_BATCH`` and ``LLMR_SCALE_STORE_SCHEMA``. The solvers end when the
backlog does (``linger_s`` 0).
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_llm_router.operators import SolveTaskAsyncOperator, SolveTaskOperator

FAN_OUT = int(os.environ.get("LLMR_SCALE_FAN_OUT", "4"))
SCHEMA = os.environ.get("LLMR_SCALE_STORE_SCHEMA", "llm_router")
SETTINGS = {
    "max_in_flight": int(os.environ.get("LLMR_SCALE_MAX_IN_FLIGHT", "50")),
    "claim_batch": int(os.environ.get("LLMR_SCALE_CLAIM_BATCH", "50")),
    "time_budget_s": 600.0,
    "linger_s": 0.0,
}

for mode, operator in (("deferrable", SolveTaskOperator), ("async", SolveTaskAsyncOperator)):
    with DAG(dag_id=f"llm_router_scale_{mode}", schedule=None, catchup=False,
             max_active_runs=1, tags=["llm-router", "bench"], doc_md=__doc__):
        operator.partial(task_id="solve", store_schema=SCHEMA, retries=0).expand(
            settings=[dict(SETTINGS) for _ in range(FAN_OUT)])
