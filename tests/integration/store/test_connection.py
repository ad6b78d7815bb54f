"""Connection handling: lazy, closable, reconnecting, and built from an Airflow connection."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from airflow_llm_router.store import TaskStore


def test_connection_is_lazy_and_reopens_after_close(pg_dsn: str, pg_schema: str) -> None:
    store = TaskStore(pg_dsn, schema=pg_schema)
    assert store.connection._conn is None
    store.migrate()
    first = store.connection._conn
    assert first is not None and not first.closed
    store.close()
    assert first.closed
    assert store.counts()["pending"] == 0
    store.close()
    store.close()  # closing twice is harmless


def test_context_manager_closes(pg_dsn: str, pg_schema: str) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        conn = store.connection._conn
    assert conn is not None and conn.closed


def test_repr_does_not_leak_the_dsn(pg_schema: str) -> None:
    store = TaskStore("postgresql://user:s3cret@db/x", schema=pg_schema)
    assert "s3cret" not in repr(store)


def test_from_conn_id_uses_the_airflow_connection(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = conninfo_to_dict(pg_dsn)
    uri = (
        f"postgres://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:"
        f"{params.get('port', 5432)}/{params.get('dbname', 'test')}?sslmode=disable"
    )
    monkeypatch.setenv("AIRFLOW_CONN_LLMR_STORE_TEST", uri)
    with TaskStore.from_conn_id("llmr_store_test", schema=pg_schema, table="jobs") as store:
        assert (store.schema, store.table) == (pg_schema, "jobs")
        dsn = conninfo_to_dict(store.connection._dsn)
        assert dsn.get("sslmode") == "disable"
        store.migrate()
        store.enqueue(["via airflow connection"])
        assert store.counts()["pending"] == 1


def test_from_conn_id_reaches_a_unix_socket(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket directory as host (embedded or local servers) is passed to libpq as is."""
    import json
    from pathlib import Path

    socket_dir = "/var/run/postgresql"
    if not any(Path(socket_dir).glob(".s.PGSQL.*")):
        pytest.skip("no local PostgreSQL socket")
    conn = {"conn_type": "postgres", "host": socket_dir, "login": "postgres", "schema": "test"}
    monkeypatch.setenv("AIRFLOW_CONN_LLMR_SOCKET_TEST", json.dumps(conn))
    with TaskStore.from_conn_id("llmr_socket_test", schema=pg_schema) as store:
        store.migrate()
        assert store.counts()["pending"] == 0
