"""How many TCP connections the simulator's callers opened: the distinct client addresses
(host, port) of the HTTP requests it served since the last reset.

A real backend keeps a client's connections alive, and a client that reuses them pays
the connect (and, for a real backend, the TLS handshake) once per connection, not once per
call. Counting from the server's side measures what a client does, whatever its HTTP
library: ``connections / requests`` is the new connections a call costs (1.0 for a
client that opens one per call). A client's ephemeral port is not reused while its
connection lives, and a run's connections are far fewer than the ports it may take, so
distinct addresses are distinct connections.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["ConnectionCounter", "CountConnections"]


class ConnectionCounter:
    """The distinct client addresses and the requests seen since :meth:`reset`."""

    __slots__ = ("_clients", "requests")

    def __init__(self) -> None:
        self._clients: set[tuple[str, int]] = set()
        self.requests = 0

    def seen(self, client: tuple[str, int] | None) -> None:
        self.requests += 1
        if client is not None:
            self._clients.add((client[0], client[1]))

    def reset(self) -> None:
        self._clients.clear()
        self.requests = 0

    def as_dict(self) -> dict[str, Any]:
        """``connections`` and ``requests`` since the reset, and their ratio (None: no
        request yet)."""
        n = len(self._clients)
        return {"connections": n, "requests": self.requests,
                "connections_per_request": round(n / self.requests, 4)
                if self.requests else None}


class CountConnections:
    """ASGI middleware: note each HTTP request's client address in ``counter``."""

    def __init__(self, app: ASGIApp, counter: ConnectionCounter) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            client = scope.get("client")
            self.counter.seen((client[0], client[1]) if client else None)
        await self.app(scope, receive, send)
