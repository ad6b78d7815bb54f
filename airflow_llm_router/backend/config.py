"""Where and how to call the Models Backend: URL, paths, timeout, headers, field names.

Built from a ``models_backend`` connection by
:class:`~airflow_llm_router.hooks.models_backend.ModelsBackendHook`; field names are
configurable because a real backend may spell them differently from the simulator's.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PROTOCOL_NAMES", "BackendConfig", "BackendFields", "ProtocolName"]

#: the protocols a backend may speak (:mod:`airflow_llm_router.backend.protocols`)
ProtocolName = Literal["models_backend", "openai", "anthropic"]
PROTOCOL_NAMES: tuple[str, ...] = get_args(ProtocolName)


class BackendFields(BaseModel):
    """JSON field names of ``POST /single`` and ``/batch`` (defaults: the simulator's); the
    ``models_backend`` protocol's only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "model"
    prompt: str = "prompt"
    max_output_tokens: str = "max_output_tokens"
    answer: str = "answer"
    usage: str = "usage"
    input_tokens: str = "input_tokens"
    output_tokens: str = "output_tokens"
    items: str = "items"
    id: str = "id"
    results: str = "results"
    status: str = "status"
    error: str = "error"
    retry_after_s: str = "retry_after_s"


class BackendConfig(BaseModel):
    """Where and how to call the Models Backend (built from a ``models_backend`` connection).

    :param base_url: e.g. ``http://models-backend:8080``; for ``openai`` with the API's
        version (``https://api.openai.com/v1``), for ``anthropic`` without
        (``https://api.anthropic.com``).
    :param protocol: what the backend speaks: ``models_backend`` (``/single``, ``/batch``),
        ``openai`` (chat completions) or ``anthropic`` (messages); see
        :mod:`airflow_llm_router.backend.protocols`.
    :param single_path: path of the one-prompt endpoint (None: the protocol's,
        ``/single``, ``/chat/completions`` or ``/v1/messages``).
    :param max_tokens_field: the ``openai`` protocol's name for the output cap:
        ``max_tokens`` or ``max_completion_tokens``.
    :param timeout_s: a call taking longer is abandoned and counted as an error.
    :param headers: extra headers (auth comes from the connection's password, not here).
    :param max_output_tokens: the output cap sent with every call (under the name
        ``fields.max_output_tokens``, e.g. ``max_tokens``) unless the prompt or the solver
        sets one. With a cap, a call cannot write more than it, so admission reserves input +
        cap and a tokens-per-window target holds exactly; without one, it reserves the
        model's learned output per call (the 95th percentile of its recent calls), which a
        longer answer can exceed.
    :param rate_limit_headers: read what the backend says in its headers
        (``x-ratelimit-limit-*``, ``-remaining-*``, ``-reset-*``, ``x-received-ms``; see
        :mod:`airflow_llm_router.backend.signals`): its stated limits cap the model's
        effective limit (they must count over the quota's window), nothing remaining cools
        the model down until the reset, and arrival delays widen the model's guard. Turn
        off for a backend whose headers describe some other limit (e.g. a per-key limit
        shared with callers outside the router, or a different window).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    protocol: ProtocolName = "models_backend"
    single_path: str | None = None
    batch_path: str = "/batch"
    timeout_s: float = Field(300.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    fields: BackendFields = Field(default_factory=BackendFields)
    max_output_tokens: int | None = Field(None, ge=1)
    rate_limit_headers: bool = True
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
