"""The protocols the router speaks to a backend, one module each behind one interface
(:class:`~airflow_llm_router.backend.protocols.base.WireProtocol`): build a call's request,
read its answer, read what its headers say of the provider's limits.

A ``models_backend`` connection names one in ``extra.protocol`` (``models_backend``, the
default; ``openai``; ``anthropic``); docs/backends.md shows each.
"""

from __future__ import annotations

from airflow_llm_router.backend.protocols.anthropic import AnthropicProtocol
from airflow_llm_router.backend.protocols.base import Answer, Call, WireProtocol
from airflow_llm_router.backend.protocols.models_backend import ModelsBackendProtocol
from airflow_llm_router.backend.protocols.openai import OpenAIProtocol

__all__ = ["PROTOCOLS", "Answer", "Call", "WireProtocol", "protocol_named"]

#: every protocol by its ``extra.protocol`` name
PROTOCOLS: dict[str, WireProtocol] = {
    p.name: p for p in (ModelsBackendProtocol(), OpenAIProtocol(), AnthropicProtocol())}


def protocol_named(name: str) -> WireProtocol:
    """The protocol called ``name`` (:raises KeyError: there is none)."""
    return PROTOCOLS[name]
