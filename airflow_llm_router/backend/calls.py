"""Calls to the Models Backend over HTTP, as the router makes them.

Everything about a call is classified here into the outcome the engine needs: ok, rate
limited (with Retry-After), retryable error, or final error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

from airflow_llm_router.backend.config import BackendConfig, BackendFields
from airflow_llm_router.backend.signals import BackendSignals, read_signals

__all__ = [
    "CallResult",
    "CallStatus",
    "ShardedClient",
    "call_batch",
    "call_single",
    "http_client",
]

log = logging.getLogger(__name__)

#: Connections per httpx client. httpcore's pool looks at each of its connections
#: (whether it expired, is idle, is free) every time a request starts or ends, and again
#: per queued request: its CPU per call grows with the pool's size. Small pools, each
#: call sent on the pool with the fewest calls in it, cost least (measured with
#: ``bench/solver_cpu.py``; docs/benchmarks.md, "The solver's CPU per call").
CONNECTIONS_PER_SHARD = 4
#: The most pools (above it, pools grow past ``CONNECTIONS_PER_SHARD``).
MAX_SHARDS = 64


CallStatus = Literal["ok", "rate_limited", "error", "rejected"]


class ShardedClient:
    """Several small ``httpx.AsyncClient`` pools; each call goes to the pool with the
    fewest calls in it, so a call never queues in a full pool while another has a free
    connection (with no more calls at once than ``max_connections``).

    One pool of hundreds of connections sent ~100 requests/s here; eight of 25 sent ~580/s.
    A call that waits long to be sent reaches the backend late, which is what the engine's
    send stamps correct for; sending fast keeps that correction small.
    """

    def __init__(self, config: BackendConfig, max_connections: int) -> None:
        shards = max(1, min(MAX_SHARDS, -(-max_connections // CONNECTIONS_PER_SHARD)))
        per = max(1, -(-max_connections // shards))
        tls = httpx.create_ssl_context()  # one for all pools: building it is the slow part
        self._clients = [
            httpx.AsyncClient(
                verify=tls,
                base_url=config.base_url,
                headers=config.headers,
                timeout=httpx.Timeout(config.timeout_s, connect=10.0),
                limits=httpx.Limits(max_connections=per, max_keepalive_connections=per),
            )
            for _ in range(shards)
        ]
        #: calls in each pool now
        self._busy = [0] * shards

    @property
    def pools(self) -> int:
        return len(self._clients)

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """``POST path`` on the pool with the fewest calls in it (the first such)."""
        busy = self._busy
        i = busy.index(min(busy))
        busy[i] += 1
        try:
            return await self._clients[i].post(path, **kwargs)
        finally:
            busy[i] -= 1

    async def __aenter__(self) -> ShardedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


@dataclass(frozen=True)
class CallResult:
    """One call's outcome. ``retryable`` is False for errors a retry cannot fix (4xx)."""

    status: CallStatus
    answer: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    retry_after_s: float | None = None
    error: str | None = None
    latency_s: float = 0.0
    retryable: bool = True
    #: what the backend said of its limits and timing (None: nothing, or not read)
    signals: BackendSignals | None = None
    #: when the request was written to the connection (epoch seconds), if it was
    sent_at_s: float | None = None

    @property
    def arrival_delay_s(self) -> float | None:
        """How long after it was sent the backend says the call reached it (None: unsaid)."""
        if self.signals is None or self.signals.received_at_s is None or self.sent_at_s is None:
            return None
        return max(0.0, self.signals.received_at_s - self.sent_at_s)


def _retry_after(response: httpx.Response) -> float | None:
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = response.headers.get(header)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def _usage(body: dict[str, Any], f: BackendFields) -> tuple[int | None, int | None]:
    """The answer's token usage, or ``(None, None)``: usage unknown, so the engine keeps its
    estimate for the call (never less). Usage that is there but is not a whole number >= 0
    (a negative count, ``true``, text) is a backend bug: it is logged (the field and its
    value, never the prompt) and counts as unknown, since settling it would either refund
    window usage the call did spend or fail the lease's settlement."""
    usage = body.get(f.usage)
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        log.warning("backend answer: %r is %.80r, not an object; usage counted as unknown",
                    f.usage, usage)
        return None, None
    inp, out = usage.get(f.input_tokens), usage.get(f.output_tokens)
    bad = [(name, value) for name, value in ((f.input_tokens, inp), (f.output_tokens, out))
           if value is not None and not _token_count(value)]
    if bad:
        log.warning("backend answer: %s; usage counted as unknown",
                    ", ".join(f"{f.usage}.{name} is {value!r:.80}, not a whole number >= 0"
                              for name, value in bad))
        return None, None
    if inp is None or out is None:  # not reported (both are needed to settle)
        return None, None
    return inp, out


