"""Anthropic's messages API::

    POST {base}/v1/messages     x-api-key: <password>     anthropic-version: 2023-06-01
    {"model": "claude-haiku-4-5", "max_tokens": 256, "system": "...",
     "messages": [{"role": "user", "content": "<prompt>"}],
     "temperature": 0.2, "top_p": 0.9, "stop_sequences": ["\\n\\n"]}
    200  {"content": [{"type": "text", "text": "..."}],
          "usage": {"input_tokens": 12, "output_tokens": 80}}

The base URL is the host (``https://api.anthropic.com``). ``max_tokens`` is required by the
API, so a connection of this protocol must set ``max_output_tokens`` (a task's own cap wins).
Input tokens count cache writes and reads too (``cache_creation_input_tokens``,
``cache_read_input_tokens``), so a settlement never counts less than the call spent.
Limits are read from ``anthropic-ratelimit-requests|tokens-limit|remaining|reset`` (the
reset an RFC 3339 time) and a 429's ``retry-after``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow_llm_router.backend.protocols.base import Answer, Call, WireProtocol, usage_counts
from airflow_llm_router.backend.signals import BackendSignals, read_received, whole_header

__all__ = ["ANTHROPIC_VERSION", "FINISH_REASONS", "AnthropicProtocol"]

#: the API version sent unless the connection's ``headers`` set ``anthropic-version``
ANTHROPIC_VERSION = "2023-06-01"
_HEADER = "anthropic-ratelimit-{kind}-{what}"
_CACHE = ("cache_creation_input_tokens", "cache_read_input_tokens")
#: Anthropic's ``stop_reason`` as OpenAI's ``finish_reason``
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
                  "max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}


def _seconds_until(stamp: str | None) -> float | None:
    """Seconds from now to an RFC 3339 time (None: absent, unreadable or past)."""
    if stamp is None:
        return None
    try:
        then = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if then.tzinfo is None:
        return None
    left = then.timestamp() - time.time()
    return left if left > 0 else None


class AnthropicProtocol(WireProtocol):
    name = "anthropic"
    path = "/v1/messages"

    def auth_headers(self, secret: str) -> dict[str, str]:
        return {"x-api-key": secret}

    def default_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def answer_at(self, config: Any) -> str:
        return "content[].text"

    def body(self, call: Call, config: Any) -> dict[str, Any]:
        options = call.options or {}
        cap = call.max_output_tokens or config.max_output_tokens
        body: dict[str, Any] = {"model": call.model, "max_tokens": cap,
                                "messages": call.turns()}
        for name in ("system", "temperature", "top_p"):
            if name in options:
                body[name] = options[name]
        if "stop" in options:
            stop = options["stop"]
            body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        return body

    def answer(self, doc: Mapping[str, Any], config: Any) -> Answer | None:
        content = doc.get("content")
        if not isinstance(content, list):
            return None
        text = "".join(str(block.get("text", "")) for block in content
                       if isinstance(block, dict) and block.get("type") == "text")
        usage = doc.get("usage")
        inp, out = usage_counts(usage, "usage.input_tokens", "usage.output_tokens")
        if inp is not None and isinstance(usage, Mapping):
            inp += sum(n for n in (usage.get(k) for k in _CACHE)
                       if isinstance(n, int) and not isinstance(n, bool) and n > 0)
        stop = doc.get("stop_reason")
        return Answer(text, inp, out, FINISH_REASONS.get(stop) if isinstance(stop, str) else None)

    def signals(self, headers: Mapping[str, str]) -> BackendSignals:
        hold: float | None = None
        for kind in ("requests", "tokens"):
            if whole_header(headers, _HEADER.format(kind=kind, what="remaining")) == 0:
                left = _seconds_until(headers.get(_HEADER.format(kind=kind, what="reset")))
                if left is not None:
                    hold = max(hold or 0.0, left)
        return BackendSignals(
            limit_requests=whole_header(headers, _HEADER.format(kind="requests",
                                                                what="limit")) or None,
            limit_tokens=whole_header(headers, _HEADER.format(kind="tokens",
                                                              what="limit")) or None,
            hold_s=hold,
            received_at_s=read_received(headers),
        )
