"""The Airflow plugin of airflow-llm-router: registers the HTTP surface and the quota page,
nothing else.

Loaded through the ``airflow.plugins`` entry point. The API server mounts one app under
``/llm-router``: every route of :mod:`airflow_llm_router.web` under ``/llm-router/api``
(Airflow's auth manager deciding who may read and write), the OpenAPI document at
``/llm-router/openapi.json`` and the quota page at ``/llm-router/ui``. The UI lists
"LLM Quotas" in its Admin menu and shows the page in an iframe at ``/plugin/llm-quotas``.
The router, the task store and the quota store come from the ``[llm_router]`` config.

Every Airflow process loads every plugin, each task process too (before it runs, for the
plugins' macros), so this module imports nothing heavy: the app, with FastAPI and the
routes, is built when the API server first reads ``fastapi_apps``. Built at import, it
cost each task start about 1.4 s of CPU (7 s on a loaded 2-core machine) before the task
ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin

if TYPE_CHECKING:
    from fastapi import FastAPI

    from airflow_llm_router.quotas.config import QuotaConfig
    from airflow_llm_router.web.service import QuotaService

__all__ = ["API_PREFIX", "URL_PREFIX", "LLMRouterPlugin", "plugin_app"]

URL_PREFIX = "/llm-router"
#: where the routes live inside the app (the page calls them relative to its own URL)
API_PREFIX = "/api"


def _quota_service() -> QuotaService:
    from airflow_llm_router.quotas.config import QuotaConfig
    from airflow_llm_router.web.service import QuotaService

    return QuotaService.from_config(QuotaConfig.from_airflow())


def plugin_app(config: QuotaConfig | None = None) -> FastAPI:
    """The app the plugin mounts, on the connections of ``config`` (default: the
    ``[llm_router]`` section)."""
    from airflow_llm_router.plugins import page
    from airflow_llm_router.quotas.config import QuotaConfig
    from airflow_llm_router.web import airflow_access, create_app
    from airflow_llm_router.web.sources import router_source, task_store_source

    config = config or QuotaConfig.from_airflow()
    app = create_app(
        access=airflow_access(), router=router_source(config.router_conn_id),
        task_store=task_store_source(config.postgres_conn_id, config.task_schema,
                                     config.task_table),
        service=_quota_service, prefix=API_PREFIX)
    app.include_router(page.router)
    return app


class _Apps:
    """``fastapi_apps``: the plugin's app, built on the first read (on the class, as a
    provider's plugin is read, or on an instance) and the same one after."""

    def __init__(self) -> None:
        self._apps: list[dict[str, Any]] | None = None

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        if self._apps is None:
            self._apps = [{"app": plugin_app(), "url_prefix": URL_PREFIX,
                           "name": "LLM Router"}]
        return self._apps


class LLMRouterPlugin(AirflowPlugin):
    name = "llm_router"
    fastapi_apps = _Apps()
    external_views = [{"name": "LLM Quotas", "href": f"{URL_PREFIX}/ui", "destination": "nav",
                       "category": "admin", "url_route": "llm-quotas"}]
