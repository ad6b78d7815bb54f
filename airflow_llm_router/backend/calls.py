"""Calls to the backend over HTTP, as the router makes them, in any backend protocol.

Everything about a call is classified here into the outcome the engine needs: ok, rate
limited (with Retry-After), retryable error, or final error. What differs by protocol (the
request's body, where the answer and usage are, the rate-limit headers) is
:mod:`airflow_llm_router.backend.protocols`; the HTTP session the calls go through is
:mod:`airflow_llm_router.backend.session`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import aiohttp

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.protocols import Call, WireProtocol, protocol_named
from airflow_llm_router.backend.session import BackendHttp, Reply
from airflow_llm_router.backend.signals import BackendSignals
from airflow_llm_router.tokens import whole_number

__all__ = ["CallResult", "CallStatus", "call_batch", "call_single", "read_reply", "retry_after",
           "send_body", "since_sent", "stated"]

CallStatus = Literal["ok", "rate_limited", "error", "unknown_model", "rejected"]


@dataclass(frozen=True)
class CallResult:
    """One call's outcome. ``retryable`` is False for errors a retry cannot fix (4xx).
    ``unknown_model``: a 404 that names the model (the backend does not have it): the
    model's fault, not the prompt's, so another model may take the prompt."""

    status: CallStatus
    answer: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    retry_after_s: float | None = None
    error: str | None = None
    #: seconds from the request's write to its answer (from the call's start when the
    #: write was not seen)
    latency_s: float = 0.0
    retryable: bool = True
    #: what the backend said of its limits and timing (None: nothing, or not read)
    signals: BackendSignals | None = None
    #: when the request was written to the connection (epoch seconds), if it was
    sent_at_s: float | None = None
    #: why an answer ended, in OpenAI's words (None: the protocol does not say)
    finish_reason: str | None = None

    @property
    def arrival_delay_s(self) -> float | None:
        """How long after it was sent the backend says the call reached it (None: unsaid)."""
        if self.signals is None or self.signals.received_at_s is None or self.sent_at_s is None:
            return None
        return max(0.0, self.signals.received_at_s - self.sent_at_s)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """A reply's Retry-After in seconds (``retry-after-ms`` first), None when it gives none."""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


async def call_single(
    http: BackendHttp,
    config: BackendConfig,
    *,
    model: str,
    prompt: str,
    max_output_tokens: int | None = None,
    options: Mapping[str, Any] | None = None,
    on_sent: Callable[[], None] | None = None,
) -> CallResult:
    """Send one prompt to ``model`` in the connection's protocol; never raises for HTTP or
    network trouble.

    :param options: the task's call options (``metadata.llm_call``); a protocol that cannot
        send them refuses the call (``rejected``, not retryable) without sending it.
    :param on_sent: called once the request has been written to the connection (from
        aiohttp's trace events), i.e. when the backend can first see it.
    """
    wire = protocol_named(config.protocol)
    refused = wire.refuses(options)
    if refused is not None:
        return CallResult("rejected", error=refused, retryable=False)
    body = wire.body(Call(model, prompt, max_output_tokens, options), config)
    return (await send_body(http, config, body, on_sent))[0]


async def send_body(http: BackendHttp, config: BackendConfig, body: Mapping[str, Any],
                    on_sent: Callable[[], None] | None = None,
                    ) -> tuple[CallResult, Reply | None]:
    """Send a request ``body`` already in the connection's protocol to its one-call path;
    its outcome and the reply as the backend gave it (None: no reply, a transport error or
    a timeout). Never raises for HTTP or network trouble."""
    wire = protocol_named(config.protocol)
    started = time.monotonic()
    try:
        response, sent_at = await http.post(config.single_path or wire.path, body, on_sent)
    except TimeoutError:
        return CallResult("error", error=f"timeout after {config.timeout_s:g} s",
                          latency_s=time.monotonic() - started), None
    except (aiohttp.ClientError, OSError) as err:
        return CallResult("error", error=f"{type(err).__name__}: {err}",
                          latency_s=time.monotonic() - started), None
    return read_reply(config, response, since_sent(sent_at, started), sent_at), response


def read_reply(config: BackendConfig, response: Reply, latency_s: float,
               sent_at: float | None) -> CallResult:
    """The outcome of a whole reply in the connection's protocol: its status, answer,
    usage and what its headers say."""
    wire = protocol_named(config.protocol)
    try:
        doc = (response.json() if response.status_code < 400
               else {"detail": response.text[:300]})
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    said = _said(wire, config, response.headers)
    code = response.status_code  # Retry-After is read only where it counts: a 429
    return _with(said, sent_at, _classify(wire, config, code, doc, latency_s,
                                          retry_after(response.headers) if code == 429
                                          else None))


def since_sent(sent_at: float | None, started: float) -> float:
    """Seconds from when the request was written (epoch ``sent_at``) to now, or from
    ``started`` (monotonic) when the write was not seen: the call's own latency, without
    the wait for a connection before it (in a burst of hundreds of calls, a third of a
    fast model's latency)."""
    if sent_at is None:
        return time.monotonic() - started
    return max(0.0, time.time() - sent_at)


