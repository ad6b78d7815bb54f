"""One governed chat completion: admitted under its model's quota, sent to the backend
through its connection, settled with the usage the backend reports.

The same engine as the drains decides (the asyncio client's Lua scripts, waiting on the
release channel); this module only waits, sends and settles, as a solver does:

- admission reserves the request's input tokens plus its ``max_tokens`` /
  ``max_completion_tokens`` (without one, the model's learned output per call), and the
  call counts in its window from when it was written to the backend (send stamps);
- the lease is heartbeated while the call runs and settled when it ends, with the real
  usage (a stream's from its final usage chunk, which is always asked of an ``openai``
  backend, or Anthropic's ``message_delta``: :mod:`~airflow_llm_router.web.streams`), or
  with the estimate kept when the backend reported none (never less than the call may have
  spent);
- a stream is read from the backend to its end by a task of its own, so a client that
  disconnects mid-stream never leaves a lease unsettled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from airflow_llm_router.backend import BackendConfig, BackendHttp, CallResult
from airflow_llm_router.backend.calls import read_reply, send_body, since_sent, stated
from airflow_llm_router.backend.protocols import protocol_named
from airflow_llm_router.backend.session import Reply
from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, Priority
from airflow_llm_router.solver.outage import RedisOutage
from airflow_llm_router.solver.sending import SendStamps
from airflow_llm_router.solver.settling import settlement
from airflow_llm_router.solver.upkeep import Progress, keep_alive, stop_helpers
from airflow_llm_router.web.streams import relay

__all__ = ["REQUEST_ID_PREFIX", "Forwarded", "Governor", "StreamStart"]

log = logging.getLogger(__name__)

#: Prefix of the engine's request ids of calls admitted by the endpoint.
REQUEST_ID_PREFIX = "oai:"
#: How long settlements, heartbeats and send stamps retry through a Redis outage.
REDIS_OUTAGE_S = 30.0
#: Calls the endpoint sends to the backend at once, per process.
MAX_CONNECTIONS = 1000


@dataclass(frozen=True)
class Forwarded:
    """A whole answer: the backend's status, body and ``Retry-After`` (a 429's), and the
    call's outcome as the backend's protocol reads it (None: the backend did not answer)."""

    status: int
    body: bytes
    retry_after_s: float | None = None
    result: CallResult | None = None


@dataclass
class StreamStart:
    """A stream's start: its status (200: ``events`` yields the server-sent events; else
    ``body`` is the error, and ``result`` the backend's refusal as its protocol reads it,
    None when the backend did not answer and ``body`` is this endpoint's own error)."""

    status: int
    body: bytes = b""
    retry_after_s: float | None = None
    events: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    result: CallResult | None = None


