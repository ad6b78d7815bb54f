"""One standard ``postgres`` connection (the postgres provider's type) serves the
provider's ``PostgresHook``, the task store and the quota store alike."""

from __future__ import annotations

import json

import pytest
from psycopg.conninfo import conninfo_to_dict

from airflow_llm_router.quotas.config import QuotaConfig
from airflow_llm_router.store import TaskStore
from tests.conftest import POSTGRES_DSN


def test_one_postgres_connection_serves_the_provider_hook_and_both_stores(
        pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    dsn = conninfo_to_dict(POSTGRES_DSN)
    conn = {"conn_type": "postgres", "host": dsn.get("host", "127.0.0.1"),
            "port": int(dsn.get("port", 5432)), "login": dsn.get("user", "postgres"),
            "schema": dsn.get("dbname", "test"),
            "extra": {"application_name": "llmr-shared", "connect_timeout": 5}}
    monkeypatch.setenv("AIRFLOW_CONN_SHARED_PG", json.dumps(conn))

    with TaskStore.from_conn_id("shared_pg", schema=pg_schema) as store:
        store.migrate()
        (task_id,) = store.enqueue(["one prompt"])
        # the libpq settings of the extra reach the store's sessions
        with store.connection.transaction() as session:
            row = session.execute("SELECT current_setting('application_name')").fetchone()
        assert row == ("llmr-shared",)
    seen = PostgresHook(postgres_conn_id="shared_pg").get_records(
        f'SELECT status FROM "{pg_schema}".tasks WHERE id = %s', parameters=(task_id,))
    assert [tuple(r) for r in seen] == [("pending",)]
    config = QuotaConfig(postgres_conn_id="shared_pg", schema=pg_schema)
    quotas = config.open_store(None)
    assert quotas.migrate() >= 1 and quotas.records() == []
