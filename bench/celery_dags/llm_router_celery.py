"""The Celery run's drain DAG (``python -m bench.celery_run``): the task store's backlog
drained by N mapped deferrable solvers (``SolveTaskOperator``, each a ``DrainTrigger`` in
one of the triggerers), their short ``execute`` and resume run by the Celery workers.

The same drain as ``bench/dags/llm_router_scale.py``'s deferrable DAG, with ``retries``: a
solver whose worker is killed while it runs on it fails its try (Airflow notices the
missing heartbeats), and the next try, on a surviving worker, takes back the dead try's
live claims at once (``DrainTrigger``'s ``earlier_workers``). The benchmark sets in every
component's environment: ``LLMR_CELERY_FAN_OUT``, ``LLMR_CELERY_MAX_IN_FLIGHT``,
``LLMR_CELERY_CLAIM_BATCH`` and ``LLMR_CELERY_STORE_SCHEMA``. The solvers end when the
backlog does (``linger_s`` 0).
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import DAG

from airflow_llm_router.operators import SolveTaskOperator

FAN_OUT = int(os.environ.get("LLMR_CELERY_FAN_OUT", "4"))
SCHEMA = os.environ.get("LLMR_CELERY_STORE_SCHEMA", "llm_router")
SETTINGS = {
    "max_in_flight": int(os.environ.get("LLMR_CELERY_MAX_IN_FLIGHT", "50")),
    "claim_batch": int(os.environ.get("LLMR_CELERY_CLAIM_BATCH", "50")),
    "time_budget_s": 600.0,
    "linger_s": 0.0,
    # no hedging: the run counts every backend call beyond one per task as a call repeated
    # after the kill, and a hedge is one more call on purpose
    "hedge_late_calls": False,
}

with DAG(dag_id="llm_router_celery", schedule=None, catchup=False, max_active_runs=1,
         tags=["llm-router", "bench"], doc_md=__doc__):
    SolveTaskOperator.partial(
        task_id="solve", store_schema=SCHEMA, retries=2, retry_delay=timedelta(seconds=1),
    ).expand(settings=[dict(SETTINGS) for _ in range(FAN_OUT)])
