"""The simulator's OpenAI and Anthropic faces: the same provider (models, limits, faults,
counters) behind ``POST /v1/chat/completions`` and ``POST /v1/messages``, with each API's
bodies, errors and rate-limit headers, so every test and benchmark can run each protocol.

A prompt costs and lasts the same on every face (its draw is from the user message); a
system message is charged as extra input. Rate-limit headers, when the profile asks for
them, are OpenAI's ``x-ratelimit-*`` (reset as a duration) and Anthropic's
``anthropic-ratelimit-*`` (reset as an RFC 3339 time).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from airflow_llm_router import count_input_tokens
from llm_router_devkit.simulator.http_parts import Backend, cut_json
from llm_router_devkit.simulator.limits import retry_after_header
from llm_router_devkit.simulator.provider import (
    Admission,
    Rejection,
    SimulatedBackend,
    UnknownModelError,
)

__all__ = ["FACE_CALLS", "face_connection", "faces"]

faces = APIRouter(tags=["provider faces"])


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]]


def _text(content: str | list[dict[str, Any]]) -> str:
    """A message's text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions`` (the fields the simulator reads; others are taken)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[_Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, gt=0)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    stream: bool = False
    stream_options: dict[str, Any] | None = None


class MessagesRequest(BaseModel):
    """``POST /v1/messages`` (``max_tokens`` is required, as Anthropic's API has it)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    max_tokens: int = Field(gt=0)
    messages: list[_Message] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stream: bool = False


def _retry_headers(rejection: Rejection) -> dict[str, str]:
    return {"retry-after": retry_after_header(rejection.retry_after_s),
            "retry-after-ms": str(math.ceil(rejection.retry_after_s * 1000))}


def _anthropic_headers(backend: SimulatedBackend, model: str,
                       received_ms: float) -> dict[str, str]:
    out = {"x-received-ms": f"{received_ms:.1f}"}
    now = time.time()
    for kind, (limit, remaining, reset_s) in backend.headroom(model).items():
        at = datetime.fromtimestamp(now + reset_s, timezone.utc)
        reset = at.isoformat(timespec="milliseconds")
        out[f"anthropic-ratelimit-{kind}-limit"] = str(limit)
        out[f"anthropic-ratelimit-{kind}-remaining"] = str(remaining)
        out[f"anthropic-ratelimit-{kind}-reset"] = reset.replace("+00:00", "Z")
    return out


def _openai_error(status: int, kind: str, message: str, code: str | None,
                  headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _anthropic_error(status: int, kind: str, message: str,
                     headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


@faces.post("/v1/chat/completions", response_model=None)
async def chat_completions(request: ChatRequest, backend: Backend) -> Response:
    """OpenAI's chat completions: 200 after the model's latency, or 404/429/500/504 with
    OpenAI's error object; ``x-ratelimit-*`` headers if the profile sends them."""
    backend.calls["chat_completions"] += 1
    prompt = "\n\n".join(_text(m.content) for m in request.messages if m.role == "user")
    system = sum(count_input_tokens(_text(m.content)) for m in request.messages
                 if m.role in ("system", "developer"))
    cap = request.max_completion_tokens or request.max_tokens
    received = await backend.arrive()
    try:
        admission = backend.admit(request.model, prompt, cap, extra_input_tokens=system)
    except UnknownModelError:
        return _openai_error(404, "invalid_request_error",
                             f"The model `{request.model}` does not exist", "model_not_found")
    said = backend.limit_headers(request.model, received)
    if isinstance(admission, Rejection):
        return _openai_error(429, admission.reason, f"Rate limit reached for {admission.model} "
                             f"on {admission.reason}", "rate_limit_exceeded",
                             {**said, **_retry_headers(admission)})
    if request.stream:
        usage_too = bool((request.stream_options or {}).get("include_usage"))
        return StreamingResponse(_chunks(backend, admission, request.model, cap, usage_too),
                                 media_type="text/event-stream", headers=said)
    outcome = await backend.run(admission)
    if outcome.status != 200:
        return _openai_error(outcome.status, "server_error", "simulated provider "
                             f"{'timeout' if outcome.status == 504 else 'error'}", None, said)
    usage = outcome.body["usage"]
    body = {
        "id": f"chatcmpl-{admission.call_id}", "object": "chat.completion",
        "created": int(time.time()), "model": request.model,
        "choices": [{"index": 0, "finish_reason": "length" if usage["output_tokens"] == cap
                     else "stop",
                     "message": {"role": "assistant", "content": outcome.body["answer"]}}],
        "usage": {"prompt_tokens": usage["input_tokens"],
                  "completion_tokens": usage["output_tokens"],
                  "total_tokens": usage["input_tokens"] + usage["output_tokens"]},
    }
    return cut_json(body, said) if outcome.truncated else JSONResponse(body, headers=said)


