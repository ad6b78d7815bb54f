"""What every HTTP face of the simulator shares: the backend behind the app, and the body a
cut connection leaves."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import Response

from llm_router_devkit.simulator.provider import SimulatedBackend

__all__ = ["Backend", "cut_json"]


def _backend(request: Request) -> SimulatedBackend:
    backend: SimulatedBackend = request.app.state.backend
    return backend


#: the app's simulated backend, as a FastAPI dependency
Backend = Annotated[SimulatedBackend, Depends(_backend)]


def cut_json(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    """A 200 carrying the first half of ``body``'s JSON: never parseable, as a dropped
    connection behind a proxy leaves it (the length header matches what is sent)."""
    raw = json.dumps(body).encode()
    return Response(raw[: len(raw) // 2], status_code=200, media_type="application/json",
                    headers=headers)
