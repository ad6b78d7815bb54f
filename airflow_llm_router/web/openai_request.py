"""A chat completion request as the OpenAI endpoint reads it, and every refusal of one
decided before anything is admitted.

Every refusal is OpenAI's error object (``{"error": {"message", "type", "param",
"code"}}``, :class:`OpenAIError`) with the status an OpenAI client library expects: a
missing or wrong key (401), a body over the limit (413), a bad body or header (400,
``param`` naming the field), an unknown model (404), ``max_tokens`` that no window of the
model can hold (400), no room within the wait (429 with ``Retry-After``), the router's
Redis unreachable (503). The routes that answer with them, and the answers of an admitted
call, are in :mod:`~airflow_llm_router.web.openai_compat`; docs/openai_endpoint.md.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airflow_llm_router.engine.types import Priority
from airflow_llm_router.exceptions import ImpossibleRequestError
from airflow_llm_router.tokens import count_input_tokens
from airflow_llm_router.web.auth import _token_caller
from airflow_llm_router.web.errors import first_line

__all__ = ["PRIORITY_HEADER", "RETRY_AFTER_S", "ChatBody", "OpenAIError", "authorize",
           "impossible", "parse", "priority_of", "rate_limited", "read_body", "unavailable"]

#: The request header that sets a call's priority: ``hot`` or ``bulk`` (the default).
PRIORITY_HEADER = "X-LLM-Router-Priority"
#: Retry-After of a 429 after the wait: the caller already waited the server's bound.
RETRY_AFTER_S = 1


class OpenAIError(Exception):
    """A refusal, answered as OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code
        self.headers = headers

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": str(self), "type": self.kind,
                                       "param": self.param, "code": self.code}},
                            status_code=self.status, headers=self.headers)


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1)
    content: str | list[dict[str, Any]] | None = None


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatBody(BaseModel):
    """The fields the router reads. Every other field goes as sent to an ``openai``
    backend; another protocol refuses what it has no place for
    (:mod:`~airflow_llm_router.web.bridge`)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=128)
    messages: list[_Message] = Field(min_length=1)
    max_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    stream: Annotated[bool, Field(strict=True)] = False
    stream_options: _StreamOptions | None = None
    n: Annotated[int, Field(strict=True, ge=1, le=1)] | None = None

    def output_cap(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def input_tokens(self) -> int:
        """The messages' tokens as the router estimates them (settled from the usage)."""
        total = 0
        for message in self.messages:
            content = message.content
            if isinstance(content, list):
                content = "".join(str(part.get("text", "")) if part.get("type") == "text"
                                  else json.dumps(part) for part in content)
            total += count_input_tokens(content or "")
        return total


# --- the checks, in the order a request meets them ----------------------------------------

def authorize(request: Request) -> None:
    """Refuse (401) a request without the router's API token as its bearer key."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    credentials = (HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())
                   if scheme.lower() == "bearer" and token.strip() else None)
    try:
        _token_caller(request, credentials)
    except HTTPException as err:
        raise OpenAIError(401, "Incorrect or missing API key: send the router's API token "
                          "as the API key (Authorization: Bearer <token>)",
                          code="invalid_api_key") from err


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) once over ``limit`` bytes, declared or read."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise _too_large(limit)
    chunks, seen = [], 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> OpenAIError:
    return OpenAIError(413, f"The request body is over this server's {limit} bytes: send a "
                       "shorter conversation", param="messages", code="request_too_large")


def parse(raw: bytes) -> tuple[ChatBody, dict[str, Any]]:
    """The body as the router reads it and as sent; refused (400) naming the first bad field."""
    try:
        doc = json.loads(raw)
    except ValueError as err:
        raise OpenAIError(400, f"The body is not JSON: {first_line(err)}",
                          code="invalid_json") from err
    if not isinstance(doc, dict):
        raise OpenAIError(400, "The body must be a JSON object", code="invalid_json")
    try:
        return ChatBody.model_validate(doc), doc
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise OpenAIError(400, f"{param}: {first['msg']}", param=param,
                          code="invalid_value") from err


def priority_of(request: Request) -> Priority:
    """The call's priority from :data:`PRIORITY_HEADER` (``bulk`` without one)."""
    value = request.headers.get(PRIORITY_HEADER, "bulk").strip().lower()
    if value not in ("hot", "bulk"):
        raise OpenAIError(400, f"{PRIORITY_HEADER}: give 'hot' or 'bulk'",
                          param=PRIORITY_HEADER, code="invalid_value")
    return "hot" if value == "hot" else "bulk"


# --- the engine's refusals, as OpenAI's ---------------------------------------------------

def impossible(err: ImpossibleRequestError, chat: ChatBody) -> OpenAIError:
    """A request the engine can never admit: an unknown model (404), too many tokens (400)."""
    if err.reason == "unknown_model":
        return OpenAIError(404, f"The model `{chat.model}` does not exist here: the router "
                           "has no quota for it", param="model", code="model_not_found")
    if err.reason == "too_large":
        param = "max_tokens" if chat.output_cap() is not None else "messages"
        return OpenAIError(400, f"{param}: the messages' tokens plus the output cap are more "
                           f"than {chat.model}'s token limit per window (tpm): lower "
                           "max_tokens or shorten the messages", param=param,
                           code="tokens_over_quota")
    return OpenAIError(400, f"model: {err}", param="model", code=err.reason)


def rate_limited(chat: ChatBody, wait_s: float) -> OpenAIError:
    """No room in the model's quota within the wait (429)."""
    return OpenAIError(429, f"Rate limit reached for {chat.model}: no room in its quota "
                       f"within {wait_s:g} s; retry after the Retry-After header",
                       kind="rate_limit_error", code="rate_limit_exceeded",
                       headers={"Retry-After": str(RETRY_AFTER_S)})


def unavailable(err: Exception) -> Response:
    """The answer (503) when the router's Redis or a source it needs cannot be reached."""
    return OpenAIError(503, f"The router is unavailable: {first_line(err)}; retry",
                       kind="api_error", code="router_unavailable",
                       headers={"Retry-After": "1"}).response()
