"""Test DAG: the drain as async tasks (in the worker's event loop), mapped over two."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_llm_router.operators.solve import SolveTaskAsyncOperator

with DAG(
    dag_id="llm_router_async",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"store_schema": "llm_router"},
):
    SolveTaskAsyncOperator.partial(
        task_id="solve",
        store_schema="{{ params.store_schema }}",
    ).expand(settings=[
        # no hedged calls: the test counts one backend call per prompt
        {"max_in_flight": 200, "time_budget_s": 120, "claim_ttl_s": 120, "backoff_s": 0.05,
         "claim_batch": claim_batch, "hedge_late_calls": False}
        for claim_batch in (60, 90)
    ])
