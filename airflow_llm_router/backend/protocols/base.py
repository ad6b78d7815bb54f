"""What a backend protocol must say: how to build one call's request, where its answer and
usage are, and what its headers say of the provider's limits.

Everything else about a call (sending it, timing it, classifying its status code, retries,
hedges, settlement) is the same for every protocol and stays in
:mod:`airflow_llm_router.backend.calls` and the solver.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_llm_router.backend.signals import BackendSignals
from airflow_llm_router.tokens import whole_number

__all__ = ["Answer", "Call", "WireProtocol", "usage_counts"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    """One prompt to send: the admitted model, the output cap (None: uncapped) and the
    task's call options (:mod:`airflow_llm_router.llm_call`; checked at enqueue).
    ``messages``: a whole conversation (``user`` and ``assistant`` turns of text, the
    system prompt in ``options``) in place of the one user ``prompt``, as the OpenAI
    endpoint relays one; a protocol without turns takes ``prompt``."""

    model: str
    prompt: str
    max_output_tokens: int | None = None
    options: Mapping[str, Any] | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None

    def turns(self) -> list[dict[str, Any]]:
        """The conversation to send: ``messages``, or the prompt as one user turn."""
        if self.messages:
            return [dict(message) for message in self.messages]
        return [{"role": "user", "content": self.prompt}]


@dataclass(frozen=True)
class Answer:
    """A call's answer and its token usage (None, None: usage unknown, so the engine keeps
    its estimate for the call, never less). ``finish_reason``: why the answer ended, in
    OpenAI's words (``stop``, ``length``, ...; None: the protocol does not say)."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None = None


class WireProtocol(ABC):
    """One backend protocol. Subclasses are stateless; one instance each serves every
    connection that names it."""

    #: the value of a connection's ``extra.protocol``
    name: str
    #: path of one call under the base URL (a connection's ``single_path`` overrides it)
    path: str
    #: whether it has a batch endpoint (``models_backend``'s ``/batch``); without, a batch
    #: of calls is sent as that many single calls at once
    batches: bool = False

    @abstractmethod
    def auth_headers(self, secret: str) -> dict[str, str]:
        """The headers that carry the connection's password (an API key or token)."""

    def default_headers(self) -> dict[str, str]:
        """Headers every call of this protocol sends (a connection's ``headers`` win)."""
        return {}

    def refuses(self, options: Mapping[str, Any] | None) -> str | None:
        """Why a call with these options cannot be sent (None: it can)."""
        return None

    def answer_at(self, config: Any) -> str:
        """Where the answer is in a body, for the error of a body without it."""
        return "the answer's field"

    @abstractmethod
    def body(self, call: Call, config: Any) -> dict[str, Any]:
        """The JSON body of ``call`` (``config``: the connection's ``BackendConfig``)."""

    @abstractmethod
    def answer(self, doc: Mapping[str, Any], config: Any) -> Answer | None:
        """The answer in a 2xx body (None: it has none where the protocol puts it)."""

    @abstractmethod
    def signals(self, headers: Mapping[str, str]) -> BackendSignals:
        """What the response's headers say of the provider's limits (a case-insensitive
        mapping). Unreadable values are ignored: a header is advice, never a failure."""


def usage_counts(usage: object, input_at: str, output_at: str,
                 ) -> tuple[int | None, int | None]:
    """Input and output tokens from a usage object whose fields are named by the last part
    of ``input_at`` / ``output_at`` (their dotted paths, for the log). ``(None, None)``
    when usage is missing or a count is absent. A count that is there but is not a whole
    number >= 0 (negative, ``true``, text) is a backend bug: logged (the field and its
    value, never the prompt) and counted as unknown, since settling it would either refund
    window usage the call did spend or fail the lease's settlement."""
    if usage is None:
        return None, None
    where = input_at.rpartition(".")[0]
    if not isinstance(usage, Mapping):
        log.warning("backend answer: %r is %.80r, not an object; usage counted as unknown",
                    where, usage)
        return None, None
    counts = [(path, usage.get(path.rpartition(".")[2])) for path in (input_at, output_at)]
    bad = [(path, value) for path, value in counts
           if value is not None and not (whole_number(value) and value >= 0)]
    if bad:
        log.warning("backend answer: %s; usage counted as unknown",
                    ", ".join(f"{path} is {value!r:.80}, not a whole number >= 0"
                              for path, value in bad))
        return None, None
    inp, out = counts[0][1], counts[1][1]
    if inp is None or out is None:  # not reported (both are needed to settle)
        return None, None
    return inp, out
