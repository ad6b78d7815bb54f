"""The OpenAI endpoint's calls in the backend's own protocol, and its answers back as
OpenAI's.

With an ``openai`` backend a chat completion goes as sent. With any other, the request is
turned into the protocol's :class:`~airflow_llm_router.backend.protocols.Call` (system
messages as its system prompt, the other turns as its conversation, ``temperature`` /
``top_p`` / ``stop`` as its options, ``max_tokens`` / ``max_completion_tokens`` as its output
cap) and the protocol module builds the body, as it does for the drains; its answer, read by
the same module (:func:`~airflow_llm_router.backend.calls.read_reply`), comes back as a
``chat.completion``. What has no place in the protocol (tools, images, a ``response_format``,
a ``temperature`` for ``models_backend``, ...) is refused before anything is admitted, never
dropped: :class:`Untranslatable` names the field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from airflow_llm_router.backend.calls import CallResult
from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.protocols import Call, protocol_named
from airflow_llm_router.web.streams import DONE, completion_fields, sse, usage_object

__all__ = ["CHAT_FIELDS", "OPTION_FIELDS", "Untranslatable", "backend_body", "completion",
           "completion_events", "iter_events", "passes_through", "streams"]

#: the request fields every protocol takes (``n`` only as 1, ``stream_options`` answered here)
CHAT_FIELDS = frozenset({"model", "messages", "max_tokens", "max_completion_tokens",
                         "stream", "stream_options", "n"})
#: the call options a protocol may take (:data:`airflow_llm_router.llm_call.PASSED_THROUGH`)
OPTION_FIELDS = ("temperature", "top_p", "stop")
_SYSTEM_ROLES = ("system", "developer")
_TURN_ROLES = ("user", "assistant")


class Untranslatable(ValueError):
    """A request field the backend's protocol has no place for (``param``: its path)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def passes_through(backend: BackendConfig) -> bool:
    """Whether the backend takes OpenAI's chat completions as sent (the ``openai`` protocol)."""
    return backend.protocol == "openai"


def streams(backend: BackendConfig) -> bool:
    """Whether the backend's protocol streams (``models_backend``'s ``/single`` does not: a
    streamed request gets its whole answer as one chunk, :func:`completion_events`)."""
    return backend.protocol in ("openai", "anthropic")


def backend_body(doc: Mapping[str, Any], cap: int | None,
                 backend: BackendConfig) -> dict[str, Any]:
    """The body of the chat request ``doc`` in the backend's protocol, with the output cap
    ``cap`` (None: none was asked for and the connection sets none; an ``anthropic``
    connection always sets one, its API requires it).

    :raises Untranslatable: a field the protocol cannot carry.
    """
    wire = protocol_named(backend.protocol)
    if passes_through(backend):
        return dict(doc)
    for name in doc:
        if name not in CHAT_FIELDS and name not in OPTION_FIELDS:
            raise _no_field(name, wire.name)
    system, turns = _conversation(doc["messages"], wire.name)
    options = {name: doc[name] for name in OPTION_FIELDS if doc.get(name) is not None}
    for name in options:
        if wire.refuses({name: options[name]}) is not None:
            raise _no_field(name, wire.name)
    if wire.name == "anthropic":  # its cap: the request's, else the connection's (required)
        if system:
            options["system"] = "\n\n".join(system)
        body = wire.body(Call(doc["model"], "", cap, options, tuple(turns)), backend)
        return {**body, "stream": True} if doc.get("stream") else body
    # one prompt: the conversation's text, its system prompt first
    prompt = "\n\n".join([*system, *(turn["content"] for turn in turns)])
    return wire.body(Call(doc["model"], prompt, cap, options or None), backend)


def _no_field(param: str, protocol: str) -> Untranslatable:
    return Untranslatable(param, f"{param}: the backend speaks the {protocol} protocol, "
                          "which has no place for it; leave it out (or route this model "
                          "through an openai backend)")


def _conversation(messages: Sequence[Mapping[str, Any]], protocol: str,
                  ) -> tuple[list[str], list[dict[str, str]]]:
    """The system prompts and the user/assistant turns of ``messages``, as text."""
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        for key in message:
            if key not in ("role", "content"):
                raise _no_field(f"messages.{i}.{key}", protocol)
        role = message["role"]
        text = _text(message.get("content"), f"messages.{i}.content", protocol)
        if role in _SYSTEM_ROLES:
            system.append(text)
        elif role in _TURN_ROLES:
            turns.append({"role": role, "content": text})
        else:
            raise Untranslatable(f"messages.{i}.role", f"messages.{i}.role: {role!r} has no "
                                 f"place in the {protocol} protocol; give system, developer, "
                                 "user or assistant")
    if not turns:
        raise Untranslatable("messages", "messages: give at least one user message")
    return system, turns


def _text(content: Any, param: str, protocol: str) -> str:
    """A message's content as text (a list of text parts joined)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for j, part in enumerate(content):
        if part.get("type") != "text":
            raise Untranslatable(f"{param}.{j}", f"{param}.{j}: only text parts can go to a "
                                 f"{protocol} backend; send the content as text")
        parts.append(str(part.get("text", "")))
    return "".join(parts)


def _finish(result: CallResult, cap: int | None) -> str:
    if result.finish_reason is not None:
        return result.finish_reason
    return "length" if cap is not None and result.output_tokens == cap else "stop"


def _usage(result: CallResult) -> dict[str, int] | None:
    return usage_object(result.input_tokens, result.output_tokens)


def completion(result: CallResult, model: str, cap: int | None) -> dict[str, Any]:
    """An answered call (``result.status == "ok"``) as OpenAI's ``chat.completion``."""
    doc: dict[str, Any] = {
        **completion_fields(model, "chat.completion"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.answer},
                     "logprobs": None, "finish_reason": _finish(result, cap)}]}
    usage = _usage(result)
    if usage is not None:
        doc["usage"] = usage
    return doc


def completion_events(result: CallResult, model: str, cap: int | None,
                      include_usage: bool) -> list[bytes]:
    """An answered call as a stream of OpenAI chunks (for a protocol that does not stream:
    the answer in one chunk, its finish reason, the usage chunk if asked for, ``[DONE]``)."""
    head = completion_fields(model)
    chunks: list[dict[str, Any]] = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                    "content": result.answer},
                              "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": _finish(result, cap)}]}]
    usage = _usage(result)
    if include_usage and usage is not None:
        chunks.append({**head, "choices": [], "usage": usage})
    return [*map(sse, chunks), DONE]


async def iter_events(events: Iterable[bytes]) -> AsyncIterator[bytes]:
    """``events`` for a streamed response."""
    for event in events:
        yield event
