"""The Models Backend's own protocol (the default): ``POST /single`` and ``POST /batch``
with flat JSON fields, each renamable by the connection's ``fields``::

    POST /single  {"model": "m", "prompt": "...", "max_output_tokens": 256}
    200           {"answer": "...", "usage": {"input_tokens": 12, "output_tokens": 80}}

Rate-limit headers are read in OpenAI's spelling (``x-ratelimit-*``), as the simulator and
many gateways send them. A task's call options other than its output cap have no field
here: a call with them is refused before it is admitted, rather than sent without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_llm_router.backend.protocols.base import Answer, Call, WireProtocol, usage_counts
from airflow_llm_router.backend.signals import BackendSignals, read_signals
from airflow_llm_router.llm_call import PASSED_THROUGH

__all__ = ["ModelsBackendProtocol"]


class ModelsBackendProtocol(WireProtocol):
    name = "models_backend"
    path = "/single"
    batches = True

    def auth_headers(self, secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    def refuses(self, options: Mapping[str, Any] | None) -> str | None:
        passed = sorted(set(options or ()) & set(PASSED_THROUGH))
        if not passed:
            return None
        return (f"metadata.llm_call.{passed[0]}: the models_backend protocol has no field "
                "for it; use a connection whose extra.protocol is openai or anthropic, or "
                "leave the option out")

    def answer_at(self, config: Any) -> str:
        return f"a JSON {config.fields.answer!r} field"

    def body(self, call: Call, config: Any) -> dict[str, Any]:
        f = config.fields
        body: dict[str, Any] = {f.model: call.model, f.prompt: call.prompt}
        if call.max_output_tokens is not None:
            body[f.max_output_tokens] = call.max_output_tokens
        return body

    def answer(self, doc: Mapping[str, Any], config: Any) -> Answer | None:
        f = config.fields
        if f.answer not in doc:
            return None
        inp, out = usage_counts(doc.get(f.usage), f"{f.usage}.{f.input_tokens}",
                                f"{f.usage}.{f.output_tokens}")
        return Answer(str(doc[f.answer]), inp, out)

    def signals(self, headers: Mapping[str, str]) -> BackendSignals:
        return read_signals(headers)
