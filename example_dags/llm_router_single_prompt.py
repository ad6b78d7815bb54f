"""Solve one prompt through the router and return the answer as XCom.

The prompt is a param (templated into the operator), so the DAG can be triggered from the UI
or the API with ``{"prompt": "..."}``. The answer is the task's XCom: a dict with
``answer``, ``model``, ``input_tokens``, ``output_tokens``, ``status`` and ``error``.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_llm_router.operators.prompts import SolvePromptsOperator

with DAG(
    dag_id="llm_router_single_prompt",
    schedule=None,
    catchup=False,
    tags=["llm-router"],
    params={
        "prompt": Param("Say hello in five languages.", type="string", minLength=1),
        "priority": Param("hot", enum=["hot", "bulk"]),
    },
    doc_md=__doc__,
) as dag:
    SolvePromptsOperator(
        task_id="solve",
        prompt="{{ params.prompt }}",
        priority="{{ params.priority }}",
        router_conn_id="llm_router_default",
        backend_conn_id="models_backend_default",
    )
