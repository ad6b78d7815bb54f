"""The solver's HTTP session to the Models Backend: one aiohttp session with a pool of
connections, the environment's proxy and ``.netrc`` read once, and when each request was
written (the send stamp the engine's guard learns from). What a call's answer means is
:mod:`airflow_llm_router.backend.calls`."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from yarl import URL

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.protocols import protocol_named

__all__ = ["KEEPALIVE_S", "BackendHttp", "Reply", "http_client"]

#: How long an idle connection is kept for the next call. Below the 5 s that common
#: servers (uvicorn, many proxies) keep one open: a call sent on a connection the server
#: is closing fails before the backend sees it, and a POST is not retried by the client.
KEEPALIVE_S = 4.0


@dataclass(frozen=True)
class Reply:
    """A backend's HTTP answer, read whole: its status, headers (case-insensitive) and
    body."""

    status_code: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (:raises ValueError: it is not)."""
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class _SentAt:
    """When the request was written to the connection, and a callback then (fired once,
    from aiohttp's trace of the body's first chunk, which it sends with the headers)."""

    __slots__ = ("_on_sent", "at")

    def __init__(self, on_sent: Callable[[], None] | None) -> None:
        self._on_sent = on_sent
        self.at: float | None = None

    def mark(self) -> None:
        if self.at is None:
            self.at = time.time()
            if self._on_sent is not None:
                self._on_sent()


async def _chunk_sent(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                      _params: aiohttp.TraceRequestChunkSentParams) -> None:
    sent = ctx.trace_request_ctx
    if isinstance(sent, _SentAt):
        sent.mark()


class BackendHttp:
    """The solver's HTTP client for the backend: one aiohttp session whose pool holds up to
    ``max_connections`` connections, so up to that many calls are sent at once and none
    queues while a connection is free.

    aiohttp, not httpx: the client's CPU per call bounds how fast a triggerer sends a
    window's calls, and aiohttp's costs a quarter of httpx's (measured with
    ``bench/solver_cpu.py``; docs/solving.md, "Call"). Create it
    inside the event loop that uses it.

    The environment's proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``) and a
    ``.netrc`` entry for the backend's host are read once, here, as other HTTP clients
    read them. Not per call: aiohttp's ``trust_env`` reads them for each request in the
    loop's thread pool (two hops a call, each parsing ``.netrc``), and a burst of 450 calls
    then left the process about 0.5 s after the solver made them (``bench.direct``, one
    drain of 1,400 in flight).
    """

    def __init__(self, config: BackendConfig, max_connections: int) -> None:
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_chunk_sent)
        self._base = config.base_url.rstrip("/") + "/"
        self.max_connections = max(1, max_connections)
        base = URL(self._base)
        self._proxy, self._proxy_auth = _env_proxy(base)
        self._session = aiohttp.ClientSession(
            headers=_headers(config),
            auth=_netrc_auth(base, config.headers),
            connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0,
                                           keepalive_timeout=KEEPALIVE_S),
            # a call taking longer than timeout_s is abandoned; 10 s at most to connect
            timeout=aiohttp.ClientTimeout(total=config.timeout_s, sock_connect=10.0),
            trace_configs=[trace],
        )

    async def post(self, path: str, payload: Any,
                   on_sent: Callable[[], None] | None = None) -> tuple[Reply, float | None]:
        """``POST`` ``payload`` as JSON to ``path`` (under the backend's base URL); the
        whole reply and when the request was written (epoch seconds).

        :raises aiohttp.ClientError: the call failed in transport (TimeoutError: timed out)
        """
        sent = _SentAt(on_sent)
        async with self._session.post(self._base + path.lstrip("/"), json=payload,
                                      proxy=self._proxy, proxy_auth=self._proxy_auth,
                                      trace_request_ctx=sent) as response:
            body = await response.read()
            return Reply(response.status, response.headers, body), sent.at

    @contextlib.asynccontextmanager
    async def stream(self, path: str, payload: Any, on_sent: Callable[[], None] | None = None,
                     ) -> AsyncIterator[tuple[aiohttp.ClientResponse, float | None]]:
        """``POST`` ``payload`` as JSON to ``path`` and hand back the response unread (its
        body streams, e.g. server-sent events) and when the request was written; the
        connection is released when the block ends.

        :raises aiohttp.ClientError: the call failed in transport (TimeoutError: timed out)
        """
        sent = _SentAt(on_sent)
        async with self._session.post(self._base + path.lstrip("/"), json=payload,
                                      proxy=self._proxy, proxy_auth=self._proxy_auth,
                                      trace_request_ctx=sent) as response:
            yield response, sent.at

    async def __aenter__(self) -> BackendHttp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._session.close()


def _headers(config: BackendConfig) -> dict[str, str]:
    """The config's headers, and the protocol's own (Anthropic's API version) that they do
    not set in any spelling."""
    given = {name.lower() for name in config.headers}
    own = protocol_named(config.protocol).default_headers()
    return {**{k: v for k, v in own.items() if k.lower() not in given}, **config.headers}


def _env_proxy(url: URL) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy the environment sets for ``url`` (None: none, or ``NO_PROXY`` names its
    host) and its credentials, as aiohttp's ``trust_env`` finds them."""
    try:
        return get_env_proxy_for_url(url)
    except LookupError:
        return None, None


def _netrc_auth(url: URL, headers: Mapping[str, str]) -> aiohttp.BasicAuth | None:
    """Basic auth for ``url``'s host from ``.netrc`` (``NETRC``, else the home directory's),
    as aiohttp's ``trust_env`` finds it; None if there is none, or if the connection sets
    its own ``Authorization`` header (which then stands)."""
    if url.host is None or any(k.lower() == "authorization" for k in headers):
        return None
    try:
        return basicauth_from_netrc(netrc_from_env(), url.host)
    except LookupError:
        return None


async def http_client(config: BackendConfig, max_connections: int) -> BackendHttp:
    """An HTTP client for the backend, sized for ``max_connections`` calls at once (in the
    running event loop)."""
    return BackendHttp(config, max_connections)
