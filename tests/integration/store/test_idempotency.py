"""Idempotency keys: a retried enqueue adds nothing and answers the same ids, also when the
retries race; per-task settings through ``enqueue_tasks``; migration 2 on a version-1 table."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.pg import TableNames, migrate
from airflow_llm_router.store import LATEST_VERSION, NewTask, TaskStore
from airflow_llm_router.store.task_schema import MIGRATIONS


def _rows(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(schema, "tasks"))).fetchone()
    assert row is not None
    return int(row[0])


def test_a_retried_enqueue_returns_the_same_ids_and_adds_nothing(
        store: TaskStore, pg_dsn: str, pg_schema: str) -> None:
    first = store.enqueue(["a", "b", "c"], idempotency_keys=["k-a", None, "k-c"])
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{store.notify_channel}"')
        again = store.enqueue(["a", "c"], idempotency_keys=["k-a", "k-c"])
        assert list(listener.notifies(timeout=0.2)) == []  # nothing new: nobody is woken
    assert again == [first[0], first[2]]
    assert _rows(pg_dsn, pg_schema) == 3


def test_keys_mixed_with_new_tasks_keep_task_order(store: TaskStore) -> None:
    (old,) = store.enqueue(["old"], idempotency_keys=["k1"])
    result = store.enqueue_tasks([
        NewTask("new one"), NewTask("old again", idempotency_key="k1"),
        NewTask("new two", idempotency_key="k2"), NewTask("new three")])
    assert result.duplicates == [False, True, False, False]
    assert result.ids[1] == old
    assert result.created == 3
    fresh = [result.ids[i] for i in (0, 2, 3)]
    assert fresh == sorted(fresh) and old not in fresh
    prompts = [row.prompt for row in map(store.get, result.ids) if row is not None]
    assert prompts == ["new one", "old", "new two", "new three"]  # the key wins, not the text


def test_enqueue_tasks_stores_each_tasks_own_settings(store: TaskStore) -> None:
    result = store.enqueue_tasks([
        NewTask("p0", priority="hot", allowed_models=["m-b", "m-a", "m-b"], kind="summary",
                max_attempts=2, metadata={"source": "crm"}),
        NewTask("p1"),
        NewTask("p2", allowed_models=["m-c"], max_attempts=9, metadata={"n": [1, 2]}),
    ])
    rows = [store.get(task_id) for task_id in result.ids]
    assert [(r.prompt, r.priority, r.allowed_models, r.kind, r.max_attempts, r.metadata)
            for r in rows if r is not None] == [
        ("p0", "hot", ("m-b", "m-a"), "summary", 2, {"source": "crm"}),
        ("p1", "bulk", None, "default", 5, {}),
        ("p2", "bulk", ("m-c",), "default", 9, {"n": [1, 2]}),
    ]
    claimed = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert [t.id for t in claimed] == [result.ids[0]]  # the hot one first


def test_enqueue_tasks_notifies_how_many_were_added(store: TaskStore, pg_dsn: str) -> None:
    store.enqueue(["x"], idempotency_keys=["dup"])
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{store.notify_channel}"')
        store.enqueue_tasks([NewTask("x", idempotency_key="dup"), NewTask("y"), NewTask("z")])
        received = list(listener.notifies(timeout=5, stop_after=1))
    assert [n.payload for n in received] == ["2"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.enqueue(["a", "b"], idempotency_keys=["k"]), "idempotency_keys"),
        (lambda s: s.enqueue(["a"], idempotency_keys="k"), "idempotency_keys"),
        (lambda s: s.enqueue(["a", "b"], idempotency_keys=["k", "k"]), "idempotency_keys[1]"),
        (lambda s: s.enqueue(["a"], idempotency_keys=[""]), "idempotency_keys[0]"),
        (lambda s: s.enqueue(["a"], idempotency_keys=[7]), "idempotency_keys[0]"),
        (lambda s: s.enqueue(["a"], idempotency_keys=["k" * 201]), "idempotency_keys[0]"),
        (lambda s: s.enqueue(["a"], idempotency_keys=["line\nbreak"]), "idempotency_keys[0]"),
        (lambda s: s.enqueue(["a"], idempotency_keys=["nul\x00"]), "idempotency_keys[0]"),
        (lambda s: s.enqueue_tasks([NewTask("a"), NewTask(" ")]), "tasks[1].prompt"),
        (lambda s: s.enqueue_tasks([NewTask("a", priority="urgent")]), "tasks[0].priority"),
        (lambda s: s.enqueue_tasks([NewTask("a"), NewTask("b", allowed_models=["ok", "b{x}"])]),
         "tasks[1].allowed_models[1]"),
        (lambda s: s.enqueue_tasks([NewTask("a", kind="")]), "tasks[0].kind"),
        (lambda s: s.enqueue_tasks([NewTask("a", max_attempts=0)]), "tasks[0].max_attempts"),
        (lambda s: s.enqueue_tasks([NewTask("a", metadata={"n": float("inf")})]),
         "tasks[0].metadata"),
        (lambda s: s.enqueue_tasks([NewTask("a", idempotency_key="k"),
                                    NewTask("b", idempotency_key="k")]),
         "tasks[1].idempotency_key"),
        (lambda s: s.enqueue_tasks([NewTask("a", idempotency_key="\t")]),
         "tasks[0].idempotency_key"),
        (lambda s: s.enqueue_tasks([{"prompt": "a"}]), "tasks[0]"),
        (lambda s: s.enqueue_tasks("a"), "tasks"),
    ],
)
def test_bad_keys_and_tasks_name_the_field(store: TaskStore, call: Callable[[TaskStore], Any],
                                           field: str) -> None:
    with pytest.raises(TaskValidationError) as info:
        call(store)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert store.counts()["pending"] == 0


def test_concurrent_retries_of_one_post_get_the_same_ids(pg_dsn: str, pg_schema: str,
                                                         store: TaskStore) -> None:
    """Eight producers send the same keyed batch at once: one set of rows, one set of ids."""
    workers = 8
    keys = [f"order-{i}" for i in range(200)]
    barrier = threading.Barrier(workers)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with TaskStore(pg_dsn, schema=pg_schema) as mine:
                mine.connection.connect()
                barrier.wait(timeout=10)
                results.append(mine.enqueue([f"p {k}" for k in keys], idempotency_keys=keys))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=produce) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(results) == workers
    assert all(ids == results[0] for ids in results)
    assert len(set(results[0])) == len(keys)
    assert _rows(pg_dsn, pg_schema) == len(keys)


def _wait_until_blocked_by(pg_dsn: str, holder_pid: int, deadline_s: float = 10.0) -> None:
    """Poll (no fixed sleep) until some session waits on a lock ``holder_pid`` holds."""
    deadline = time.monotonic() + deadline_s
    with psycopg.connect(pg_dsn, autocommit=True) as probe:
        while time.monotonic() < deadline:
            row = probe.execute("SELECT count(*) FROM pg_stat_activity "
                                "WHERE %s = ANY(pg_blocking_pids(pid))", (holder_pid,)).fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.01)
    raise AssertionError("the second enqueue never waited for the first")


@pytest.mark.parametrize("first_commits", [True, False])
def test_an_enqueue_racing_an_uncommitted_key_waits_for_its_outcome(
        store: TaskStore, pg_dsn: str, pg_schema: str, first_commits: bool) -> None:
    """The key is inserted but not yet committed by another session: the enqueue waits, then
    answers that session's id if it commits, or inserts its own task if it rolls back."""
    tasks = sql.Identifier(pg_schema, "tasks")
    answer: list[Any] = []
    holder = psycopg.connect(pg_dsn)
    try:
        row = holder.execute(sql.SQL("INSERT INTO {} (prompt, idempotency_key) "
                                     "VALUES ('first', 'race') RETURNING id").format(tasks)
                             ).fetchone()
        assert row is not None
        first_id = row[0]
        with TaskStore(pg_dsn, schema=pg_schema) as second:
            thread = threading.Thread(target=lambda: answer.append(
                second.enqueue_tasks([NewTask("second", idempotency_key="race")])))
            thread.start()
            _wait_until_blocked_by(pg_dsn, holder.info.backend_pid)
            assert answer == []  # still waiting for the first session
            if first_commits:
                holder.commit()
            else:
                holder.rollback()
            thread.join(timeout=10)
    finally:
        holder.close()
    (result,) = answer
    if first_commits:
        assert (result.ids, result.duplicates) == ([first_id], [True])
    else:
        assert result.duplicates == [False] and result.ids[0] != first_id
        row2 = store.get(result.ids[0])
        assert row2 is not None and row2.prompt == "second"
    assert _rows(pg_dsn, pg_schema) == 1


