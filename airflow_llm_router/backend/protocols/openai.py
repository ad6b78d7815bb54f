"""OpenAI's chat completions, as OpenAI, Azure OpenAI, vLLM, Ollama, LiteLLM's proxy and most
gateways serve them::

    POST {base}/chat/completions
    {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "..."},
                                          {"role": "user", "content": "<prompt>"}],
     "max_tokens": 256, "temperature": 0.2, "top_p": 0.9, "stop": ["\\n\\n"]}
    200  {"choices": [{"message": {"role": "assistant", "content": "..."}}],
          "usage": {"prompt_tokens": 12, "completion_tokens": 80}}

The base URL includes the API's version (``https://api.openai.com/v1``). The password goes
as ``Authorization: Bearer``. The output cap is sent as ``max_tokens`` or, with the
connection's ``max_tokens_field``, as ``max_completion_tokens`` (OpenAI's reasoning models
take only that). Limits are read from ``x-ratelimit-limit|remaining|reset-requests|tokens``
and a 429's ``retry-after`` / ``retry-after-ms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_llm_router.backend.protocols.base import Answer, Call, WireProtocol, usage_counts
from airflow_llm_router.backend.signals import BackendSignals, read_signals

__all__ = ["OpenAIProtocol"]


class OpenAIProtocol(WireProtocol):
    name = "openai"
    path = "/chat/completions"

    def auth_headers(self, secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    def answer_at(self, config: Any) -> str:
        return "choices[0].message.content"

    def body(self, call: Call, config: Any) -> dict[str, Any]:
        options = call.options or {}
        messages = call.turns()
        if "system" in options:
            messages.insert(0, {"role": "system", "content": options["system"]})
        body: dict[str, Any] = {"model": call.model, "messages": messages}
        if call.max_output_tokens is not None:
            body[config.max_tokens_field] = call.max_output_tokens
        for name in ("temperature", "top_p", "stop"):
            if name in options:
                body[name] = options[name]
        return body

    def answer(self, doc: Mapping[str, Any], config: Any) -> Answer | None:
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        message = choices[0].get("message")
        if not isinstance(message, dict) or "content" not in message:
            return None
        inp, out = usage_counts(doc.get("usage"), "usage.prompt_tokens",
                                "usage.completion_tokens")
        finish = choices[0].get("finish_reason")
        return Answer(str(message["content"] or ""), inp, out,
                      finish if isinstance(finish, str) else None)

    def signals(self, headers: Mapping[str, str]) -> BackendSignals:
        return read_signals(headers)
