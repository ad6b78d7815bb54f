"""HTTP face of the simulator: the Models Backend's ``/single`` and ``/batch``, plus measurement
(OpenAI's and Anthropic's faces of the same provider: :mod:`.faces`).

Handlers are ``async`` and run on one event loop, so the synchronous admission in
:class:`~llm_router_devkit.simulator.provider.SimulatedBackend` is atomic without locks.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import JSONResponse, Response

from llm_router_devkit.simulator import protocol as p
from llm_router_devkit.simulator.connections import CountConnections
from llm_router_devkit.simulator.faces import faces
from llm_router_devkit.simulator.http_parts import Backend, cut_json
from llm_router_devkit.simulator.limits import retry_after_header
from llm_router_devkit.simulator.profile import SimulatorProfile
from llm_router_devkit.simulator.provider import (
    Admission,
    Rejection,
    SimulatedBackend,
    UnknownModelError,
)


def _retry_after_s(seconds: float) -> float:
    """Round up to the millisecond, so a client that waits exactly this long is in time."""
    return math.ceil(seconds * 1000) / 1000


def _rejection_body(rejection: Rejection) -> dict[str, Any]:
    return {
        p.ERROR: p.ERR_RATE_LIMITED,
        p.REASON: rejection.reason,
        p.MODEL: rejection.model,
        p.RETRY_AFTER_S: _retry_after_s(rejection.retry_after_s),
        p.DETAIL: f"{rejection.reason} limit of {rejection.model} reached",
    }


def _rejection_response(rejection: Rejection, said: dict[str, str]) -> JSONResponse:
    headers = {
        **said,
        p.RETRY_AFTER_HEADER: retry_after_header(rejection.retry_after_s),
        p.RETRY_AFTER_MS_HEADER: str(math.ceil(rejection.retry_after_s * 1000)),
    }
    return JSONResponse(_rejection_body(rejection), status_code=429, headers=headers)


def _unknown_model(model: str) -> JSONResponse:
    body = {p.ERROR: p.ERR_UNKNOWN_MODEL, p.MODEL: model, p.DETAIL: f"unknown model {model!r}"}
    return JSONResponse(body, status_code=404)


# One router per resource: the backend's own API, measurement, and run-time limits.
calls = APIRouter(tags=["models backend"])
measurement = APIRouter(tags=["measurement"])
limits = APIRouter(tags=["limits"])


@calls.get("/health")
async def health(backend: Backend) -> dict[str, Any]:
    """Liveness, for readiness polling."""
    profile = backend.profile
    return {"status": "ok", "models": len(profile.models), "time_scale": profile.time_scale}


@calls.post("/single", response_model=None)
async def single(request: p.SingleRequest, backend: Backend) -> Response:
    """One prompt: 200 after the model's (scaled) latency (its body cut short on a truncate
    fault), or 404/429/500/504."""
    backend.calls["single"] += 1
    received = await backend.arrive()
    try:
        admission = backend.admit(request.model, request.prompt, request.max_output_tokens)
    except UnknownModelError:
        return _unknown_model(request.model)
    said = backend.limit_headers(request.model, received)
    if isinstance(admission, Rejection):
        return _rejection_response(admission, said)
    outcome = await backend.run(admission)
    if outcome.truncated:
        return cut_json(outcome.body, said)
    return JSONResponse(outcome.body, status_code=outcome.status, headers=said)


def _admit_item(
    backend: SimulatedBackend, item: p.BatchItem, result: dict[str, Any]
) -> Admission | None:
    """Admit one batch item, filling ``result`` when it is refused at once."""
    try:
        admission = backend.admit(item.model, item.prompt, item.max_output_tokens)
    except UnknownModelError:
        result.update({p.STATUS: 404, p.ERROR: p.ERR_UNKNOWN_MODEL})
        return None
    if isinstance(admission, Rejection):
        result.update(
            {
                p.STATUS: 429,
                p.ERROR: p.ERR_RATE_LIMITED,
                p.REASON: admission.reason,
                p.RETRY_AFTER_S: _retry_after_s(admission.retry_after_s),
            }
        )
        return None
    return admission


@calls.post("/batch", response_model=None)
async def batch(request: p.BatchRequest, backend: Backend) -> dict[str, Any] | Response:
    """Items run in parallel; the answer waits for the slowest, as the real backend does.

    One truncate fault among the items cuts the whole body (it is one body), so every item
    of that batch is lost to the client and counted ``truncated``.
    """
    backend.calls["batch"] += 1
    backend.calls["batch_items"] += len(request.items)
    results: list[dict[str, Any]] = []
    running: list[tuple[dict[str, Any], Admission]] = []
    received = await backend.arrive()
    for item in request.items:  # admitted one by one at arrival, like separate calls
        result: dict[str, Any] = {p.ID: item.id}
        results.append(result)
        admission = _admit_item(backend, item, result)
        if admission is not None:
            running.append((result, admission))
    said = backend.limit_headers(request.items[0].model, received) if request.items else {}
    outcomes = await asyncio.gather(*(backend.run(a) for _, a in running))
    for (result, _), outcome in zip(running, outcomes, strict=True):
        result[p.STATUS] = outcome.status
        if outcome.status == 200:
            body = outcome.body
            result.update({k: body[k] for k in (p.ANSWER, p.USAGE, p.LATENCY_S)})
        else:
            result[p.ERROR] = outcome.body[p.ERROR]
    if any(outcome.truncated for outcome in outcomes):
        for (_, admission), outcome in zip(running, outcomes, strict=True):
            if outcome.status == 200 and not outcome.truncated:
                backend.lost_with_batch(admission)
        return cut_json({p.RESULTS: results}, said)
    return JSONResponse({p.RESULTS: results}, headers=said)


@measurement.get("/stats")
async def stats(backend: Backend) -> dict[str, Any]:
    """Counters, peaks and violations per model since the last reset."""
    return backend.stats()


@measurement.post("/stats/reset")
async def reset(backend: Backend) -> dict[str, Any]:
    """Start a new measurement (see ``SimulatedBackend.reset``)."""
    backend.reset()
    return {"status": "reset"}


@measurement.get("/timeline", response_model=None)
async def timeline(
    backend: Backend, bucket_s: Annotated[float | None, Query(gt=0)] = None
) -> dict[str, Any] | JSONResponse:
    """Per-bucket arrivals; ``bucket_s`` in wall-clock seconds, one scaled window if omitted."""
    try:
        return backend.timeline(bucket_s or backend.profile.scaled_window_s)
    except ValueError as err:
        return JSONResponse({p.ERROR: "bad_request", p.DETAIL: str(err)}, status_code=422)


@measurement.get("/profile")
async def get_profile(backend: Backend) -> dict[str, Any]:
    """The profile, with each model's current limits (for capacity-bound arithmetic)."""
    data = backend.profile.model_dump()
    for entry in data["models"]:
        entry.update(backend.limiters[entry["name"]].limits.model_dump())
    return data


