"""Seed 001's admission contract over HTTP, for callers outside Airflow that share the
quotas: ``POST /schedule``, ``POST /complete``, ``POST /heartbeat``, ``POST /cancel``,
``GET /advice``.

One route per operation, one body, under either mount (the plugin's ``/llm-router/api``
and the standalone server's root).

Each route is a thin shell around one call of the engine's asyncio client (the same Lua
scripts as every triggerer): no admission decision is made here. What a route adds is
validation (422 naming the field), the mapping of the engine's answers to HTTP, and a
namespace for request ids: a caller's ``request_id`` is kept as ``http:<request_id>`` in the
engine, so an HTTP caller can never pick up a lease that a drain's request holds.

A wait is an answer, not an error: ``/schedule`` says ``200 {"status": "wait", "wait_ms",
"reason", "request_id"}``; send the same ``request_id`` again after ``wait_ms`` (it is also
the request's place in the wait queue). See docs/http_api.md.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from airflow_llm_router.engine import Completion
from airflow_llm_router.engine.types import Admission, AdmitRequest, Outcome, Rejection
from airflow_llm_router.names import MAX_KIND_CHARS, MODEL_NAME_RE, kind_problem
from airflow_llm_router.web.auth import Reader, Writer
from airflow_llm_router.web.errors import invalid
from airflow_llm_router.web.sources import Client

__all__ = ["REQUEST_ID_PREFIX", "router"]

router = APIRouter(tags=["admission"])

#: Prefix of HTTP callers' request ids inside the engine (see the module docstring).
REQUEST_ID_PREFIX = "http:"
#: Largest token count a body may carry (input + output of one call).
MAX_TOKENS = 10_000_000
#: Most models one request may allow.
MAX_MODELS = 64

ModelName = Annotated[str, StringConstraints(pattern=MODEL_NAME_RE.pattern)]
RequestId = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                             pattern=r"^[A-Za-z0-9._:@/+-]+$")]
LeaseId = Annotated[str, StringConstraints(
    max_length=160, pattern=MODEL_NAME_RE.pattern.removesuffix("$") + r"#[0-9]{1,20}$")]
Tokens = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKENS)]


class ScheduleBody(BaseModel):
    """Capacity for one model call."""

    model_config = ConfigDict(extra="forbid")

    estimated_tokens: Annotated[int, Field(strict=True, ge=1, le=MAX_TOKENS, description=(
        "input + output tokens expected; settled later with the actual usage"))]
    estimated_output_tokens: Tokens | None = Field(None, description=(
        "the output share of estimated_tokens, for models with separate input/output "
        "limits"))
    models: list[ModelName] | None = Field(None, min_length=1, max_length=MAX_MODELS,
                                           description="allowed models; omit for any model")
    ordered: bool = Field(True, description="with models: try them in order (overflow); "
                          "false: share them by weight")
    priority: Literal["bulk", "hot"] = "bulk"
    on_budget: Literal["overflow", "wait"] = Field("overflow", description=(
        "when a model is over its spend budget: overflow goes on to the next allowed "
        "model; wait (with ordered models) waits for the budget rather than pass the model"))
    request_id: RequestId | None = Field(None, description=(
        "makes a retried /schedule return the same lease, and keeps the request's place in "
        "the wait queue: send the same id on every retry of one call; unique per call"))
    kind: Annotated[str, StringConstraints(min_length=1, max_length=MAX_KIND_CHARS)] | None \
        = Field(None, description="the task's type: estimates are learned per model and kind")
    hedges_late: bool = Field(False, strict=True, description=(
        "true: you hedge a late call (past late_after_s, with nothing of your backlog left "
        "to schedule, you send the prompt to another model as well and keep the first "
        "answer), so a slow model is judged by when a hedged call on it would end, not by "
        "its slowest calls"))

    @field_validator("kind")
    @classmethod
    def _kind(cls, kind: str | None) -> str | None:
        problem = None if kind is None else kind_problem(kind)
        if problem:
            raise ValueError(problem)
        return kind

    @field_validator("estimated_output_tokens")
    @classmethod
    def _output(cls, out: int | None, info: Any) -> int | None:
        total = info.data.get("estimated_tokens")
        if out is not None and total is not None and out > total:
            raise ValueError(f"{out} is more than estimated_tokens ({total}); give the output "
                             "share of the estimate")
        return out


class Admitted(BaseModel):
    """Call ``model`` now, then ``POST /complete`` with ``lease_id``; heartbeat before
    ``lease_ttl_s`` passes if the call takes longer."""

    status: Literal["admitted"] = "admitted"
    model: str
    lease_id: str
    lease_ttl_s: float
    request_id: str
    reused: bool = Field(description="true: a retry of a request already admitted; the same "
                         "lease as before")
    late_after_s: float | None = Field(None, description=(
        "past this many seconds the call is late for the model (about the 85th percentile "
        "of its learned latency; null: unknown): you may send the prompt to another model "
        "as well and keep the first answer (complete each lease when its call ends: the "
        "backend counts a call in flight until then)"))


class WaitAnswer(BaseModel):
    """No capacity now: send the same request (same ``request_id``) after ``wait_ms``."""

    status: Literal["wait"] = "wait"
    wait_ms: int
    reason: str
    request_id: str


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_tokens: Tokens
    output_tokens: Tokens


class CompleteBody(BaseModel):
    """The end of an admitted call."""

    model_config = ConfigDict(extra="forbid")

    lease_id: LeaseId
    usage: Usage | None = Field(None, description="actual tokens; omit to keep the estimate")
    outcome: Outcome = Field("ok", description=(
        "rate_limited: the backend answered 429 (the model cools down for every caller); "
        "error: a 5xx or a timeout (counts towards the circuit breaker); abandoned: you "
        "never made the call (frees the slot, says nothing of the model's health)"))
    retry_after_s: float | None = Field(None, ge=0, le=86_400, allow_inf_nan=False,
                                        description="the backend's Retry-After, with a 429")
    arrival_delay_s: float | None = Field(None, ge=0, le=600, allow_inf_nan=False, description=(
        "seconds from sending the /schedule that admitted this lease to the backend "
        "receiving the call (its x-received-ms header, if it sends one; else when you sent "
        "the call): the engine widens the model's guard to cover this HTTP hop"))
    latency_s: float | None = Field(None, ge=0, le=86_400, allow_inf_nan=False, description=(
        "with outcome ok, how long the call took from your send to its answer: the model's "
        "learned latency takes it (omitted: the time from the admission to this "
        "/complete, which also counts your waits before and after the call)"))
    received_at_s: float | None = Field(None, gt=0, allow_inf_nan=False, description=(
        "when the backend says it received the call (its x-received-ms header / 1000: "
        "epoch seconds, its clock): the call then counts in its window from there, never "
        "before its admission's hop, rather than for the model's guard past it"))


class Completed(BaseModel):
    lease_id: str
    status: Literal["released", "settled"] = Field(description=(
        "released: the slot was freed and the usage settled; settled: the lease was no "
        "longer live (it expired, or this is a retried /complete), its usage in the window "
        "was settled all the same (a retry changes nothing)"))


class LeaseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lease_id: LeaseId


class Extended(BaseModel):
    lease_id: str
    lease_ttl_s: float


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: RequestId


class Cancelled(BaseModel):
    request_id: str
    cancelled: bool = Field(description="false: it was not waiting (admitted, or unknown)")


_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such lease (heartbeat: it expired, its slot was freed, or it "
          "was completed)"}}
#: the body field to change for each rejection reason (others: ``models``)
_REJECTED_FIELD = {"too_large": "estimated_tokens", "too_costly": "estimated_tokens"}


def _rejected(rejection: Rejection) -> Any:
    name = _REJECTED_FIELD.get(rejection.reason, "models")
    return invalid([{"loc": ["body", name], "field": name,
                     "type": f"impossible.{rejection.reason}", "msg": rejection.message()}])


@router.post("/schedule", summary="Reserve capacity for one call, or learn how long to wait",
             response_model=Admitted | WaitAnswer,
             responses={422: {"description": "invalid, or no allowed model could ever admit "
                              "it (field names what to change)"}})
async def schedule(body: ScheduleBody, _: Writer, router_client: Client) -> Any:
    request = AdmitRequest(
        estimated_tokens=body.estimated_tokens,
        estimated_output_tokens=body.estimated_output_tokens,
        models=tuple(body.models) if body.models is not None else None,
        ordered=body.ordered, priority=body.priority, kind=body.kind,
        on_budget=body.on_budget, hop_ms=router_client.settings.http_hop_ms,
        hedges_late=body.hedges_late,
        request_id=REQUEST_ID_PREFIX + (body.request_id or uuid.uuid4().hex))
    decision = (await router_client.admit_many([request]))[0]
    request_id = decision.request_id.removeprefix(REQUEST_ID_PREFIX)
    if isinstance(decision, Rejection):
        return _rejected(decision)
    if isinstance(decision, Admission):
        return Admitted(model=decision.model, lease_id=decision.lease_id,
                        lease_ttl_s=decision.lease_ttl_s, request_id=request_id,
                        reused=decision.reused, late_after_s=decision.late_after_s)
    return WaitAnswer(wait_ms=decision.retry_after_ms, reason=decision.reason,
                      request_id=request_id)


@router.post("/complete", summary="Free the lease's slot and settle the actual usage",
             responses=_NOT_FOUND)
async def complete(body: CompleteBody, _: Writer, router_client: Client) -> Completed:
    usage = body.usage
    done = await router_client.complete_many([Completion(
        body.lease_id, usage.input_tokens if usage else None,
        usage.output_tokens if usage else None, body.outcome, body.retry_after_s,
        arrival_delay_s=body.arrival_delay_s, latency_s=body.latency_s,
        received_at_s=body.received_at_s)])
    if done[0] == "unknown":
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"lease {body.lease_id!r} is unknown: it never existed, or its "
                            "window is over (nothing left to settle)")
    return Completed.model_validate({"lease_id": body.lease_id, "status": done[0]})


@router.post("/heartbeat", summary="Extend a lease by the lease TTL", responses=_NOT_FOUND)
async def heartbeat(body: LeaseBody, _: Writer, router_client: Client) -> Extended:
    ttl = (await router_client.heartbeat_many([body.lease_id]))[0]
    if ttl is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"lease {body.lease_id!r} expired (its slot was freed) or was "
                            "completed: schedule the call again")
    return Extended(lease_id=body.lease_id, lease_ttl_s=ttl)


@router.post("/cancel", summary="Withdraw a waiting request whose caller gave up")
async def cancel(body: CancelBody, _: Writer, router_client: Client) -> Cancelled:
    n = await router_client.cancel([REQUEST_ID_PREFIX + body.request_id])
    return Cancelled(request_id=body.request_id, cancelled=n > 0)


@router.get("/advice", summary="How many callers in parallel saturate the quotas "
            "(each model's window quota at once, or Little's law on its limits and "
            "latency)")
async def advice(_: Reader, router_client: Client,
                 backlog: Annotated[int, Query(ge=0, le=10**9,
                                               description="calls waiting to be made")] = 0,
                 per_solver_in_flight: Annotated[int, Query(ge=1, le=100_000)] = 100,
                 max_solvers: Annotated[int, Query(ge=1, le=100_000)] = 16) -> dict[str, Any]:
    result = await router_client.advice(backlog, per_solver_in_flight, max_solvers)
    return result.to_dict()
