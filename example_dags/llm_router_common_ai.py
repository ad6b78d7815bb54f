"""Airflow's common.ai operators under the router's quotas, with no code change.

20 mapped ``LLMOperator`` tasks summarise 20 tickets on one model. Their connection,
``llm_router_openai`` (type ``pydanticai``), points its ``host`` at the router's governed
OpenAI-compatible endpoint instead of at the provider, and its password is that server's
token::

    airflow connections add llm_router_openai --conn-type pydanticai \\
        --conn-host http://router-api:8090/v1 --conn-password '<the server token>' \\
        --conn-extra '{"model": "openai-chat:summary-model"}'

    python -m airflow_llm_router.web --port 8090 --backend-conn-id <openai backend>

With a quota of a few calls per window on ``summary-model`` (e.g. ``rpm: 3``), every call
of every task, whatever worker runs it and whatever else calls the model (drains, other
DAGs, services with the ``openai`` SDK), is admitted within that one quota: a task whose
call finds no room waits at the router, and none is refused by the provider.
docs/openai_endpoint.md.
"""

from __future__ import annotations

from airflow.providers.common.ai.operators.llm import LLMOperator
from airflow.sdk import DAG

#: the model the quota governs (the router's name; ``openai-chat:`` makes pydantic-ai speak
#: chat completions, which the router serves, not the Responses API of ``openai:``)
MODEL = "summary-model"
TICKETS = [f"Ticket {i}: the export to CSV fails for report {100 + i} with a timeout."
           for i in range(20)]

with DAG(dag_id="llm_router_common_ai", schedule=None, catchup=False,
         tags=["llm-router", "common.ai"], doc_md=__doc__) as dag:
    LLMOperator.partial(
        task_id="summarise",
        llm_conn_id="llm_router_openai",
        model_id=f"openai-chat:{MODEL}",
        system_prompt="Summarise the support ticket in one line.",
        # the output cap: the router reserves input + max_tokens, so tpm holds exactly
        model_settings={"max_tokens": 128},
    ).expand(prompt=TICKETS)
