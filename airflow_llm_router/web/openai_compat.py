"""The governed OpenAI-compatible endpoint: ``POST /v1/chat/completions`` and
``GET /v1/models`` on the standalone server.

Any OpenAI client (the ``openai`` SDK, common.ai's operators through their connection's
``host``, a gateway) sends its calls here as it would to OpenAI; each is admitted under its
model's quota by the same engine as the drains, waiting up to ``max_wait_s`` for room (hot
before bulk, by the ``X-LLM-Router-Priority`` header), then sent to the backend connection
and settled with its real usage (:mod:`~airflow_llm_router.web.governed`).

This module holds the routes and the answers of an admitted call (as the backend sent them,
or translated: :mod:`~airflow_llm_router.web.bridge`). What a request is, and every refusal
decided before anything is admitted, as OpenAI's error object with the status an OpenAI
client library expects, are in :mod:`~airflow_llm_router.web.openai_request`.
docs/openai_endpoint.md.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from redis.exceptions import RedisError

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.exceptions import ImpossibleRequestError
from airflow_llm_router.hooks.models_backend import ModelsBackendHook
from airflow_llm_router.web.bridge import (
    Untranslatable,
    backend_body,
    completion,
    completion_events,
    iter_events,
    passes_through,
    streams,
)
from airflow_llm_router.web.governed import Forwarded, Governor, relay_events
from airflow_llm_router.web.openai_request import (
    PRIORITY_HEADER,
    ChatBody,
    OpenAIError,
    authorize,
    impossible,
    parse,
    priority_of,
    rate_limited,
    read_body,
    unavailable,
)
from airflow_llm_router.web.sources import Lazy, Unavailable

__all__ = ["DEFAULT_MAX_BODY_BYTES", "PRIORITY_HEADER", "OpenAIEndpoint", "backend_source",
           "install", "read_backend", "router"]

router = APIRouter(tags=["openai"])

#: Largest request body by default (a long conversation fits; a runaway one does not).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
_OWNER = "llm-router"


@dataclass(frozen=True)
class OpenAIEndpoint:
    """The endpoint's settings: its backend and how long a request may wait for room."""

    backend: Lazy[BackendConfig]
    max_wait_s: float = 30.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


# --- the pieces each route needs ---------------------------------------------------------

async def _router(request: Request) -> AsyncRouterClient:
    source: Lazy[AsyncRouterClient] = request.app.state.router
    return await source.get()


async def _governor(request: Request) -> Governor:
    source: Lazy[Governor] = request.app.state.openai_governor
    return await source.get()


def _backend_answer(status: int, body: bytes, retry_after_s: float | None) -> Response:
    headers = {} if retry_after_s is None else {"Retry-After": f"{retry_after_s:g}"}
    return Response(body, status_code=status, media_type="application/json", headers=headers)


# --- the routes --------------------------------------------------------------------------

@router.post("/v1/chat/completions", include_in_schema=False, response_model=None)
async def chat_completions(request: Request) -> Response:
    try:
        return await _chat(request)
    except OpenAIError as err:
        return err.response()
    except (Unavailable, RedisError) as err:
        return unavailable(err)


async def _chat(request: Request) -> Response:
    authorize(request)
    endpoint: OpenAIEndpoint = request.app.state.openai
    chat, doc = parse(await read_body(request, endpoint.max_body_bytes))
    priority = priority_of(request)
    governor = await _governor(request)
    backend = governor.backend
    cap, body = _backend_request(chat, doc, backend)
    try:
        admission = await governor.admit(chat.model, chat.input_tokens(), cap, priority)
    except ImpossibleRequestError as err:
        raise impossible(err, chat) from err
    if admission is None:
        raise rate_limited(chat, endpoint.max_wait_s)
    wants_usage = chat.stream_options is not None and chat.stream_options.include_usage
    if not chat.stream or not streams(backend):
        done = await governor.forward(admission.lease_id, body)
        return _whole(chat, done, backend, cap, wants_usage)
    start = await governor.stream(admission.lease_id, body, wants_usage)
    if start.status != 200:
        if passes_through(backend) or start.result is None:
            return _backend_answer(start.status, start.body, start.retry_after_s)
        return _backend_refusal(chat, start.status, start.body, start.retry_after_s)
    return _event_stream(relay_events(start))


