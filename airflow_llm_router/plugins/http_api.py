"""The HTTP API (``airflow_llm_router.api``) as the plugin serves it, under
``/llm-router-api`` in the Airflow API server.

Access follows the quota API (``quota_ui/auth.py``): reading (``GET /advice``, the OpenAPI
document) needs the right to read pools; everything that spends the shared quotas
(``/schedule``, ``/complete``, ``/heartbeat``, ``/cancel``) and task ingestion writes need
the right to edit pools, as changing a quota does (op or admin under the simple auth
manager), with the same CSRF guard for writes authenticated by the UI's session cookie.
The router and the task store come from the ``[llm_router]`` config (``router_conn_id``,
``postgres_conn_id``, ``task_schema``, ``task_table``: the store the quota page's backlog
panel shows).
"""

from __future__ import annotations

from fastapi import FastAPI

from airflow_llm_router.api import Access, Caller, create_app
from airflow_llm_router.api.sources import router_source, task_store_source
from airflow_llm_router.plugins.quota_ui.auth import Editor
from airflow_llm_router.plugins.quota_ui.auth import Reader as QuotaReader
from airflow_llm_router.quotas.config import QuotaConfig

__all__ = ["API_URL_PREFIX", "create_api_app"]

API_URL_PREFIX = "/llm-router-api"

def _reader(user: QuotaReader) -> Caller:
    return Caller(user.get_name())


def _writer(user: Editor) -> Caller:
    return Caller(user.get_name())


def create_api_app(config: QuotaConfig | None = None) -> FastAPI:
    """The API app behind Airflow's auth manager, on the connections of ``config``
    (default: the ``[llm_router]`` section)."""
    config = config or QuotaConfig.from_airflow()
    return create_app(
        access=Access(reader=_reader, writer=_writer),
        router=router_source(config.router_conn_id),
        task_store=task_store_source(config.postgres_conn_id, config.task_schema,
                                     config.task_table))
