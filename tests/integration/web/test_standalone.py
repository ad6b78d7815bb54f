"""``python -m airflow_llm_router.web``: a real uvicorn server, token from a connection."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.quotas.config import QuotaConfig
from airflow_llm_router.web.standalone import Standalone
from tests.conftest import POSTGRES_DSN
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
        assert spec["servers"] == [{"url": "/"}]  # the routes are at the root
        docs = http.get("/docs")
        assert docs.status_code == 200
        # the viewer's files come from the package, not a CDN: it works offline
        assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
        assert sorted(assets) == ["/docs/assets/favicon-32x32.png",
                                  "/docs/assets/swagger-ui-bundle.js",
                                  "/docs/assets/swagger-ui.css"], assets
        for asset in assets:
            assert http.get(asset).status_code == 200, asset
        assert "SwaggerUIBundle" in http.get("/docs/assets/swagger-ui-bundle.js").text
        assert http.get("/docs/assets/LICENSE").text.lstrip().startswith("Apache License")
        schedule = spec["paths"]["/schedule"]["post"]["responses"]
        assert {"400", "401", "403", "415", "422"} <= set(schedule), sorted(schedule)
        assert {"401", "403"} <= set(spec["paths"]["/advice"]["get"]["responses"])
        assert "400" not in spec["paths"]["/advice"]["get"]["responses"]  # no body
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


async def test_the_standalone_app_serves_the_quota_routes_from_its_connections(
        namespace: str, pg_schema: str, engine: RouterClient,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The quota page's routes, standalone: the quota store on the task store's connection,
    the router on ``--conn-id``'s, every change recorded with the token's caller."""
    dsn = conninfo_to_dict(POSTGRES_DSN)
    monkeypatch.setenv("AIRFLOW_CONN_LLMR_T_PG", json.dumps({
        "conn_type": "postgres", "host": dsn.get("host", "127.0.0.1"),
        "port": int(dsn.get("port", 5432)), "login": dsn.get("user", "postgres"),
        "schema": dsn.get("dbname", "test")}))
    monkeypatch.setenv("AIRFLOW_CONN_LLMR_T_ROUTER", json.dumps({
        "conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
        "extra": {"namespace": namespace}}))
    config = Standalone(router_conn_id="llmr_t_router", postgres_conn_id="llmr_t_pg",
                        store_schema=pg_schema,
                        quotas=QuotaConfig(schema=pg_schema, task_schema=pg_schema))
    app = config.app(TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert (await http.get("/me")).json() == {"user": "token", "can_edit": True,
                                                  "can_delete": True}
        put = await http.put("/quotas/m", json={"rpm": 60, "tpm": 6000, "max_concurrency": 2})
        assert put.status_code == 201, put.text
        listed = (await http.get("/quotas")).json()["models"]
        assert [(q["model"], q["updated_by"], q["applied"]) for q in listed] == [
            ("m", "token", True)]
        assert (await http.get("/backlog")).json()["remaining"] == 0
        refused = await http.get("/quotas", headers={"Authorization": f"Bearer {WRONG}"})
        assert refused.status_code == 401
    quota = engine.get_quotas()["m"]
    assert (quota.rpm, quota.tpm) == (60, 6000)  # the router the connection names
    await app.state.router.aclose()
    await app.state.task_store.aclose()
