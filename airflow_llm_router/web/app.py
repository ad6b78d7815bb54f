"""The app factory: one FastAPI app with every route, served two ways from this code.

- In the Airflow API server, by the plugin (``plugins/llm_router.py``), mounted at
  ``/llm-router`` with the routes under ``/api`` (``prefix="/api"``) beside the quota page,
  Airflow's auth manager deciding who may read and write (:func:`~.auth.airflow_access`).
- Standalone, by ``python -m airflow_llm_router.web`` (uvicorn), routes at the root, with a
  bearer token from an Airflow connection (:mod:`~airflow_llm_router.web.standalone`).

The two differ only in the :class:`~airflow_llm_router.web.auth.Access`, the sources and
the prefix they pass; the routes, their validation and their answers are the same objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from redis.exceptions import RedisError

from airflow_llm_router import __version__
from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.quota import field_hint
from airflow_llm_router.exceptions import ReplicationLagError
from airflow_llm_router.web import admission, auth, backlog, budget, history, ingestion, quotas
from airflow_llm_router.web.auth import Access
from airflow_llm_router.web.errors import first_line, validation_handler
from airflow_llm_router.web.limits import ADMISSION_BODY_BYTES, BodyLimit
from airflow_llm_router.web.openapi import serve_openapi
from airflow_llm_router.web.service import LazyService, QuotaService
from airflow_llm_router.web.sources import Lazy, Unavailable

__all__ = ["create_app"]

_MODEL_RULE = "use 1-128 letters, digits or '. _ : / @ + -', starting with a letter or digit"
#: the routers, one per concern, in the order the OpenAPI document lists them
_ROUTERS = (admission.router, ingestion.router, backlog.router, quotas.router, budget.router,
            history.router)


#: the routes whose bad input gets the quota fields' hints
_QUOTA_ROUTES = {route.endpoint for each in (quotas.router, budget.router, history.router)
                 for route in each.routes if isinstance(route, APIRoute)}


def _hint(request: Request, loc: list[str], name: str, error_type: str) -> str:
    """How to fix a bad model name in a path, or a bad field of a quota route."""
    route = request.scope.get("route")
    if getattr(route, "endpoint", None) not in _QUOTA_ROUTES:
        return ""
    return _MODEL_RULE if loc[:2] == ["path", "model"] else field_hint(name, error_type)


def _unavailable(_: Request, exc: Exception) -> JSONResponse:
    """503: what is missing or unreachable, so the caller retries (never a secret: Redis
    errors name the address, not the password)."""
    if isinstance(exc, Unavailable):
        message = str(exc)
    else:
        message = (f"the router's Redis did not answer: {type(exc).__name__}: "
                   f"{first_line(exc)}; retry")
    return JSONResponse({"detail": message}, status_code=503, headers={"Retry-After": "1"})


def create_app(*, access: Access, router: Lazy[AsyncRouterClient],
               task_store: Lazy[Any] | None = None,
               service: Callable[[], QuotaService] | None = None,
               prefix: str = "") -> FastAPI:
    """The app: admission (``/schedule``, ``/complete``, ``/heartbeat``, ``/cancel``,
    ``/advice``), ingestion (``/tasks``), the backlog and its dead letters (``/backlog``,
    ``/tasks/requeue``), quotas (``/quotas``, ``/stats``, ``/audit``, ``/me``), the budget
    (``/budget``) and traffic (``/history``), each under ``prefix``; the OpenAPI document
    (``/openapi.json``) and its viewer (``/docs``) at the root; all behind ``access``.

    :param access: who may read and write (see :mod:`airflow_llm_router.web.auth`).
    :param router: the asyncio router client, built on first use in the serving loop.
    :param task_store: the task store (None: the ``/tasks`` and backlog routes answer 503).
    :param service: builds the quota store and the synchronous router client on first use
        (None: the quota, budget and history routes answer 503).
    :param prefix: where the routes live (``"/api"`` beside the quota page).
    """
    app = FastAPI(title="LLM Router HTTP API", version=__version__, docs_url=None,
                  redoc_url=None, openapi_url=None,
                  description="Admission to the shared per-model LLM quotas of "
                  "airflow-llm-router (schedule, complete, heartbeat, advice), task "
                  "ingestion and the backlog, and the quotas themselves: live usage, "
                  "validated and audited changes, budget and traffic.")
    app.state.router = router
    app.state.task_store = task_store
    app.state.service = None if service is None else LazyService(service)
    access.install(app)
    for each in _ROUTERS:
        app.include_router(each, prefix=prefix)
    app.add_middleware(BodyLimit, limits={prefix + path: limit for path, limit in {
        **{route.path: ADMISSION_BODY_BYTES for route in admission.router.routes
           if isinstance(route, APIRoute)}, **ingestion.BODY_LIMITS,
        **backlog.BODY_LIMITS}.items()})
    app.add_exception_handler(RequestValidationError, validation_handler(_hint))
    for error in (Unavailable, RedisError, ReplicationLagError):
        app.add_exception_handler(error, _unavailable)

    serve_openapi(app, auth.reader)
    return app
