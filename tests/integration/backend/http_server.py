"""A minimal HTTP/1.1 server for the backend client's tests: it holds or answers calls and
keeps what reached it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class HoldingServer:
    """A minimal HTTP/1.1 server (keep-alive): ``POST /hold`` answers when ``release`` is
    set, any other request at once; ``held`` counts the held calls that reached it, and
    ``requests`` keeps each request's line and headers (names lower-cased)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str]]] = []
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
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                first, *rest = head.strip().split("\r\n")
                headers = {k.strip().lower(): v.strip()
                           for k, v in (line.split(":", 1) for line in rest)}
                await reader.readexactly(int(headers.get("content-length", 0)))
                self.requests.append((first, headers))
                if first.split()[1] == "/hold":
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
async def holding_server() -> AsyncIterator[HoldingServer]:
    """A :class:`HoldingServer` on a free loopback port, for the block."""
    srv = HoldingServer()
    srv.server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    try:
        yield srv
    finally:
        srv.release.set()
        srv.server.close()