def _token_count(value: object) -> bool:
    """Whether ``value`` is a token count (``bool`` is an ``int`` in Python, not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


async def call_single(
    http: ShardedClient,
    config: BackendConfig,
    *,
    model: str,
    prompt: str,
    max_output_tokens: int | None = None,
    on_sent: Callable[[], None] | None = None,
) -> CallResult:
    """Send one prompt to ``model``; never raises for HTTP or network trouble.

    :param on_sent: called once the request has been written to the connection (from
        httpcore's trace events), i.e. when the backend can first see it.
    """
    f = config.fields
    body: dict[str, Any] = {f.model: model, f.prompt: prompt}
    if max_output_tokens is not None:
        body[f.max_output_tokens] = max_output_tokens
    started = time.monotonic()
    sent = _SentAt(on_sent)
    try:
        response = await http.post(config.single_path, json=body,
                                          timeout=config.timeout_s,
                                          extensions=sent.extensions())
    except httpx.TimeoutException:
        return CallResult("error", error=f"timeout after {config.timeout_s:g} s",
                          latency_s=time.monotonic() - started)
    except httpx.HTTPError as err:
        return CallResult("error", error=f"{type(err).__name__}: {err}",
                          latency_s=time.monotonic() - started)
    latency = time.monotonic() - started
    try:
        doc = (response.json() if response.status_code < 400
               else {"detail": response.text[:300]})
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    said = _said(config, response)
    code = response.status_code  # Retry-After is read only where it counts: a 429
    return _with(said, sent.at, _classify(code, doc, f, latency,
                                          _retry_after(response) if code == 429 else None))


def _said(config: BackendConfig, response: httpx.Response) -> BackendSignals | None:
    """What the response's headers say, if the connection reads them."""
    return read_signals(response.headers) if config.rate_limit_headers else None


def _with(said: BackendSignals | None, sent_at: float | None, result: CallResult) -> CallResult:
    return result if said is None else replace(result, signals=said, sent_at_s=sent_at)


def _classify(code: int, doc: dict[str, Any], f: BackendFields, latency: float,
              retry_after_s: float | None) -> CallResult:
    """One answer's outcome from its status code and JSON document."""
    if code == 429:
        return CallResult("rate_limited", retry_after_s=retry_after_s,
                          error="429 rate limited", latency_s=latency)
    if code >= 500 or code == 408:
        return CallResult("error", error=f"HTTP {code}", latency_s=latency)
    if code >= 400:
        return CallResult("rejected", error=f"HTTP {code}: {str(doc)[:300]}",
                          latency_s=latency, retryable=False)
    if f.answer not in doc:
        return CallResult("error", error=f"HTTP {code} without a JSON {f.answer!r} field",
                          latency_s=latency)
    inp, out = _usage(doc, f)
    return CallResult("ok", answer=str(doc[f.answer]), input_tokens=inp, output_tokens=out,
                      latency_s=latency)


async def call_batch(
    http: ShardedClient,
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
    the batch's. A transport failure fails every item (retryably).
    """
    f = config.fields
    items = []
    for i, prompt in enumerate(prompts):
        item: dict[str, Any] = {f.id: str(i), f.model: model, f.prompt: prompt}
        cap = caps[i] if caps is not None else max_output_tokens
        if cap is not None:
            item[f.max_output_tokens] = cap
        items.append(item)
    started = time.monotonic()
    sent = _SentAt(on_sent)
    try:
        response = await http.post(config.batch_path, json={f.items: items},
                                          timeout=config.timeout_s,
                                          extensions=sent.extensions())
        latency = time.monotonic() - started
        # the response's headers speak for the batch: every item was sent and counted with it
        said = _said(config, response)
        if response.status_code != 200:
            failed = _classify(response.status_code, {}, f, latency, _retry_after(response))
            return [_with(said, sent.at, failed)] * len(prompts)
        by_id = {str(r.get(f.id)): r for r in response.json()[f.results]}
    except httpx.TimeoutException:
        return [CallResult("error", error=f"timeout after {config.timeout_s:g} s")] * len(items)
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
        return [CallResult("error", error=f"{type(err).__name__}: {err}")] * len(items)
    results = []
    for i in range(len(prompts)):
        doc = by_id.get(str(i), {})
        retry = doc.get(f.retry_after_s)
        results.append(_with(said, sent.at, _classify(
            int(doc.get(f.status, 500)), doc, f, latency,
            float(retry) if retry is not None else None)))
    return results


class _SentAt:
    """When the request was written to the connection (httpcore's trace events), and a
    callback then."""

    def __init__(self, on_sent: Callable[[], None] | None) -> None:
        self._on_sent = on_sent
        self.at: float | None = None

    def extensions(self) -> dict[str, Any]:
        async def trace(event: str, info: dict[str, Any]) -> None:
            if event == "http11.send_request_body.complete":
                self.at = time.time()
                if self._on_sent is not None:
                    self._on_sent()

        return {"trace": trace}


async def http_client(config: BackendConfig, max_connections: int) -> ShardedClient:
    """An async HTTP client for the backend, sized for ``max_connections`` calls at once.

    Built in a worker thread: each pool loads TLS settings (~0.1 s), which would otherwise
    stall every trigger sharing the triggerer's event loop.
    """
    return await asyncio.to_thread(ShardedClient, config, max_connections)
