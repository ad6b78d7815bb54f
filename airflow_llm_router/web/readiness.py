"""Say "serving" only once the server answers.

The listening socket is bound before uvicorn loads the app (and, with ``--workers``, before
its worker processes have even imported it: on a loaded machine that can take a minute or
more). A line printed at bind time would send clients to a server that queues their
requests unanswered, so the line is printed when an HTTP request on the socket gets an
answer (any status: the app is loaded and a worker serves it).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable

__all__ = ["PROBE_PATH", "announce_when_answering", "answers"]

#: the path probed (any answer will do: a 401 or 404 is the app answering too)
PROBE_PATH = "/v1/models"
#: how long one probe waits for its answer before it tries again
PROBE_TIMEOUT_S = 2.0
_LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def answers(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the server at ``host:port`` answers one HTTP request within ``timeout_s``."""
    conn = http.client.HTTPConnection(_LOOPBACK.get(host, host), port, timeout=timeout_s)
    try:
        conn.request("GET", PROBE_PATH)
        conn.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def announce_when_answering(host: str, port: int, announce: Callable[[], None],
                            stopped: threading.Event | None = None) -> threading.Thread:
    """Call ``announce`` (in a daemon thread) once the server answers; probe until then,
    or until ``stopped`` is set."""
    done = stopped or threading.Event()

    def probe() -> None:
        while not done.is_set():
            if answers(host, port):
                announce()
                return
            done.wait(0.05)  # refused or timed out: the app is not up yet

    thread = threading.Thread(target=probe, name="llm-router-readiness", daemon=True)
    thread.start()
    return thread