#: how many content chunks a streamed answer comes in
STREAM_PIECES = 3


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def _chunks(backend: SimulatedBackend, admission: Admission, model: str,
                  cap: int | None, usage_too: bool) -> AsyncIterator[bytes]:
    """A streamed chat completion, as OpenAI sends one: the role at once, the content in
    :data:`STREAM_PIECES` chunks after the model's latency, the finish reason, the usage
    chunk if asked for (``stream_options.include_usage``), ``[DONE]``. A failed call ends
    the stream with an error event."""
    head = {"id": f"chatcmpl-{admission.call_id}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}
    yield _event({**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                             "content": ""},
                                       "finish_reason": None}]})
    outcome = await backend.run(admission)
    if outcome.status != 200:
        yield _event({"error": {"message": "simulated provider error", "type": "server_error"}})
        return
    answer, usage = str(outcome.body["answer"]), outcome.body["usage"]
    step = max(1, -(-len(answer) // STREAM_PIECES))
    for at in range(0, len(answer), step):
        yield _event({**head, "choices": [{"index": 0, "delta": {"content": answer[at:at + step]},
                                           "finish_reason": None}]})
    finish = "length" if usage["output_tokens"] == cap else "stop"
    yield _event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage_too:
        yield _event({**head, "choices": [], "usage": {
            "prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["input_tokens"] + usage["output_tokens"]}})
    yield b"data: [DONE]\n\n"


def _typed(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\n".encode() + _event({"type": kind, **data})


async def _message_events(backend: SimulatedBackend, admission: Admission, model: str,
                          cap: int) -> AsyncIterator[bytes]:
    """A streamed message, as Anthropic sends one: ``message_start`` (the input tokens) at
    once, the text in :data:`STREAM_PIECES` ``content_block_delta`` events after the model's
    latency, ``message_delta`` (stop reason, output tokens), ``message_stop``. A failed call
    ends the stream with an ``error`` event."""
    yield _typed("message_start", {"message": {
        "id": f"msg_{admission.call_id}", "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": None,
        "usage": {"input_tokens": admission.draw.input_tokens, "output_tokens": 1}}})
    outcome = await backend.run(admission)
    if outcome.status != 200:
        yield _typed("error", {"error": {"type": "api_error",
                                         "message": "simulated provider error"}})
        return
    answer, usage = str(outcome.body["answer"]), outcome.body["usage"]
    yield _typed("content_block_start", {"index": 0,
                                         "content_block": {"type": "text", "text": ""}})
    step = max(1, -(-len(answer) // STREAM_PIECES))
    for at in range(0, len(answer), step):
        yield _typed("content_block_delta", {"index": 0, "delta": {
            "type": "text_delta", "text": answer[at:at + step]}})
    yield _typed("content_block_stop", {"index": 0})
    yield _typed("message_delta", {
        "delta": {"stop_reason": "max_tokens" if usage["output_tokens"] == cap else "end_turn",
                  "stop_sequence": None},
        # cumulative, the input with the system prompt's (as Anthropic's API sends it now)
        "usage": {"input_tokens": usage["input_tokens"],
                  "output_tokens": usage["output_tokens"]}})
    yield _typed("message_stop", {})


@faces.post("/v1/messages", response_model=None)
async def messages(
    request: MessagesRequest, backend: Backend,
    anthropic_version: Annotated[str | None, Header()] = None,
) -> Response:
    """Anthropic's messages: 200 after the model's latency (``stream``: its server-sent
    events), or 400 (no
    ``anthropic-version``)/404/429/500/504 with Anthropic's error object;
    ``anthropic-ratelimit-*`` headers if the profile sends them."""
    backend.calls["messages"] += 1
    if not anthropic_version:
        return _anthropic_error(400, "invalid_request_error",
                                "anthropic-version: header is required")
    prompt = "\n\n".join(_text(m.content) for m in request.messages if m.role == "user")
    system = count_input_tokens(_text(request.system)) if request.system else 0
    received = await backend.arrive()
    try:
        admission = backend.admit(request.model, prompt, request.max_tokens,
                                  extra_input_tokens=system)
    except UnknownModelError:
        return _anthropic_error(404, "not_found_error", f"model: {request.model}")
    said = _anthropic_headers(backend, request.model, received)
    if isinstance(admission, Rejection):
        return _anthropic_error(429, "rate_limit_error", f"Rate limit reached for "
                                f"{admission.model} on {admission.reason}",
                                {**said, **_retry_headers(admission)})
    if request.stream:
        return StreamingResponse(_message_events(backend, admission, request.model,
                                                 request.max_tokens),
                                 media_type="text/event-stream", headers=said)
    outcome = await backend.run(admission)
    if outcome.status != 200:
        kind = "timeout_error" if outcome.status == 504 else "api_error"
        return _anthropic_error(outcome.status, kind, "simulated provider error", said)
    usage = outcome.body["usage"]
    body = {
        "id": f"msg_{admission.call_id}", "type": "message", "role": "assistant",
        "model": request.model,
        "content": [{"type": "text", "text": outcome.body["answer"]}],
        "stop_reason": "max_tokens" if usage["output_tokens"] == request.max_tokens
        else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": usage["input_tokens"],
                  "output_tokens": usage["output_tokens"]},
    }
    return cut_json(body, said) if outcome.truncated else JSONResponse(body, headers=said)


#: the simulator's endpoint by the router's protocol name, as ``/stats`` ``calls`` counts it
FACE_CALLS = {"models_backend": "single", "openai": "chat_completions",
              "anthropic": "messages"}


def face_connection(url: str, protocol: str, *, max_output_tokens: int | None = None,
                    **extra: Any) -> dict[str, Any]:
    """A ``models_backend`` connection (as ``AIRFLOW_CONN_*`` JSON takes it) to the
    simulator at ``url`` through its face for ``protocol``: OpenAI's base URL includes the
    version, Anthropic's needs ``max_output_tokens`` (its API requires ``max_tokens``).

    :raises ValueError: an unknown protocol, or ``anthropic`` without ``max_output_tokens``.
    """
    if protocol not in FACE_CALLS:
        raise ValueError(f"protocol: {protocol!r}; give one of {', '.join(FACE_CALLS)}")
    if protocol == "anthropic" and max_output_tokens is None:
        raise ValueError("max_output_tokens: required with the anthropic protocol")
    if max_output_tokens is not None:
        extra["max_output_tokens"] = max_output_tokens
    return {"conn_type": "models_backend", "host": f"{url}/v1" if protocol == "openai" else url,
            "extra": {"protocol": protocol, **extra}}
