"""The backend client against the simulator: a 200 whose JSON body is cut short (a dropped
connection behind a proxy) is a retryable error, for one prompt and for every item of a
batch, never an answer and never an exception."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator

import pytest

from airflow_llm_router.backend.calls import CallResult, call_batch, call_single
from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.session import http_client
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer
from llm_router_devkit.simulator.profile import ModelProfile


@pytest.fixture
def cutting_backend() -> Iterator[SimulatorServer]:
    """A simulator whose every accepted call answers 200 with half of its JSON body."""
    profile = SimulatorProfile(time_scale=600, truncate_rate=1.0,
                               models=[ModelProfile(name="m", median_s=1.0)])
    with SimulatorServer(profile) as sim:
        yield sim


async def test_a_cut_body_is_a_retryable_error(cutting_backend: SimulatorServer) -> None:
    config = BackendConfig(base_url=cutting_backend.url, timeout_s=10)
    async with await http_client(config, 4) as http:
        single = await call_single(http, config, model="m", prompt="hello")
        batch = await call_batch(http, config, model="m", prompts=["a", "b", "c"])
    assert (single.status, single.answer, single.retryable) == ("error", None, True)
    assert single.error == "HTTP 200 without a JSON 'answer' field"
    assert [(r.status, r.answer, r.retryable) for r in batch] == [("error", None, True)] * 3
    assert all(r.error and r.error.startswith("JSONDecodeError") for r in batch)


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads the request and never answers (until the client gives up)."""
    with contextlib.suppress(ConnectionError):
        await reader.read()
    writer.close()


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads the request's head, then closes the connection without a word."""
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        await reader.readuntil(b"\r\n\r\n")
    writer.close()


@pytest.mark.parametrize("handler", [_silent, _hang_up])
async def test_transport_trouble_is_a_retryable_error_never_an_exception(
        handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> None:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = BackendConfig(base_url=f"http://127.0.0.1:{port}", timeout_s=0.5)
    try:
        async with await http_client(config, 4) as http:
            single = await call_single(http, config, model="m", prompt="hello")
            batch = await call_batch(http, config, model="m", prompts=["a", "b"])
    finally:
        server.close()
    assert (single.status, single.retryable, single.answer) == ("error", True, None)
    assert [(r.status, r.retryable) for r in batch] == [("error", True)] * 2
    if handler is _silent:  # the whole call's limit, not a wait for ever
        assert single.error == "timeout after 0.5 s"
        assert batch[0].error == "timeout after 0.5 s"
        assert 0.5 <= single.latency_s < 5


async def test_a_refused_connection_is_a_retryable_error() -> None:
    server = await asyncio.start_server(_silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()  # nothing listens on the port now
    config = BackendConfig(base_url=f"http://127.0.0.1:{port}", timeout_s=5)
    async with await http_client(config, 4) as http:
        single = await call_single(http, config, model="m", prompt="hello")
    assert (single.status, single.retryable) == ("error", True)
    assert single.error is not None and "Connect" in single.error


async def test_calls_go_under_the_base_urls_path() -> None:
    """A backend behind a path prefix: calls go to ``<base_url>/single`` whether the base
    URL ends with a slash or not, with the connection's headers."""
    seen: list[tuple[str, str]] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        auth = next((h.split(":", 1)[1].strip() for h in head
                     if h.lower().startswith("x-api-key:")), "")
        seen.append((head[0].split()[1], auth))
        body = b'{"answer": "ok", "usage": {"input_tokens": 3, "output_tokens": 4}}'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for base in (f"http://127.0.0.1:{port}/prefix", f"http://127.0.0.1:{port}/prefix/"):
            config = BackendConfig(base_url=base, timeout_s=10, headers={"x-api-key": "k"})
            async with await http_client(config, 1) as http:
                result = await call_single(http, config, model="m", prompt="x")
            assert (result.status, result.answer) == ("ok", "ok")
            assert (result.input_tokens, result.output_tokens) == (3, 4)
    finally:
        server.close()
    assert seen == [("/prefix/single", "k"), ("/prefix/single", "k")]


def _answering(head: bytes, body: bytes) -> Callable[
        [asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A server that answers every request with ``head`` (status line and headers) and
    ``body``, then closes the connection."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head_in = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
            length = next((int(line.split(":", 1)[1]) for line in head_in.split("\r\n")
                           if line.startswith("content-length:")), 0)
            await reader.readexactly(length)
            writer.write(head + b"\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
        writer.close()
    return answer


async def test_odd_limit_headers_and_batch_items_never_raise() -> None:
    """Header values that are no finite number, and batch items whose status or
    Retry-After is no number, are read as unsaid (or a retryable 500), not raised."""
    single_head = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                   b"x-ratelimit-limit-requests: inf\r\nx-ratelimit-limit-tokens: nan\r\n"
                   b"x-ratelimit-remaining-requests: inf")
    single = await _serve_once(_answering(single_head, b'{"answer": "ok"}'), batch=False)
    assert (single[0].status, single[0].answer) == ("ok", "ok")
    assert single[0].signals is not None
    assert (single[0].signals.limit_requests, single[0].signals.limit_tokens) == (None, None)

    batch_body = (b'{"results": [{"id": "0", "status": "x", "answer": "a"},'
                  b' {"id": "1", "status": 429, "retry_after_s": "soon"},'
                  b' {"id": "2", "status": 200, "answer": "c"}]}')
    batch = await _serve_once(_answering(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json", batch_body), batch=True)
    assert [(r.status, r.retryable) for r in batch] == [
        ("error", True), ("rate_limited", True), ("ok", True)]
    assert batch[1].retry_after_s is None and batch[2].answer == "c"


async def _serve_once(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                        Awaitable[None]], *, batch: bool) -> list[CallResult]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = BackendConfig(base_url=f"http://127.0.0.1:{port}", timeout_s=10)
    try:
        async with await http_client(config, 2) as http:
            if batch:
                return await call_batch(http, config, model="m", prompts=["a", "b", "c"])
            return [await call_single(http, config, model="m", prompt="a")]
    finally:
        server.close()
