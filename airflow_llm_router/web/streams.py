"""A backend's server-sent events relayed to an OpenAI client as chat completion chunks,
and what settling needs of them: the usage they report, and whether they ended with an
``error`` event (the call failed mid-stream, as with a 5xx).

- ``openai``: the chunks go as sent; the usage chunk (always asked of the backend) only to
  a client that asked for it (``stream_options.include_usage``).
- ``anthropic``: ``message_start`` (the input tokens) becomes the role chunk, each
  ``text_delta`` a content chunk, ``message_delta`` (the stop reason, the output tokens)
  the finish chunk, ``message_stop`` the usage chunk if asked for and ``[DONE]``; an
  ``error`` event is passed on as OpenAI's error object. The usage is counted by the
  protocol module, as for a whole answer (cache reads and writes are input too), once
  ``message_delta`` has given the final counts; a stream without one reports none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, NamedTuple

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.protocols import protocol_named
from airflow_llm_router.backend.protocols.anthropic import FINISH_REASONS
from airflow_llm_router.backend.protocols.base import usage_counts

__all__ = ["DONE", "Relayed", "completion_fields", "relay", "sse", "usage_object"]

DONE = b"data: [DONE]\n\n"
Events = asyncio.Queue[bytes | None]


class Relayed(NamedTuple):
    """What a relayed stream reported: the input and output tokens (None, None: it
    reported none) and, if it ended with an ``error`` event, that error's type (the call
    failed, as with a 5xx; None: it did not)."""

    input_tokens: int | None
    output_tokens: int | None
    error: str | None = None


def completion_fields(model: str, kind: str = "chat.completion.chunk") -> dict[str, Any]:
    """The fields a completion made here starts with (each chunk of one stream shares
    them): a new id, the time, ``kind`` as its ``object``, and ``model``."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": kind,
            "created": int(time.time()), "model": model}


def usage_object(input_tokens: int | None, output_tokens: int | None,
                 ) -> dict[str, int] | None:
    """OpenAI's ``usage`` of these counts (None: either is unknown)."""
    if input_tokens is None or output_tokens is None:
        return None
    return {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens}


def sse(chunk: Mapping[str, Any]) -> bytes:
    """``chunk`` as one server-sent event."""
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def _data(lines: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of a stream of SSE lines (``b"[DONE]"`` or JSON bytes)."""
    async for raw in lines:
        line = raw.strip()
        if line.startswith(b"data:"):  # blank lines end events, ':' lines are comments
            yield line[5:].strip()


async def relay(lines: AsyncIterable[bytes], events: Events, backend: BackendConfig,
                model: str, client_wants_usage: bool) -> Relayed:
    """Pass a stream on to ``events`` as OpenAI chunks; its usage, and its error if it
    ended with one."""
    if backend.protocol == "anthropic":
        return await _from_anthropic(lines, events, backend, model, client_wants_usage)
    return await _from_openai(lines, events, client_wants_usage)


async def _from_openai(lines: AsyncIterable[bytes], events: Events,
                       client_wants_usage: bool) -> Relayed:
    usage: Any = None
    failed: str | None = None
    async for data in _data(lines):
        if data == b"[DONE]":
            events.put_nowait(DONE)
            continue
        forward = True
        with contextlib.suppress(ValueError):
            chunk = json.loads(data)
            if isinstance(chunk, dict) and chunk.get("usage") is not None:
                usage = chunk["usage"]
                forward = client_wants_usage or bool(chunk.get("choices"))
            if isinstance(chunk, dict) and chunk.get("error") is not None:
                failed = _error_type(chunk["error"])
        if forward:
            events.put_nowait(b"data: " + data + b"\n\n")
    return Relayed(*usage_counts(usage, "usage.prompt_tokens", "usage.completion_tokens"),
                   failed)


async def _from_anthropic(lines: AsyncIterable[bytes], events: Events,
                          backend: BackendConfig, model: str,
                          client_wants_usage: bool) -> Relayed:
    head = completion_fields(model)
    usage: dict[str, Any] = {}
    failed: str | None = None
    final = False  # message_delta seen: message_start's output count is a placeholder
    wire = protocol_named(backend.protocol)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({**head, "choices": [{"index": 0, "delta": delta,
                                        "finish_reason": finish}]})

    async for data in _data(lines):
        try:
            event = json.loads(data)
        except ValueError:
            continue
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "message_start":
            usage.update((event.get("message") or {}).get("usage") or {})
            events.put_nowait(chunk({"role": "assistant", "content": ""}))
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                events.put_nowait(chunk({"content": str(delta.get("text", ""))}))
        elif kind == "message_delta":
            usage.update(event.get("usage") or {})  # cumulative counts
            final = True
            stop = (event.get("delta") or {}).get("stop_reason")
            events.put_nowait(chunk({}, FINISH_REASONS.get(str(stop), "stop")))
        elif kind == "error":
            error = event.get("error")
            error = error if isinstance(error, dict) else {}  # a malformed event: still an error
            failed = _error_type(error)
            events.put_nowait(sse({"error": {
                "message": str(error.get("message", "the backend's stream failed")),
                "type": str(error.get("type", "api_error")), "param": None, "code": None}}))
        elif kind == "message_stop":
            break
    # without message_delta (an error event, a stream cut short) the output is unknown:
    # (None, None) keeps the reservation, never less than the call may have spent
    answer = wire.answer({"content": [], "usage": usage}, backend) if final else None
    inp, out = (None, None) if answer is None else (answer.input_tokens, answer.output_tokens)
    usage_chunk = usage_object(inp, out)
    if client_wants_usage and usage_chunk is not None:
        events.put_nowait(sse({**head, "choices": [], "usage": usage_chunk}))
    events.put_nowait(DONE)
    return Relayed(inp, out, failed)


def _error_type(error: Any) -> str:
    """An error event's type, for the call's result (its message may quote the prompt)."""
    kind = error.get("type") if isinstance(error, dict) else None
    return f"stream ended with {kind if isinstance(kind, str) else 'an error'}"
