"""``python -m airflow_llm_router.web``: a real uvicorn server, token from a connection."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airflow_llm_router.engine.client import RouterClient
from tests.integration.web.standalone import (
    ROUTER_CONN,
    TOKEN_CONN,
    run_cli,
    server_env,
    standalone_server,
)

TOKEN = secrets.token_urlsafe(24)
#: the token with its last character changed (a random token may end in any character)
WRONG = TOKEN[:-1] + ("y" if TOKEN.endswith("x") else "x")


@pytest.fixture
def server(tmp_path: Path, namespace: str) -> Iterator[str]:
    with standalone_server(tmp_path, namespace, TOKEN) as url:
        yield url


def test_the_standalone_server_admits_with_the_connections_token(
        server: str, engine: RouterClient) -> None:
    engine.set_quota("m", {"rpm": 100, "tpm": 100_000, "max_concurrency": 1})
    with httpx.Client(base_url=server, timeout=15) as http:
        assert http.post("/schedule", json={"estimated_tokens": 9}).status_code == 401
        wrong = http.post("/schedule", json={"estimated_tokens": 9},
                          headers={"Authorization": f"Bearer {WRONG}"})
        assert wrong.status_code == 401
        assert engine.stats().models["m"].requests == 0
        http.headers["Authorization"] = f"Bearer {TOKEN}"
        admitted = http.post("/schedule", json={"estimated_tokens": 9}).json()
        assert admitted["status"] == "admitted" and admitted["model"] == "m"
        assert http.post("/schedule", json={"estimated_tokens": 9}).json()["status"] == "wait"
        done = http.post("/complete", json={"lease_id": admitted["lease_id"],
                                            "usage": {"input_tokens": 5, "output_tokens": 1}})
        assert done.json()["status"] == "released"
        assert engine.stats().models["m"].tokens == 6
        spec = http.get("/openapi.json").json()
        assert {"/schedule", "/complete", "/heartbeat", "/advice"} <= set(spec["paths"])
        assert http.get("/docs").status_code == 200
        huge = http.post("/schedule", json={"estimated_tokens": 9, "pad": "x" * 100_000})
        assert huge.status_code == 413 and huge.json()["detail"][0]["field"] == "body"


def one_error_line(result: object) -> str:
    stderr = result.stderr  # type: ignore[attr-defined]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert result.returncode == 2, stderr  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return str(lines[0])


def test_cli_errors_are_one_line_and_exit_2(tmp_path: Path, namespace: str) -> None:
    base = ["--port", "0", "--token-conn-id", TOKEN_CONN, "--conn-id", ROUTER_CONN]
    env = server_env(tmp_path, namespace, TOKEN)
    assert "--port" in one_error_line(run_cli(["--port", "http"], env))
    missing = one_error_line(run_cli(base, server_env(tmp_path, namespace, None)))
    assert TOKEN_CONN in missing and "--token-conn-id" in missing
    short = one_error_line(run_cli(base, server_env(tmp_path, namespace, "abc")))
    assert "password" in short and "abc" not in short.split("password", 1)[1]
    no_redis = one_error_line(run_cli(base, server_env(tmp_path, namespace, TOKEN,
                                                       redis_port=1)))
    assert "ConnectionError" in no_redis and TOKEN not in no_redis
