"""The OpenAPI document and its viewer, behind the app's read right (FastAPI's own routes
would serve them to anyone).

The document names the server the app is mounted at (``/llm-router`` in the Airflow API
server, ``/`` or uvicorn's ``--root-path`` standalone), so a generated client calls the
paths under it; each operation lists the refusals of auth (401, 403) and, with a body, of
its parsing (400, 415) beside its own. The viewer is Swagger UI 5.35.0 (npm's
``swagger-ui-dist``, Apache-2.0: ``static/swagger-ui/LICENSE`` and ``NOTICE``; the bundle's
own notices in ``swagger-ui-bundle.js.LICENSE.txt``), served from the package: it needs no
CDN and works offline.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

__all__ = ["ASSETS", "serve_openapi"]

_SWAGGER = files("airflow_llm_router.web") / "static" / "swagger-ui"
#: the viewer's files, by name, with their media type
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "favicon-32x32.png": "image/png", "LICENSE": "text/plain", "NOTICE": "text/plain",
          "swagger-ui-bundle.js.LICENSE.txt": "text/plain"}


#: the refusals every operation can answer, before its own code runs
_REFUSALS = {
    "401": "no credentials, or wrong ones: send 'Authorization: Bearer <token>' (the API's "
           "token standalone, an Airflow JWT in the Airflow API server) or, in the Airflow "
           "UI, its session cookie",
    "403": "the caller lacks the right (in the Airflow API server: the permission to read "
           "pools, or to edit them for a write), or a write authenticated by the session "
           "cookie lacks the X-Requested-With header or comes from another site",
}
#: and those of an operation with a body
_BODY_REFUSALS = {
    "400": "the body could not be read (e.g. it is not UTF-8)",
    "415": "the body is not JSON: send Content-Type: application/json (checked in the "
           "Airflow API server)",
}
_ERROR = {"application/json": {"schema": {
    "type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}}}


def _document_refusals(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the refusals of auth and body parsing to each operation of ``schema`` (in place),
    keeping any an operation documents itself."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            refusals = {**_REFUSALS, **(_BODY_REFUSALS if "requestBody" in operation else {})}
            responses = operation.setdefault("responses", {})
            for code, text in refusals.items():
                responses.setdefault(code, {"description": text, "content": _ERROR})
    return schema


def serve_openapi(app: FastAPI, reader: Any) -> None:
    """Serve ``/openapi.json``, ``/docs`` and the viewer's files (``/docs/assets/...``) on
    ``app`` to whoever ``reader`` (a FastAPI dependency: 401/403 for others) lets through.
    Create ``app`` with ``openapi_url=None, docs_url=None, redoc_url=None``."""
    generate = app.openapi

    def documented() -> dict[str, Any]:
        if app.openapi_schema is None:  # FastAPI keeps what ``generate`` made
            app.openapi_schema = _document_refusals(generate())
        return app.openapi_schema

    app.openapi = documented  # type: ignore[method-assign]

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(reader)])
    def openapi(request: Request) -> dict[str, Any]:
        root = request.scope.get("root_path", "").rstrip("/")
        return {**app.openapi(), "servers": [{"url": root or "/"}]}

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(reader)])
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json", title=app.title,
            swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/assets/favicon-32x32.png")

    @app.get("/docs/assets/{name}", include_in_schema=False, dependencies=[Depends(reader)])
    def asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no asset {name!r}")
        return Response(_SWAGGER.joinpath(name).read_bytes(), media_type=ASSETS[name],
                        headers={"Cache-Control": "public, max-age=86400"})
