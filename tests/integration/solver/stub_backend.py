"""A tiny real HTTP backend in a thread of the test process, answering each call as the
test says: for solver tests whose faults the simulator cannot make (odd headers or usage,
a call held until the test lets it go)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "StubBackend", "serve"]

#: (status, headers, JSON body) for one call, from the call's JSON body
Reply = tuple[int, dict[str, str], dict[str, Any]]


class StubBackend(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # every pool of the solver connects at once

    def __init__(self, answer: Callable[[dict[str, Any]], Reply],
                 hold: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        #: called with each call's body before it is answered, outside the lock that
        #: ``answer`` runs under (it may block: a call held until the test lets it go)
        self.hold = hold
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StubBackend

    def do_POST(self) -> None:
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.server.hold is not None:
            self.server.hold(doc)
        with self.server.lock:
            status, headers, body = self.server.answer(doc)
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json",
                            "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(answer: Callable[[dict[str, Any]], Reply],
          hold: Callable[[dict[str, Any]], None] | None = None) -> Iterator[StubBackend]:
    """A :class:`StubBackend` serving in a thread until the block ends."""
    server = StubBackend(answer, hold)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
