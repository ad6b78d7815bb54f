"""The Airflow plugin of airflow-llm-router: registers the quota UI and the HTTP API,
nothing else.

Loaded through the ``airflow.plugins`` entry point. The API server mounts the app under
``/llm-router`` and the HTTP API (``airflow_llm_router.api``) under ``/llm-router-api``;
the UI lists "LLM Quotas" in its Admin menu and shows the page in an
iframe at ``/plugin/llm-quotas``.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_llm_router.plugins.http_api import API_URL_PREFIX, create_api_app
from airflow_llm_router.plugins.quota_ui import URL_PREFIX, create_app


class LLMRouterPlugin(AirflowPlugin):
    name = "llm_router"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "LLM Router"},
                    {"app": create_api_app(), "url_prefix": API_URL_PREFIX,
                     "name": "LLM Router HTTP API"}]
    external_views = [{"name": "LLM Quotas", "href": f"{URL_PREFIX}/ui", "destination": "nav",
                       "category": "admin", "url_route": "llm-quotas"}]
