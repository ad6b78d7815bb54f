"""The backend client's connection pool: up to ``max_connections`` calls are on the wire
at once, none queues while a connection is free, and the next waits for one to free."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from airflow_llm_router.backend.calls import BackendHttp
from airflow_llm_router.backend.config import BackendConfig


class _HoldingServer:
    """A minimal HTTP/1.1 server (keep-alive): ``POST /hold`` answers when ``release`` is
    set, ``POST /quick`` at once; ``held`` counts the held calls that reached it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0
        self.connections = 0
        self.changed = asyncio.Condition()
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                length = next((int(line.split(":", 1)[1]) for line in lines
                               if line.lower().startswith("content-length:")), 0)
                await reader.readexactly(length)
                if lines[0].split()[1] == "/hold":
                    async with self.changed:
                        self.held += 1
                        self.changed.notify_all()
                    await self.release.wait()
                body = b'{"answer": "ok"}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        writer.close()

    async def wait_held(self, n: int, timeout_s: float) -> int:
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait_for(lambda: self.held >= n),
                                       timeout_s)
            return self.held


@contextlib.asynccontextmanager
async def _holding_server() -> AsyncIterator[_HoldingServer]:
    srv = _HoldingServer()
    srv.server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    try:
        yield srv
    finally:
        srv.release.set()
        srv.server.close()


async def test_every_connection_is_used_before_a_call_waits() -> None:
    n = 12
    async with _holding_server() as srv:
        config = BackendConfig(base_url=srv.url, timeout_s=30)
        async with BackendHttp(config, n) as http:
            # held and quick calls mixed: the quick ones free their connections again
            first = [asyncio.create_task(http.post("/hold" if i % 2 == 0 else "/quick", {}))
                     for i in range(n)]
            assert await srv.wait_held(n // 2, 10.0) == n // 2
            await asyncio.gather(*(t for i, t in enumerate(first) if i % 2))  # quick ones
            # as many more held calls as there are free connections: every one is sent
            more = [asyncio.create_task(http.post("/hold", {})) for _ in range(n // 2)]
            assert await srv.wait_held(n, 10.0) == n
            # every connection holds a call: one more waits for a free one
            extra = asyncio.create_task(http.post("/hold", {}))
            assert await srv.wait_held(n + 1, 0.3) == n
            srv.release.set()
            replies = await asyncio.gather(*first, *more, extra)
    assert [r.status_code for r, _sent in replies] == [200] * (n + n // 2 + 1)
    assert all(sent is not None for _r, sent in replies)
    assert srv.connections == n  # connections were kept and reused, never more than n
