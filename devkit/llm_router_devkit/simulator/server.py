"""Run the simulator in-process, on a background thread, for tests and the demo.

The socket is bound before uvicorn starts, so ``port=0`` gets a free port with no race and
``.url`` is known at once; readiness is then awaited by polling ``/health`` in a bounded loop
rather than sleeping a guessed amount.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import httpx
import uvicorn
from fastapi import FastAPI

from llm_router_devkit.processes import ChildServer, start_child
from llm_router_devkit.simulator.app import create_app
from llm_router_devkit.simulator.profile import SimulatorProfile
from llm_router_devkit.simulator.provider import SimulatedBackend


class SimulatorServer:
    """A simulator served by uvicorn on a background thread.

    Use as a context manager (``with SimulatorServer(profile) as sim: httpx.get(sim.url)``)
    or call :meth:`start` and :meth:`stop`.

    :param profile: the simulated backend; :meth:`SimulatorProfile.default` if omitted.
    :param port: 0 picks a free port.
    :param startup_timeout_s: how long :meth:`start` waits for ``/health`` before failing.
    :param shutdown_timeout_s: how long calls still sleeping may finish before being cancelled.
    """

    def __init__(
        self,
        profile: SimulatorProfile | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        startup_timeout_s: float = 10.0,
        shutdown_timeout_s: float = 1.0,
        log_level: str = "warning",
    ) -> None:
        self.profile = profile or SimulatorProfile.default()
        self.app: FastAPI = create_app(self.profile)
        self.host = host
        self._requested_port = port
        self._startup_timeout_s = startup_timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234`` (available once started)."""
        if self.port is None:
            raise RuntimeError("simulator server not started")
        return f"http://{self.host}:{self.port}"

    @property
    def backend(self) -> SimulatedBackend:
        """The in-process state, for assertions that need more than ``/stats``."""
        backend: SimulatedBackend = self.app.state.backend
        return backend

    def start(self) -> SimulatorServer:
        """Bind, serve on a daemon thread, and return once ``/health`` answers."""
        if self._thread is not None:
            raise RuntimeError("simulator server already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        self._socket = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=self._log_level,
            access_log=False,  # request lines only, but keep the demo's output quiet
            ws="none",
            lifespan="off",
            # typed int, but uvicorn only hands it to asyncio.wait_for: a float works
            timeout_graceful_shutdown=self._shutdown_timeout_s,  # type: ignore[arg-type]
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"llmr-simulator-{self.port}",
            daemon=True,
        )
        self._thread.start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self._thread is not None and not self._thread.is_alive():
                    raise RuntimeError("simulator server thread exited during startup")
                if self._server is not None and self._server.started:
                    try:
                        if client.get(f"{self.url}/health").status_code == 200:
                            return
                    except httpx.TransportError:
                        pass
                time.sleep(0.01)
        raise TimeoutError(f"simulator not ready after {self._startup_timeout_s} s")

    def stop(self) -> None:
        """Ask uvicorn to exit, wait for the thread, and release the socket."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=self._shutdown_timeout_s + 5.0)
        if self._socket is not None:
            self._socket.close()
        self._server = None
        self._thread = None
        self._socket = None

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class SimulatorProcess(ChildServer):
    """The simulator in a process of its own, as a real backend would be.

    In-process (:class:`SimulatorServer`), the simulator shares the interpreter with its
    callers: a burst of hundreds of calls from the same process delays when the simulator
    sees each arrival, which skews its clock against the router's. Tests that judge the
    router by the simulator's window counts use this instead.
    """

    def __init__(self, profile: SimulatorProfile, host: str = "127.0.0.1",
                 startup_timeout_s: float = 30.0) -> None:
        self.profile = profile
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The simulator's process id while it runs (a benchmark reads its CPU), else None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> SimulatorProcess:
        """Start the simulator; return once ``/health`` answers.

        :raises RuntimeError: it exited or did not answer within ``startup_timeout_s``
            (the message ends with the last lines of its log); the child is stopped then,
            and if anything else (a ``KeyboardInterrupt``) ends the start.
        """
        self._dir = tempfile.TemporaryDirectory(prefix="llmr-sim-")
        path = Path(self._dir.name) / "profile.json"
        path.write_text(self.profile.to_json())
        with socket.socket() as probe:  # a free port; the child binds it at once
            probe.bind((self.host, 0))
            self.port = probe.getsockname()[1]

        def healthy(_pid: int) -> bool:
            try:
                return httpx.get(self.url + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            self._proc = start_child(
                [sys.executable, "-m", "llm_router_devkit.simulator", "--host", self.host,
                 "--port", str(self.port), "--profile", str(path), "--log-level", "warning"],
                log=Path(self._dir.name) / "simulator.log", ready=healthy,
                what=f"the simulator on {self.url}", timeout_s=self.startup_timeout_s,
                interval_s=0.05,
                # its own session: a Ctrl-C in the terminal reaches the caller, which stops
                # it after its own clean-up, not the simulator while calls are in flight
                start_new_session=True)
        except BaseException:
            self.stop()
            raise
        return self
