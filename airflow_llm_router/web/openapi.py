"""The OpenAPI document and its viewer, behind the app's read right (FastAPI's own routes
would serve them to anyone)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

__all__ = ["serve_openapi"]


def serve_openapi(app: FastAPI, reader: Any) -> None:
    """Serve ``/openapi.json`` and ``/docs`` on ``app`` to whoever ``reader`` (a FastAPI
    dependency: 401/403 for others) lets through. Create ``app`` with ``openapi_url=None,
    docs_url=None, redoc_url=None``."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(reader)])
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(reader)])
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(openapi_url=f"{root}/openapi.json", title=app.title)
