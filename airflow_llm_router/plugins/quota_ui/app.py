"""The quota UI's FastAPI app, mounted by the Airflow API server under ``/llm-router``."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from airflow_llm_router import __version__
from airflow_llm_router.api.errors import validation_handler
from airflow_llm_router.api.openapi import serve_openapi
from airflow_llm_router.engine.quota import field_hint
from airflow_llm_router.plugins.quota_ui import api, backlog, budget, me, page
from airflow_llm_router.plugins.quota_ui.auth import can_read
from airflow_llm_router.plugins.quota_ui.history import router as history_router
from airflow_llm_router.plugins.quota_ui.service import LazyService, QuotaService

URL_PREFIX = "/llm-router"

_MODEL_RULE = "use 1-128 letters, digits or '. _ : / @ + -', starting with a letter or digit"


def _hint(loc: list[str], name: str, error_type: str) -> str:
    """How to fix a bad quota field (the 422 itself is the shared one of ``api/errors.py``)."""
    return _MODEL_RULE if loc[:2] == ["path", "model"] else field_hint(name, error_type)


_invalid = validation_handler(_hint)


def create_app(service_factory: Callable[[], QuotaService] | None = None) -> FastAPI:
    """The app: the JSON API under ``/api``, the page under ``/ui``, the OpenAPI document
    and its viewer (both authenticated, like everything else) under ``/openapi.json`` and
    ``/docs``.

    :param service_factory: builds the router client and quota store on first use;
        defaults to the ``[llm_router]`` Airflow config and its connections.
    """
    app = FastAPI(title="LLM Router quotas", version=__version__, docs_url=None,
                  redoc_url=None, openapi_url=None,
                  description="Per-model LLM quotas of airflow-llm-router: live usage, "
                  "validated and audited changes, stats and advice.")
    app.state.service = LazyService(service_factory or QuotaService.from_airflow)
    app.include_router(api.router)
    app.include_router(budget.router)
    app.include_router(me.router)
    app.include_router(history_router)
    app.include_router(backlog.router)
    app.include_router(page.router)
    app.add_exception_handler(RequestValidationError, _invalid)

    serve_openapi(app, can_read)
    return app
