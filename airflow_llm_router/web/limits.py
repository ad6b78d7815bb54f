"""Request bodies larger than a route needs are refused before they are read (413).

FastAPI reads a whole body before any dependency runs, the auth check included, so without
a limit anyone who can reach the server could make it hold a body of any size in memory.
:class:`BodyLimit` answers 413 naming ``body`` as soon as the declared ``Content-Length`` or
the bytes received so far pass the limit of the request's path; the route never runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ADMISSION_BODY_BYTES", "BodyLimit", "too_large"]

#: Largest body of an admission route (``/schedule`` and the like need a few hundred bytes).
ADMISSION_BODY_BYTES = 64 * 1024


def too_large(limit: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI description of a route's 413."""
    return {413: {"description": f"the body is over {limit} bytes (field: body)"}}


def _refusal(limit: int, size: str) -> tuple[Message, Message]:
    body = json.dumps({"detail": [{
        "loc": ["body"], "field": "body", "type": "too_large",
        "msg": f"the request body is {size}, more than this route's {limit} bytes"}]}).encode()
    start: Message = {"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]}
    return start, {"type": "http.response.body", "body": body}


def _route_path(scope: Scope) -> str:
    """The path inside this app: where the app is mounted (the Airflow plugin mounts it at
    ``/llm-router``), ``path`` still holds the mount's prefix, given as ``root_path``."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


class BodyLimit:
    """ASGI middleware: bodies of the paths in ``limits`` (exact path -> bytes) are cut off
    at their limit with a 413; other paths pass untouched (their routes set their own)."""

    def __init__(self, app: ASGIApp, limits: Mapping[str, int]) -> None:
        self.app = app
        self.limits = dict(limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limits.get(_route_path(scope)) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            for message in _refusal(limit, f"{declared.decode(errors='replace')} bytes"):
                await send(message)
            return
        seen, refused = 0, False

        async def counted() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    refused = True
                    for part in _refusal(limit, f"over {limit} bytes"):
                        await send(part)
                    return {"type": "http.disconnect"}  # the route stops reading
            return message

        async def guarded(message: Message) -> None:
            if not refused:  # once the 413 is sent, it is the answer
                await send(message)

        await self.app(scope, counted, guarded)