def _said(wire: WireProtocol, config: BackendConfig,
          headers: Mapping[str, str]) -> BackendSignals | None:
    """What the response's headers say, if the connection reads them."""
    return wire.signals(headers) if config.rate_limit_headers else None


def stated(config: BackendConfig, headers: Mapping[str, str]) -> BackendSignals | None:
    """What a reply's headers say of the backend's limits and timing, if the connection
    reads them (None: it does not)."""
    return _said(protocol_named(config.protocol), config, headers)


def _with(said: BackendSignals | None, sent_at: float | None, result: CallResult) -> CallResult:
    return result if said is None else replace(result, signals=said, sent_at_s=sent_at)


def _classify(wire: WireProtocol, config: BackendConfig, code: int, doc: dict[str, Any],
              latency: float, retry_after_s: float | None) -> CallResult:
    """One answer's outcome from its status code and JSON document."""
    if code == 429:
        return CallResult("rate_limited", retry_after_s=retry_after_s,
                          error="429 rate limited", latency_s=latency)
    if code >= 500 or code == 408:
        return CallResult("error", error=f"HTTP {code}", latency_s=latency)
    if code == 404 and "model" in str(doc).lower():
        # the seed backend's "unknown_model", OpenAI's "model_not_found", Anthropic's
        # not_found_error on "model: ..."
        return CallResult("unknown_model", error=f"HTTP 404: {str(doc)[:300]}",
                          latency_s=latency)
    if code >= 400:
        return CallResult("rejected", error=f"HTTP {code}: {str(doc)[:300]}",
                          latency_s=latency, retryable=False)
    answer = wire.answer(doc, config)
    if answer is None:
        return CallResult("error", error=f"HTTP {code} without {wire.answer_at(config)}",
                          latency_s=latency)
    return CallResult("ok", answer=answer.text, input_tokens=answer.input_tokens,
                      output_tokens=answer.output_tokens, latency_s=latency,
                      finish_reason=answer.finish_reason)


async def call_batch(
    http: BackendHttp,
    config: BackendConfig,
    *,
    model: str,
    prompts: list[str],
    max_output_tokens: int | None = None,
    caps: Sequence[int | None] | None = None,
    on_sent: Callable[[], None] | None = None,
) -> list[CallResult]:
    """Send several prompts to one model in one ``POST /batch``; one result each, in order.
    Each item's output is capped at ``caps[i]`` if given, else at ``max_output_tokens``.

    The backend answers when the slowest is done, so every item's call lasts as long as
    the batch's. A transport failure fails every item (retryably). A protocol without a
    batch endpoint sends the prompts as that many single calls at once.
    """
    wire = protocol_named(config.protocol)
    if not wire.batches:
        all_sent = _after(len(prompts), on_sent)
        return list(await asyncio.gather(*(
            call_single(http, config, model=model, prompt=prompt, on_sent=all_sent,
                        max_output_tokens=caps[i] if caps is not None else max_output_tokens)
            for i, prompt in enumerate(prompts))))
    f = config.fields
    items = []
    for i, prompt in enumerate(prompts):
        item: dict[str, Any] = {f.id: str(i), f.model: model, f.prompt: prompt}
        cap = caps[i] if caps is not None else max_output_tokens
        if cap is not None:
            item[f.max_output_tokens] = cap
        items.append(item)
    started = time.monotonic()
    try:
        response, sent_at = await http.post(config.batch_path, {f.items: items}, on_sent)
        latency = since_sent(sent_at, started)
        # the response's headers speak for the batch: every item was sent and counted with it
        said = _said(wire, config, response.headers)
        if response.status_code != 200:
            failed = _classify(wire, config, response.status_code, {}, latency,
                               retry_after(response.headers))
            return [_with(said, sent_at, failed)] * len(prompts)
        by_id = {str(r.get(f.id)): r for r in response.json()[f.results]}
    except TimeoutError:
        return [CallResult("error", error=f"timeout after {config.timeout_s:g} s")] * len(items)
    except (aiohttp.ClientError, OSError, ValueError, KeyError, TypeError,
            AttributeError) as err:
        return [CallResult("error", error=f"{type(err).__name__}: {err}")] * len(items)
    results = []
    for i in range(len(prompts)):
        doc = by_id.get(str(i), {})
        retry = doc.get(f.retry_after_s)
        results.append(_with(said, sent_at, _classify(
            wire, config, _item_status(doc.get(f.status, 500)), doc, latency,
            _item_retry_after(retry))))
    return results


def _after(count: int, then: Callable[[], None] | None) -> Callable[[], None] | None:
    """A callback that calls ``then`` at its ``count``-th call: a batch sent as single
    calls is sent once the last of them is (a send stamp is never early)."""
    if then is None:
        return None
    left = [count]

    def one_sent() -> None:
        left[0] -= 1
        if left[0] == 0:
            then()
    return one_sent


def _item_status(value: Any) -> int:
    """A batch item's status code; one that is not a whole number is a server error (500),
    so a malformed item fails alone, retryably."""
    return value if whole_number(value) else 500


def _item_retry_after(value: Any) -> float | None:
    """A batch item's Retry-After in seconds, or None when it gives none or no number."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