@limits.get("/limits")
async def all_limits(backend: Backend) -> dict[str, Any]:
    """Every model's current provider limits."""
    return {name: lim.limits.model_dump() for name, lim in backend.limiters.items()}


@limits.put("/limits/{model}", response_model=None)
async def put_limits(
    model: str, update: p.LimitsUpdate, backend: Backend
) -> dict[str, Any] | JSONResponse:
    """Change a model's limits from the next arrival; omitted fields are kept."""
    try:
        new_limits = backend.set_limits(model, update.model_dump(exclude_unset=True))
    except UnknownModelError:
        return _unknown_model(model)
    return {p.MODEL: model, "limits": new_limits.model_dump()}


def create_app(
    profile: SimulatorProfile, *, clock: Callable[[], float] = time.monotonic
) -> FastAPI:
    """Build the simulator app for ``profile``; its state lives in ``app.state.backend``.

    Each app has its own state, so several simulators can run in one process.

    :param clock: wall-clock seconds used for windows and stats (``time.monotonic``); sleeps
        use the event loop's clock, which is monotonic too.
    """
    app = FastAPI(
        title="Models Backend simulator",
        description="A stand-in for the Models Backend, with provider limits and faults.",
        version="1",
    )
    app.state.backend = SimulatedBackend(profile, clock=clock)
    for router in (calls, faces, measurement, limits):
        app.include_router(router)
    app.add_middleware(CountConnections, counter=app.state.backend.connections)
    return app