@dataclass
class Governor:
    """Admits, sends and settles the endpoint's calls, in one process's event loop.

    :param router: the engine's asyncio client (shared with the other routes).
    :param backend: the backend connection's settings (any protocol: the bodies it is
        given are already in it, :mod:`~airflow_llm_router.web.bridge`).
    :param max_wait_s: the longest a request waits for room before its 429.
    """

    router: AsyncRouterClient
    backend: BackendConfig
    http: BackendHttp
    max_wait_s: float
    outage: RedisOutage = field(default_factory=lambda: RedisOutage(REDIS_OUTAGE_S))
    live: Progress = field(default_factory=lambda: Progress(total=0))
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    stamps: SendStamps | None = None
    helpers: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    async def start(cls, router: AsyncRouterClient, backend: BackendConfig,
                    max_wait_s: float) -> Governor:
        """A governor with its HTTP session and lease heartbeats (in the running loop)."""
        gov = cls(router, backend, BackendHttp(backend, MAX_CONNECTIONS), max_wait_s)
        gov.stamps = SendStamps(router, gov.outage)
        gov.helpers.append(asyncio.create_task(keep_alive(router, gov.live),
                                               name="llm-router-openai-heartbeats"))
        return gov

    async def admit(self, model: str, input_tokens: int, max_tokens: int | None,
                    priority: Priority) -> Admission | None:
        """Wait up to :attr:`max_wait_s` for room on ``model`` (None: no room in time).

        :raises ImpossibleRequestError: the model has no quota, is disabled, or the
            request is larger than its token limit.
        """
        if max_tokens is None:
            request = AdmitRequest(input_tokens=input_tokens, models=(model,),
                                   priority=priority,
                                   request_id=REQUEST_ID_PREFIX + uuid.uuid4().hex)
        else:
            request = AdmitRequest(estimated_tokens=input_tokens + max_tokens,
                                   estimated_output_tokens=max_tokens, models=(model,),
                                   priority=priority,
                                   request_id=REQUEST_ID_PREFIX + uuid.uuid4().hex)
        admission = await self.router.wait_for_admission(request, self.max_wait_s)
        if admission is not None:
            self.live.live.add(admission.lease_id)
        return admission

    def _on_sent(self, lease_id: str) -> Any:
        stamps = self.stamps
        return None if stamps is None else (lambda: stamps.mark(lease_id))

    async def forward(self, lease_id: str, body: Mapping[str, Any]) -> Forwarded:
        """Send a whole-answer call and settle its lease (an answered call's in the
        background); never raises for the backend."""
        result, reply = await send_body(self.http, self.backend, body, self._on_sent(lease_id))
        if result.status == "ok":
            # the answer goes back now: settling its lease is bookkeeping (a Redis round trip
            # less in the client's latency)
            self._in_background(self._settle(lease_id, result), "llm-router-openai-settle")
        else:
            await self._settle(lease_id, result)  # a cooldown counts before the client retries
        if reply is None:
            return Forwarded(502, _error_body(f"the backend did not answer: {result.error}"))
        return Forwarded(reply.status_code, reply.body, result.retry_after_s, result)

    async def stream(self, lease_id: str, body: Mapping[str, Any],
                     client_wants_usage: bool) -> StreamStart:
        """Start a streamed call: its first answer (the events follow in ``events``, ended
        by None). The backend is read to its end, and the lease settled, whatever the
        client does."""
        started: asyncio.Future[StreamStart] = asyncio.get_running_loop().create_future()
        self._in_background(self._stream(lease_id, body, client_wants_usage, started),
                            "llm-router-openai-stream")
        return await asyncio.shield(started)

    def _in_background(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` in a task of its own, held until it ends (:meth:`aclose` waits)."""
        task = asyncio.create_task(work, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _stream(self, lease_id: str, body: Mapping[str, Any], client_wants_usage: bool,
                      started: asyncio.Future[StreamStart]) -> None:
        begun = time.monotonic()
        result = CallResult("error", error="not sent")
        out = StreamStart(200)
        try:
            result = await self._read_stream(lease_id, body, client_wants_usage, begun, out,
                                             started)
        except Exception as err:  # never a lease left unsettled, nor a client left hanging
            log.warning("stream of lease %s failed: %s", lease_id, type(err).__name__)
            result = CallResult("error", error=type(err).__name__,
                                latency_s=time.monotonic() - begun)
        finally:
            if not started.done():
                started.set_result(StreamStart(
                    502, _error_body(f"the backend did not answer: {result.error}")))
            await self._settle(lease_id, result)  # before the stream ends for the client
            out.events.put_nowait(None)

    async def _read_stream(self, lease_id: str, body: Mapping[str, Any],
                           client_wants_usage: bool, begun: float, out: StreamStart,
                           started: asyncio.Future[StreamStart]) -> CallResult:
        path = self.backend.single_path or protocol_named(self.backend.protocol).path
        try:
            async with self.http.stream(path, body, self._on_sent(lease_id)) as (response,
                                                                                 sent_at):
                if response.status != 200:
                    reply = Reply(response.status, response.headers, await response.read())
                    result = read_reply(self.backend, reply, since_sent(sent_at, begun),
                                        sent_at)
                    started.set_result(StreamStart(reply.status_code, reply.body,
                                                   result.retry_after_s, result=result))
                    return result
                started.set_result(out)
                relayed = await relay(response.content, out.events, self.backend,
                                      str(body.get("model", "")), client_wants_usage)
                # an error event: the call failed mid-stream, as a 5xx would have
                return CallResult("ok" if relayed.error is None else "error",
                                  error=relayed.error, input_tokens=relayed.input_tokens,
                                  output_tokens=relayed.output_tokens,
                                  latency_s=since_sent(sent_at, begun),
                                  signals=stated(self.backend, response.headers),
                                  sent_at_s=sent_at)
        except TimeoutError:
            return CallResult("error", error=f"timeout after {self.backend.timeout_s:g} s",
                              latency_s=time.monotonic() - begun)
        except (aiohttp.ClientError, OSError) as err:
            return CallResult("error", error=type(err).__name__,
                              latency_s=time.monotonic() - begun)

    async def _settle(self, lease_id: str, result: CallResult) -> None:
        """Settle a lease; never raises (past the outage budget its slot frees when the
        lease expires, its window usage stays as estimated)."""
        self.live.live.discard(lease_id)
        try:
            await self.outage.call(self.router.complete_many, [settlement(lease_id, result)],
                                   what="settlement")
        except Exception as err:
            log.warning("lease %s not settled (%s); it expires by itself", lease_id,
                        type(err).__name__)

    async def aclose(self) -> None:
        """Let the streams in flight end (each settles), then stop the helpers."""
        if self.tasks:
            await asyncio.wait(set(self.tasks))
        await stop_helpers(self.helpers)
        if self.stamps is not None:
            await self.stamps.aclose()
        await self.http.aclose()


def _error_body(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "api_error", "param": None,
                                 "code": "backend_unavailable"}}).encode()


async def relay_events(start: StreamStart) -> AsyncIterator[bytes]:
    """The events of a started stream, for the response (ends when the backend's does)."""
    while (event := await start.events.get()) is not None:
        yield event
