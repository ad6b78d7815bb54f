"""The router's standalone HTTP API (``python -m airflow_llm_router.web``) in a process of
its own, for tests and benchmarks: the way a deployment runs it, with its connections
given as ``AIRFLOW_CONN_*`` variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["api_env", "standalone_api"]


def api_env(home: Path, connections: dict[str, dict[str, object] | str]) -> dict[str, str]:
    """This process's environment without its Airflow settings, plus an ``AIRFLOW_HOME`` of
    its own and ``connections`` (conn id -> JSON connection or URI)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    for conn_id, conn in connections.items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = conn if isinstance(conn, str) \
            else json.dumps(conn)
    return env


@contextmanager
def standalone_api(env: dict[str, str], args: Sequence[str], log: Path,
                   startup_timeout_s: float = 120) -> Iterator[str]:
    """Run ``python -m airflow_llm_router.web --port 0 <args>``; its base URL while it runs
    (read from its ``serving on`` line); stopped with SIGTERM (SIGKILL after 10 s) after.

    :raises RuntimeError: it exited or did not listen in time (with its log).
    """
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_llm_router.web", "--port", "0", *args], env=env,
            stdout=subprocess.PIPE, stderr=err, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + startup_timeout_s
        line = ""
        while not line.startswith("serving on "):  # Airflow's own log lines come first
            line = proc.stdout.readline()  # '' once the process is gone
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"the API did not start\n{log.read_text()}")
        # keep reading what it prints, so a full pipe never blocks the server
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield line.removeprefix("serving on ").strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