def _backend_request(chat: ChatBody, doc: dict[str, Any], backend: BackendConfig,
                     ) -> tuple[int | None, dict[str, Any]]:
    """The call's output cap (reserved) and its body in the backend's protocol."""
    cap = chat.output_cap()
    if cap is None and backend.max_output_tokens is not None:
        # the connection's default cap, sent and reserved, so the model's tpm holds exactly
        cap = backend.max_output_tokens
        if passes_through(backend):
            doc = {**doc, backend.max_tokens_field: cap}
    if chat.stream and passes_through(backend):  # the usage chunk settles the call
        doc = {**doc, "stream_options": {**(doc.get("stream_options") or {}),
                                         "include_usage": True}}
    try:
        return cap, backend_body(doc, cap, backend)
    except Untranslatable as err:
        raise OpenAIError(400, str(err), param=err.param, code="unsupported_parameter") from err


def _whole(chat: ChatBody, done: Forwarded, backend: BackendConfig, cap: int | None,
           wants_usage: bool) -> Response:
    """A whole answer for the client: as sent by an ``openai`` backend, else translated
    (as one chunk of a stream if one was asked of a protocol that does not stream)."""
    if passes_through(backend) or done.result is None:
        return _backend_answer(done.status, done.body, done.retry_after_s)
    if done.result.status != "ok":
        return _backend_refusal(chat, done.status, done.body, done.retry_after_s)
    if chat.stream:
        return _event_stream(iter_events(completion_events(done.result, chat.model, cap,
                                                           wants_usage)))
    return JSONResponse(completion(done.result, chat.model, cap))


def _event_stream(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


def _backend_refusal(chat: ChatBody, status: int, body: bytes,
                     retry_after_s: float | None) -> Response:
    """A backend's refusal in another protocol, as OpenAI's error object (its status kept)."""
    said = body[:300].decode(errors="replace")
    if status == 429:
        headers = None if retry_after_s is None else {"Retry-After": f"{retry_after_s:g}"}
        return OpenAIError(429, f"Rate limit reached for {chat.model} at the backend: {said}",
                           kind="rate_limit_error", code="rate_limit_exceeded",
                           headers=headers).response()
    if status < 400:  # answered without an answer where its protocol puts one
        status = 502
    return OpenAIError(status, f"The backend answered {status}: {said}",
                       kind="api_error" if status >= 500 else "invalid_request_error",
                       code="backend_error").response()


@router.get("/v1/models", include_in_schema=False, response_model=None)
async def models(request: Request) -> Response:
    """The models with a quota, as OpenAI lists models."""
    try:
        authorize(request)
        quotas = await (await _router(request)).get_quotas()
    except OpenAIError as err:
        return err.response()
    except (Unavailable, RedisError) as err:
        return unavailable(err)
    now = int(time.time())
    data: list[dict[str, Any]] = [{"id": name, "object": "model", "created": now,
                                   "owned_by": _OWNER} for name in sorted(quotas)]
    return JSONResponse({"object": "list", "data": data})


async def read_backend(conn_id: str) -> BackendConfig:
    """The backend connection ``conn_id``'s settings, in any protocol (a chat completion
    goes to an ``openai`` backend as sent, to another translated,
    :mod:`~airflow_llm_router.web.bridge`).

    :raises AirflowNotFoundException: there is no such connection.
    :raises ConnectionConfigError: it is invalid.
    """
    return await ModelsBackendHook(conn_id).aget_config()


def backend_source(conn_id: str) -> Lazy[BackendConfig]:
    """:func:`read_backend`, on first use."""
    return Lazy(lambda: read_backend(conn_id), f"the backend (connection {conn_id!r})")


def install(app: FastAPI, endpoint: OpenAIEndpoint) -> None:
    """Serve the endpoint's routes in ``app`` (whose ``state.router`` is the engine)."""
    router_source: Lazy[AsyncRouterClient] = app.state.router

    async def build() -> Governor:
        client, backend = await router_source.get(), await endpoint.backend.get()
        return await Governor.start(client, backend, endpoint.max_wait_s)

    async def close(governor: Governor) -> None:
        await governor.aclose()

    app.state.openai = endpoint
    app.state.openai_governor = Lazy(build, "the OpenAI endpoint's backend", close)
    app.include_router(router)
