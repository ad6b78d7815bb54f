"""Start ``python -m airflow_llm_router.web`` as its own process (uvicorn on a loopback
port), its connections given as ``AIRFLOW_CONN_*`` variables, as a deployment would."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from llm_router_devkit.api_server import api_env, standalone_api

TOKEN_CONN = "llmr_api_token"
ROUTER_CONN = "llmr_api_router"


def server_env(home: Path, namespace: str, token: str | None,
               redis_port: int = 6379) -> dict[str, str]:
    connections: dict[str, dict[str, object] | str] = {ROUTER_CONN: {
        "conn_type": "llm_router", "host": "127.0.0.1", "port": redis_port,
        "extra": {"namespace": namespace}}}
    if token is not None:
        connections[TOKEN_CONN] = {"conn_type": "generic", "password": token}
    return api_env(home, connections)


def run_cli(args: Sequence[str], env: dict[str, str],
            timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_llm_router.web", *args], env=env,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


@contextmanager
def standalone_server(home: Path, namespace: str, token: str) -> Iterator[str]:
    """The server's base URL while it runs."""
    with standalone_api(server_env(home, namespace, token),
                        ["--token-conn-id", TOKEN_CONN, "--conn-id", ROUTER_CONN],
                        home / "api.log") as url:
        yield url
