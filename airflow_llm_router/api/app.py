"""The HTTP API's app factory: one FastAPI app, served two ways from this code.

- In the Airflow API server, by the plugin (``plugins/http_api.py``), under
  ``/llm-router-api``, with Airflow's auth manager deciding who may read and write.
- Standalone, by ``python -m airflow_llm_router.api`` (uvicorn), with a bearer token from
  an Airflow connection (``api/standalone.py``).

The two differ only in the :class:`~airflow_llm_router.api.auth.Access` and the sources
they pass; the routes, their validation and their answers are the same objects.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from redis.exceptions import RedisError

from airflow_llm_router import __version__
from airflow_llm_router.api import admission, auth, tasks
from airflow_llm_router.api.auth import Access
from airflow_llm_router.api.errors import first_line, validation_handler
from airflow_llm_router.api.limits import ADMISSION_BODY_BYTES, BodyLimit
from airflow_llm_router.api.openapi import serve_openapi
from airflow_llm_router.api.sources import Lazy, Unavailable
from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.exceptions import ReplicationLagError

__all__ = ["create_app"]


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
               task_store: Lazy[Any] | None = None) -> FastAPI:
    """The app: admission (``/schedule``, ``/complete``, ``/heartbeat``, ``/cancel``,
    ``/advice``), task ingestion (``/tasks``), the OpenAPI document (``/openapi.json``) and
    its viewer (``/docs``), all behind ``access``.

    :param access: who may read and write (see :mod:`airflow_llm_router.api.auth`).
    :param router: the asyncio router client, built on first use in the serving loop.
    :param task_store: the task store for ``/tasks`` (None: those routes answer 503).
    """
    app = FastAPI(title="LLM Router HTTP API", version=__version__, docs_url=None,
                  redoc_url=None, openapi_url=None,
                  description="Admission to the shared per-model LLM quotas of "
                  "airflow-llm-router for callers outside Airflow (schedule, complete, "
                  "heartbeat, advice), and task ingestion.")
    app.state.router = router
    app.state.task_store = task_store
    access.install(app)
    app.include_router(admission.router)
    app.add_middleware(BodyLimit, limits={
        **{route.path: ADMISSION_BODY_BYTES for route in admission.router.routes
           if isinstance(route, APIRoute)}, **tasks.BODY_LIMITS})
    app.include_router(tasks.router)
    app.add_exception_handler(RequestValidationError, validation_handler())
    for error in (Unavailable, RedisError, ReplicationLagError):
        app.add_exception_handler(error, _unavailable)

    serve_openapi(app, auth.reader)
    return app
