"""One real Airflow API server for the quota UI tests (session-scoped: ~10 s to start).

It runs with the package's plugin loaded through its entry point, the simple auth manager
with three users (admin, op: may edit pools; viewer: may only read), a SQLite metadata
database in a temporary AIRFLOW_HOME, and connections to the tests' Redis (a namespace of
its own) and PostgreSQL (a quota schema of its own). Each test starts from no quotas.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from llm_router_devkit.stack import AirflowStack, PgServer, wait_for
from tests.conftest import POSTGRES_DSN, REDIS_URL, delete_namespace

USERS = ("admin", "op", "viewer")
STARTUP_TIMEOUT_S = 90.0


class ApiServerStack(AirflowStack):
    """Only the API server (the quota UI needs no scheduler), in its own process group."""

    def start(self) -> None:
        airflow = shlex.quote(str(self.bin_dir / "airflow"))
        log = shlex.quote(str(self.home / "api-server.log"))
        self.proc = subprocess.Popen(
            ["sh", "-c", f"exec {airflow} api-server >{log} 2>&1"], env=self.env(),
            cwd=self.home, start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pgid = self.proc.pid

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"the API server exited\n{self.read_logs()}")
        return True


@dataclass
class QuotaUiStack:
    """The running API server and what it is connected to."""

    stack: ApiServerStack
    passwords: dict[str, str]
    namespace: str
    schema: str

    @property
    def url(self) -> str:
        return self.stack.api_url + "/llm-router"

    def token(self, user: str) -> str:
        response = httpx.post(f"{self.stack.api_url}/auth/token", timeout=10,
                              json={"username": user, "password": self.passwords[user]})
        response.raise_for_status()
        return str(response.json()["access_token"])

    @contextmanager
    def router(self) -> Iterator[RouterClient]:
        """A client of the namespace the API server's router uses."""
        client = RouterClient.from_url(REDIS_URL, RouterSettings(namespace=self.namespace))
        try:
            yield client
        finally:
            client.close()

    def reset(self) -> None:
        """No quota, no router-wide budget, no audit row, no router state."""
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("TRUNCATE {}, {}, {}").format(
                sql.Identifier(self.schema, "quotas"),
                sql.Identifier(self.schema, "quotas_audit"),
                sql.Identifier(self.schema, "quotas_budget")))
        delete_namespace(self.namespace)


@pytest.fixture(scope="session")
def quota_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuotaUiStack]:
    suffix = uuid.uuid4().hex[:10]
    home = tmp_path_factory.mktemp("quota-ui-airflow")
    pg = PgServer.from_dsn(POSTGRES_DSN)
    passwords = {user: secrets.token_urlsafe(12) for user in USERS}
    (home / "passwords.json").write_text(json.dumps(passwords))
    dags = home / "dags"
    dags.mkdir()
    ui = QuotaUiStack(
        stack=ApiServerStack(
            home=home, dags_folder=dags, sql_alchemy_conn=f"sqlite:///{home}/airflow.db",
            connections={
                "llm_router_default": {"conn_type": "llm_router", "host": "127.0.0.1",
                                       "port": 6379, "extra": {"namespace": f"ui-{suffix}"}},
                "postgres_default": pg.airflow_conn(),
            },
            admin_password=passwords["admin"],
            extra_env={
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,op:op,viewer:viewer",
                "AIRFLOW__LLM_ROUTER__QUOTA_SCHEMA": f"llmr_ui_{suffix}",
                "AIRFLOW__LLM_ROUTER__TASK_SCHEMA": f"llmr_ui_{suffix}",
            }),
        passwords=passwords, namespace=f"ui-{suffix}", schema=f"llmr_ui_{suffix}")
    try:
        ui.stack.cli("db", "migrate", timeout_s=120)
        ui.stack.start()
        wait_for("the API server", lambda: ui.stack.alive() and ui.stack.token(),
                 STARTUP_TIMEOUT_S)
        # the first call builds the service, which migrates the quota tables
        response = httpx.get(f"{ui.url}/api/quotas", timeout=30,
                             headers={"Authorization": f"Bearer {ui.token('admin')}"})
        assert response.status_code == 200, f"{response.text}\n{ui.stack.read_logs()}"
        yield ui
    finally:
        ui.stack.stop()
        pg.drop_schema(ui.schema)
        delete_namespace(ui.namespace)


@pytest.fixture
def ui(quota_ui: QuotaUiStack) -> QuotaUiStack:
    quota_ui.reset()
    return quota_ui


@pytest.fixture(scope="session")
def tokens(quota_ui: QuotaUiStack) -> dict[str, str]:
    return {user: quota_ui.token(user) for user in USERS}


def api(ui: QuotaUiStack, token: str | None, method: str, path: str,
        **kwargs: object) -> httpx.Response:
    headers = dict(kwargs.pop("headers", {}) or {})  # type: ignore[call-overload]
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.request(method, f"{ui.url}{path}", headers=headers, timeout=15,
                         **kwargs)  # type: ignore[arg-type]

