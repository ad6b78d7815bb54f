"""Start ``python -m airflow_llm_router.api`` as its own process (uvicorn on a loopback
port), its connections given as ``AIRFLOW_CONN_*`` variables, as a deployment would."""

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

TOKEN_CONN = "llmr_api_token"
ROUTER_CONN = "llmr_api_router"


def server_env(home: Path, namespace: str, token: str | None,
               redis_port: int = 6379) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        f"AIRFLOW_CONN_{ROUTER_CONN.upper()}": json.dumps({
            "conn_type": "llm_router", "host": "127.0.0.1", "port": redis_port,
            "extra": {"namespace": namespace}}),
    })
    if token is not None:
        env[f"AIRFLOW_CONN_{TOKEN_CONN.upper()}"] = json.dumps(
            {"conn_type": "generic", "password": token})
    return env


def run_cli(args: Sequence[str], env: dict[str, str],
            timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_llm_router.api", *args], env=env,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


@contextmanager
def standalone_server(home: Path, namespace: str, token: str,
                      startup_timeout_s: float = 90) -> Iterator[str]:
    """The server's base URL while it runs; stopped (SIGTERM, then SIGKILL) after."""
    log = home / "api.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_llm_router.api", "--port", "0",
             "--token-conn-id", TOKEN_CONN, "--conn-id", ROUTER_CONN],
            env=server_env(home, namespace, token), stdout=subprocess.PIPE, stderr=err,
            text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + startup_timeout_s
        line = ""
        while not line.startswith("serving on "):  # Airflow's own log lines come first
            line = proc.stdout.readline()  # '' once the process is gone
            if not line or time.monotonic() > deadline:
                proc.kill()
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
