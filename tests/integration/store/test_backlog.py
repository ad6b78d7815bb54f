"""The operator's view of the backlog: the summary, the dead-letter list and requeue, against
the real PostgreSQL (claim cycle, fencing and notifications included)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.store import DeadFilter, TaskStore
from airflow_llm_router.store import backlog_records as store_models


def _kill(store: TaskStore, n: int, *, error: str = "boom", **enqueue: object) -> list[int]:
    """``n`` new tasks dead-lettered through the claim cycle (a non-retryable failure)."""
    ids = store.enqueue([f"secret prompt {i}" for i in range(n)], **enqueue)  # type: ignore[arg-type]
    claimed = store.claim(n, worker_id="killer", claim_ttl_s=30)
    assert sorted(t.id for t in claimed) == ids
    for task in claimed:
        assert store.fail(task.id, task.claim_token, error=error, retryable=False) == "dead"
    return ids


def _sql(pg_dsn: str, statement: str, *args: object) -> int:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        return conn.execute(statement, args).rowcount


@pytest.fixture
def listener(store: TaskStore, pg_dsn: str) -> Iterator[psycopg.Connection[object]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'LISTEN "{store.notify_channel}"')
        yield conn


def test_empty_backlog_summary(store: TaskStore) -> None:
    doc = store.admin.backlog_summary().to_dict()
    assert doc["totals"] == {"pending": 0, "claimed": 0, "solved": 0, "dead": 0}
    assert doc["counts"]["pending"] == {"hot": 0, "bulk": 0}
    assert doc["oldest_pending_age_s"] is None
    assert doc["throughput_per_min"] == 0 and doc["eta_s"] is None and doc["capped"] == []


def test_summary_counts_by_status_and_lane_with_age_throughput_and_eta(
        store: TaskStore, pg_dsn: str, pg_schema: str) -> None:
    hot = store.enqueue(["h1", "h2", "h3"], priority="hot")
    bulk = store.enqueue(["b1", "b2", "b3"])
    first, second = store.claim(2, worker_id="w", claim_ttl_s=30)
    assert store.complete(first.id, first.claim_token, answer="a", model="m")
    assert store.fail(second.id, second.claim_token, error="x", retryable=False) == "dead"
    store.claim(1, worker_id="w", claim_ttl_s=30)  # the third hot task, still claimed
    tasks = sql.Identifier(pg_schema, "tasks")
    _sql(pg_dsn, sql.SQL("UPDATE {} SET created_at = now() - interval '120 seconds' "
                         "WHERE id = %s").format(tasks).as_string(None), bulk[0])

    summary = store.admin.backlog_summary()
    assert summary.counts == {"pending": {"hot": 0, "bulk": 3}, "claimed": {"hot": 1, "bulk": 0},
                              "solved": {"hot": 1, "bulk": 0}, "dead": {"hot": 1, "bulk": 0}}
    assert summary.oldest_pending_age_s is not None
    assert 119 <= summary.oldest_pending_age_s < 180
    assert summary.solved_recently == 1
    assert summary.throughput_per_min == pytest.approx(0.2)
    # 4 not done (3 pending, 1 claimed) at 1 per 300 s
    assert summary.remaining == 4 and summary.eta_s == pytest.approx(1200)
    assert hot[0] == first.id

    # a solve older than the throughput window no longer counts: no rate, no ETA
    _sql(pg_dsn, sql.SQL("UPDATE {} SET solved_at = now() - interval '301 seconds' "
                         "WHERE id = %s").format(tasks).as_string(None), first.id)
    later = store.admin.backlog_summary()
    assert later.solved_recently == 0 and later.eta_s is None
    assert later.counts["solved"]["hot"] == 1


def test_counts_stop_at_the_cap(store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.enqueue([f"p{i}" for i in range(7)])
    monkeypatch.setattr(store_models, "COUNT_CAP", 5)
    summary = store.admin.backlog_summary()
    assert summary.counts["pending"]["bulk"] == 5 and summary.capped == ("pending",)


def test_dead_list_newest_first_paged_filtered_and_without_prompts(
        store: TaskStore, pg_dsn: str, pg_schema: str) -> None:
    old = _kill(store, 2, error="HTTP 500 from backend", kind="summarise",
                allowed_models=["gpt-a"])
    new = _kill(store, 3, error="prompt too large: " + "x" * 1000, kind="classify")
    store.enqueue(["alive"])  # pending: never listed
    tasks = sql.Identifier(pg_schema, "tasks")
    _sql(pg_dsn, sql.SQL("UPDATE {} SET updated_at = now() - interval '1 hour' "
                         "WHERE id = ANY(%s)").format(tasks).as_string(None), old)

    page = store.admin.dead_tasks(limit=2)
    assert page.total == 5 and not page.total_capped
    assert [t.id for t in page.tasks] == sorted(new, reverse=True)[:2]
    rest = store.admin.dead_tasks(limit=2, offset=2)
    assert [t.id for t in rest.tasks] == [min(new), *sorted(old, reverse=True)][:2]

    cut = page.tasks[0]
    assert cut.last_error is not None and len(cut.last_error) == store_models.ERROR_PREVIEW_CHARS
    doc = cut.to_dict()
    assert "prompt" not in doc and "secret" not in str(doc)
    assert doc["kind"] == "classify" and doc["attempts"] == 1 and doc["priority"] == "bulk"

    by_kind = store.admin.dead_tasks(matching=DeadFilter(kind="summarise"))
    assert sorted(t.id for t in by_kind.tasks) == old and by_kind.total == 2
    by_model = store.admin.dead_tasks(matching=DeadFilter(model="gpt-a"))
    assert sorted(t.id for t in by_model.tasks) == old
    assert by_model.tasks[0].allowed_models == ("gpt-a",)
    by_error = store.admin.dead_tasks(matching=DeadFilter(error_contains="http 500"))
    assert sorted(t.id for t in by_error.tasks) == old
    assert store.admin.dead_tasks(matching=DeadFilter(error_contains="%")).total == 0


def test_a_dead_letter_records_the_model_that_failed_it(store: TaskStore) -> None:
    """An any-model task that died on a model's errors is found by that model's filter;
    a later failure with no call (no model) keeps the model of the earlier one."""
    ghost, other = store.enqueue(["a", "b"], max_attempts=2)
    claimed = {t.id: t for t in store.claim(2, worker_id="w", claim_ttl_s=30)}
    assert store.fail(ghost, claimed[ghost].claim_token, error="HTTP 500",
                      model="ghost-model") == "pending"
    assert store.fail(other, claimed[other].claim_token, error="HTTP 500", retryable=False,
                      model="other-model") == "dead"
    (again,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert again.id == ghost
    assert store.fail(ghost, again.claim_token, error="no model can take it") == "dead"
    page = store.admin.dead_tasks(matching=DeadFilter(model="ghost-model"))
    assert [t.id for t in page.tasks] == [ghost] and page.tasks[0].model == "ghost-model"
    assert [t.id for t in store.admin.dead_tasks(matching=DeadFilter(model="other-model")).tasks
            ] == [other]


def test_requeue_by_ids_resets_attempts_keeps_the_error_logs_and_notifies(
        store: TaskStore, listener: psycopg.Connection[object]) -> None:
    dead = _kill(store, 3, error="backend said no")
    alive = store.enqueue(["alive"])
    list(listener.notifies(timeout=0.5))  # drain what enqueue and claims sent

    result = store.admin.requeue([dead[0], dead[1], alive[0], 999_999], actor="alice", source="api")
    assert result.ids == dead[:2] and result.skipped == sorted([alive[0], 999_999])
    assert result.remaining == 0
    received = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert received == ["2"]
    row = store.get(dead[0])
    assert row is not None
    assert (row.status, row.attempts, row.claim_token, row.last_error) == (
        "pending", 0, None, "backend said no")
    still = store.get(dead[2])
    assert still is not None and still.status == "dead"

    (entry,) = store.admin.requeue_log()
    assert (entry.actor, entry.source, entry.requeued, entry.skipped) == ("alice", "api", 2, 2)
    assert entry.request == {"ids": sorted([*dead[:2], alive[0], 999_999])}
    # requeuing them again does nothing: they are no longer dead
    again = store.admin.requeue(dead[:2], actor="alice")
    assert again.ids == [] and again.skipped == dead[:2]


def test_requeue_by_filter_is_capped_and_says_how_many_remain(
        store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts = _kill(store, 5, error="Timeout after 120 s", kind="k1")
    others = _kill(store, 2, error="HTTP 400", kind="k1")
    monkeypatch.setattr(store_models, "REQUEUE_MAX", 3)

    first = store.admin.requeue(matching=DeadFilter(kind="k1", error_contains="TIMEOUT"),
                                actor="bob")
    assert first.ids == timeouts[:3] and first.remaining == 2  # oldest first
    second = store.admin.requeue(matching=DeadFilter(kind="k1", error_contains="timeout"),
                                 actor="bob")
    assert second.ids == timeouts[3:] and second.remaining == 0
    assert store.admin.backlog_summary().counts["dead"]["bulk"] == len(others)
    everything = store.admin.requeue(matching=DeadFilter(), actor="bob")
    assert everything.ids == others and everything.remaining == 0
    log = store.admin.requeue_log(limit=5)
    assert [e.requeued for e in log] == [2, 2, 3]
    assert log[-1].request == {"matching": {"kind": "k1", "error": "TIMEOUT"}}


def test_a_requeued_task_solves_through_the_claim_cycle_and_old_claims_stay_fenced(
        store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"], max_attempts=1)
    (old,) = store.claim(1, worker_id="w1", claim_ttl_s=30)
    # max_attempts=1: no attempt left, so the failure dead-letters it
    assert store.fail(old.id, old.claim_token, error="first try failed") == "dead"
    assert store.admin.requeue([task_id], actor="ops").ids == [task_id]

    # the first attempt's worker, late, can no longer write
    assert not store.complete(task_id, old.claim_token, answer="late", model="m")
    assert store.fail(task_id, old.claim_token, error="late") is None
    (new,) = store.claim(1, worker_id="w2", claim_ttl_s=30)
    assert new.id == task_id and new.attempts == 1 and new.claim_token != old.claim_token
    assert store.complete(task_id, new.claim_token, answer="fine", model="m")
    row = store.get(task_id)
    assert row is not None and (row.status, row.answer, row.attempts) == ("solved", "fine", 1)
    assert store.admin.backlog_summary().counts["solved"]["bulk"] == 1


@pytest.mark.parametrize(("call", "field"), [
    (lambda s: s.admin.dead_tasks(limit=0), "limit"),
    (lambda s: s.admin.dead_tasks(limit=501), "limit"),
    (lambda s: s.admin.dead_tasks(offset=-1), "offset"),
    (lambda s: s.admin.dead_tasks(matching=DeadFilter(kind="")), "kind"),
    (lambda s: s.admin.dead_tasks(matching=DeadFilter(model="bad name")), "model"),
    (lambda s: s.admin.dead_tasks(matching=DeadFilter(error_contains="")), "error_contains"),
    (lambda s: s.admin.dead_tasks(matching=DeadFilter(error_contains="x\x00")), "error_contains"),
    (lambda s: s.admin.requeue([], actor="a"), "ids"),
    (lambda s: s.admin.requeue(["1"], actor="a"), "ids[0]"),
    (lambda s: s.admin.requeue([1, True], actor="a"), "ids[1]"),
    (lambda s: s.admin.requeue([1, 2**63], actor="a"), "ids[1]"),  # past a bigint
    (lambda s: s.admin.requeue(list(range(1, 10_002)), actor="a"), "ids"),
    (lambda s: s.admin.requeue(actor="a"), "ids"),
    (lambda s: s.admin.requeue([1], matching=DeadFilter(), actor="a"), "ids"),
    (lambda s: s.admin.requeue([1], actor=""), "actor"),
    (lambda s: s.admin.requeue(matching={"kind": "k"}, actor="a"), "matching"),
    (lambda s: s.admin.requeue_log(limit=0), "limit"),
])
def test_bad_arguments_name_the_field_and_change_nothing(store: TaskStore, call: object,
                                                         field: str) -> None:
    dead = _kill(store, 1)
    with pytest.raises(TaskValidationError) as info:
        call(store)  # type: ignore[operator]
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    row = store.get(dead[0])
    assert row is not None and row.status == "dead"


def test_summary_and_dead_list_read_their_indexes(store: TaskStore, pg_dsn: str,
                                                  pg_schema: str) -> None:
    """The statements match the partial indexes of migration 3 (with sequential scans off,
    the planner uses them if their predicates fit)."""
    _kill(store, 2)
    tasks = sql.Identifier(pg_schema, "tasks").as_string(None)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        solved = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN SELECT count(*) FROM {tasks} WHERE status = 'solved' "
            "AND solved_at > now() - interval '5 minutes'").fetchall())
        dead = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN SELECT id FROM {tasks} WHERE status = 'dead' "
            "ORDER BY updated_at DESC, id DESC LIMIT 50").fetchall())
    assert "tasks_solved_at_idx" in solved
    assert "tasks_dead_idx" in dead
