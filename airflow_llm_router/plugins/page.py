"""The "LLM Quotas" page: one HTML file and its script and style, behind the same auth as
the API (the Airflow UI shows it in an iframe, which sends the session cookie)."""

from __future__ import annotations

import html
from importlib.resources import files

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import HTMLResponse, Response

from airflow_llm_router.web.auth import CSRF_HEADER, Reader

router = APIRouter(tags=["quota page"])

_STATIC = files("airflow_llm_router.plugins") / "static"
_ASSETS = {"quotas.js": "text/javascript", "quotas.css": "text/css",
           "models.js": "text/javascript", "backlog.js": "text/javascript",
           "budget.js": "text/javascript", "budget.css": "text/css"}
#: The Traffic chart and the charting library served with it (uPlot 1.6.32 from npm, MIT:
#: vendor/uPlot.LICENSE), so the page needs no CDN and works offline.
_ASSETS.update({"traffic.js": "text/javascript", "traffic.css": "text/css",
                "vendor/uPlot.iife.min.js": "text/javascript",
                "vendor/uPlot.min.css": "text/css", "vendor/uPlot.LICENSE": "text/plain"})
#: The page refreshes usage this often (ms).
REFRESH_MS = 3000


@router.get("/ui", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, _: Reader) -> HTMLResponse:
    """The page; ``<base>`` makes its relative URLs work under any mount point."""
    base = html.escape(request.scope.get("root_path", "").rstrip("/") + "/", quote=True)
    body = ((_STATIC / "index.html").read_text()
            .replace("{{base}}", base)
            .replace("{{refresh_ms}}", str(REFRESH_MS))
            .replace("{{csrf_header}}", CSRF_HEADER))
    return HTMLResponse(body, headers={"Cache-Control": "no-store"})


@router.get("/ui/{name:path}", include_in_schema=False)
def asset(name: str, _: Reader) -> Response:
    if name not in _ASSETS:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no asset {name!r}")
    return Response(_STATIC.joinpath(*name.split("/")).read_text(), media_type=_ASSETS[name],
                    headers={"Cache-Control": "no-cache"})
