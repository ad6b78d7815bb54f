"""The standalone server's "serving on" line waits for an answer on its socket: a socket
that listens (the kernel queues connections) but whose app is not loaded yet gets no line."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from airflow_llm_router.web.readiness import PROBE_PATH, announce_when_answering


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(30)
    yield sock
    sock.close()


def _request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_the_line_comes_only_once_a_request_is_answered(listening: socket.socket) -> None:
    announced, stopped = threading.Event(), threading.Event()
    port = listening.getsockname()[1]
    thread = announce_when_answering("127.0.0.1", port, announced.set, stopped)
    try:
        # bound and listening, the app not up: the probe's request goes unanswered
        conn, _ = listening.accept()
        with conn:
            assert _request(conn).startswith(f"GET {PROBE_PATH} ".encode())
        assert not announced.is_set()
        # the app answers (any status will do): the line follows
        conn, _ = listening.accept()
        with conn:
            _request(conn)
            conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
            assert announced.wait(30)
    finally:
        stopped.set()
        thread.join(30)


def test_a_wildcard_address_is_probed_on_loopback(listening: socket.socket) -> None:
    announced, stopped = threading.Event(), threading.Event()
    thread = announce_when_answering("0.0.0.0", listening.getsockname()[1], announced.set,
                                     stopped)
    try:
        conn, _ = listening.accept()
        with conn:
            _request(conn)
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            assert announced.wait(30)
    finally:
        stopped.set()
        thread.join(30)