def test_migration_2_upgrades_a_version_1_table_in_place(pg_dsn: str, pg_schema: str) -> None:
    names = TableNames(schema=pg_schema, table="tasks")
    with psycopg.connect(pg_dsn) as conn:
        assert migrate(conn, names, MIGRATIONS[:1]) == 1
        conn.execute(sql.SQL("INSERT INTO {} (prompt, priority) VALUES ('v1 a', 'hot'), "
                             "('v1 b', 'bulk')").format(names.tasks))
        conn.commit()
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        assert store.migrate() == LATEST_VERSION >= 2
        ids = store.enqueue(["v2", "v2"], idempotency_keys=["k", None])
        assert store.enqueue(["v2"], idempotency_keys=["k"]) == ids[:1]
        claimed = store.claim(10, worker_id="w", claim_ttl_s=30)
    assert [t.prompt for t in claimed] == ["v1 a", "v1 b", "v2", "v2"]
    with psycopg.connect(pg_dsn) as conn:
        keys = conn.execute(sql.SQL("SELECT prompt, idempotency_key FROM {} ORDER BY id").format(
            names.tasks)).fetchall()
    assert keys == [("v1 a", None), ("v1 b", None), ("v2", "k"), ("v2", None)]


def test_every_character_a_model_name_may_hold_survives_the_array_literal(
        store: TaskStore) -> None:
    models = ["org/model:v1@eu+x.y_z-2", "A", "9" * 128]
    result = store.enqueue_tasks([NewTask("p", allowed_models=models), NewTask("q")])
    rows = [store.get(i) for i in result.ids]
    assert [r.allowed_models for r in rows if r is not None] == [tuple(models), None]
