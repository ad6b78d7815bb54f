"""Migrations: idempotent, safe when run concurrently, and indexes that claiming uses."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.exceptions import TaskStoreError, TaskStoreSetupError, TaskValidationError
from airflow_llm_router.store import LATEST_VERSION, TaskStore
from airflow_llm_router.store.task_schema import MIGRATIONS

EXPECTED_COLUMNS = {
    "id",
    "prompt",
    "kind",
    "priority",
    "allowed_models",
    "status",
    "attempts",
    "max_attempts",
    "claim_token",
    "claimed_by",
    "claim_expires_at",
    "answer",
    "model",
    "input_tokens",
    "output_tokens",
    "last_error",
    "created_at",
    "updated_at",
    "solved_at",
    "metadata",
}


def _versions(dsn: str, schema: str) -> list[tuple[str, int]]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT table_name, version FROM {} ORDER BY version").format(
            sql.Identifier(schema, "schema_version")
        )
        return [(row[0], row[1]) for row in conn.execute(query)]


def test_migrate_is_idempotent(pg_dsn: str, pg_schema: str) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        assert store.migrate() == LATEST_VERSION
        assert store.migrate() == LATEST_VERSION
        ids = store.enqueue(["survives a second migrate"])
        assert store.migrate() == LATEST_VERSION
        assert store.get(ids[0]) is not None

    assert _versions(pg_dsn, pg_schema) == [("tasks", m.version) for m in MIGRATIONS]
    with psycopg.connect(pg_dsn) as conn:
        columns = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = 'tasks'",
                (pg_schema,),
            )
        }
    assert columns >= EXPECTED_COLUMNS


def test_concurrent_migrations_are_serialised(pg_dsn: str, pg_schema: str) -> None:
    workers = 4
    barrier = threading.Barrier(workers)
    results: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with TaskStore(pg_dsn, schema=pg_schema) as store:
                store.connection.connect()  # connect first, so the migrations really overlap
                barrier.wait(timeout=5)
                results.append(store.migrate())
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert errors == []
    assert results == [LATEST_VERSION] * workers
    assert _versions(pg_dsn, pg_schema) == [("tasks", m.version) for m in MIGRATIONS]


def test_two_tables_in_one_schema_are_versioned_separately(pg_dsn: str, pg_schema: str) -> None:
    with (
        TaskStore(pg_dsn, schema=pg_schema) as first,
        TaskStore(pg_dsn, schema=pg_schema, table="other_tasks") as second,
    ):
        first.migrate()
        second.migrate()
        first.enqueue(["only in the first table"])
        assert second.counts()["pending"] == 0
    assert sorted(_versions(pg_dsn, pg_schema)) == sorted(
        [("tasks", m.version) for m in MIGRATIONS]
        + [("other_tasks", m.version) for m in MIGRATIONS]
    )


def test_newer_schema_than_package_is_refused(pg_dsn: str, pg_schema: str) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (table_name, version, description) VALUES ('tasks', %s, 'x')"
                ).format(sql.Identifier(pg_schema, "schema_version")),
                (LATEST_VERSION + 1,),
            )
        with pytest.raises(TaskStoreError, match="upgrade the package"):
            store.migrate()


def test_an_unmigrated_store_migrates_on_first_use(pg_dsn: str, pg_schema: str) -> None:
    """A fresh schema needs no separate step: the first call creates the table."""
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        (task_id,) = store.enqueue(["first"])
        (task,) = store.claim(1, worker_id="w", claim_ttl_s=60)
    assert task.id == task_id
    assert _versions(pg_dsn, pg_schema) == [("tasks", m.version) for m in MIGRATIONS]


def test_a_schema_dropped_in_use_is_created_again_by_the_next_call(
        pg_dsn: str, pg_schema: str) -> None:
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.enqueue(["first"])
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(pg_schema)))
        with pytest.raises(TaskStoreError, match="next call creates it again") as raised:
            store.counts()
        assert not isinstance(raised.value, TaskStoreSetupError)  # waiting helps
        assert store.counts()["pending"] == 0


def test_a_newer_schema_refuses_every_call_as_setup_error(pg_dsn: str, pg_schema: str) -> None:
    """Retrying cannot fix a schema migrated by a newer release: the store's calls say so
    with :class:`TaskStoreSetupError`, not the retryable :class:`TaskStoreError`."""
    with TaskStore(pg_dsn, schema=pg_schema) as setup:
        setup.migrate()
    _stamp_newer(pg_dsn, pg_schema)
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        for call in (lambda: store.enqueue(["x"]), store.counts):
            with pytest.raises(TaskStoreSetupError, match="upgrade the package"):
                call()


def test_a_user_without_rights_gets_a_setup_error_naming_the_fix(
        pg_dsn: str, pg_schema: str) -> None:
    role = f"{pg_schema}_reader"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
        with (TaskStore(dsn, schema=pg_schema) as store,
              pytest.raises(TaskStoreSetupError, match="may not use") as raised):
            store.enqueue(["x"])
        assert "migrate()" in str(raised.value) and "grant" in str(raised.value)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _stamp_newer(dsn: str, schema: str) -> None:
    """Record a schema version newer than this package knows, as a newer release would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (table_name, version, description) VALUES ('tasks', %s, 'x')"
                    ).format(sql.Identifier(schema, "schema_version")),
            (LATEST_VERSION + 1,),
        )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"schema": "Bad-Name"}, "schema"),
        ({"schema": "1abc"}, "schema"),
        ({"schema": 'x"; drop table y; --'}, "schema"),
        ({"table": ""}, "table"),
        ({"table": "a" * 64}, "table"),
    ],
)
def test_identifiers_are_validated(pg_dsn: str, kwargs: dict[str, str], field: str) -> None:
    with pytest.raises(TaskValidationError) as info:
        TaskStore(pg_dsn, **kwargs)
    assert info.value.field == field
    assert "lower-case" in str(info.value)


def _plan(store: TaskStore, query: sql.Composable, params: dict[str, object]) -> str:
    conn = store.connection.connect()
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        return "\n".join(row[0] for row in conn.execute(sql.SQL("EXPLAIN ") + query, params))


def test_claim_statements_can_use_the_partial_indexes(store: TaskStore) -> None:
    """With sequential scans priced out, the plan must still find an index for each step."""
    store.enqueue([f"p{i}" for i in range(50)])
    claim = _plan(store, store.connection.queries.claim, {"n": 10, "worker_id": "w", "ttl": 1.0})
    assert "tasks_pending_idx" in claim
    queries = store.connection.queries
    for query, params in [(queries.reclaim, {"limit": 1000}),
                          (queries.live_claims, {}), (queries.next_expiry, {})]:
        plan = _plan(store, query, params)
        assert "tasks_claimed_exp_idx" in plan
        assert "Seq Scan" not in plan
    assert "Seq Scan" not in claim
