"""Claim tokens fence every write: a superseded worker can change nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.store import TaskFailure, TaskResult, TaskStore
from airflow_llm_router.store.records import MAX_ERROR_CHARS


def test_stale_claim_token_cannot_overwrite(
    store: TaskStore, other_store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    (task_id,) = store.enqueue(["p"])
    (old,) = store.claim(1, worker_id="a", claim_ttl_s=30)
    expire_claims(task_id)
    (new,) = other_store.claim(1, worker_id="b", claim_ttl_s=30)
    assert new.id == task_id

    # While b holds the claim, a's late writes are refused and change nothing.
    assert not store.complete(task_id, old.claim_token, answer="late a", model="ma")
    assert store.fail(task_id, old.claim_token, error="late a") is None
    assert not store.release(task_id, old.claim_token)
    assert store.extend_claims({task_id: old.claim_token}, claim_ttl_s=60) == 0
    row = store.get(task_id)
    assert row is not None
    assert (row.status, row.claim_token, row.answer, row.attempts) == (
        "claimed",
        new.claim_token,
        None,
        2,
    )

    assert other_store.complete(
        task_id, new.claim_token, answer="b", model="mb", input_tokens=3, output_tokens=4
    )
    # After b's answer, a's write is still refused and b's answer stays.
    assert not store.complete(task_id, old.claim_token, answer="late a", model="ma")
    row = store.get(task_id)
    assert row is not None
    assert (row.status, row.answer, row.model, row.input_tokens, row.output_tokens) == (
        "solved",
        "b",
        "mb",
        3,
        4,
    )
    assert row.solved_at is not None
    assert (row.claim_token, row.claimed_by, row.claim_expires_at) == (None, None, None)


def test_complete_many_with_stale_and_current_tokens(
    store: TaskStore, other_store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    store.enqueue([f"p{i}" for i in range(4)])
    mine = store.claim(4, worker_id="a", claim_ttl_s=30)
    lost = mine[:2]
    expire_claims(*(t.id for t in lost))
    theirs = other_store.claim(4, worker_id="b", claim_ttl_s=30)
    assert {t.id for t in theirs} == {t.id for t in lost}

    written = store.complete_many(
        [TaskResult(t.id, t.claim_token, f"a{t.id}", "ma", 1, 2) for t in mine]
    )
    assert written == {t.id: t not in lost for t in mine}
    for task in lost:
        row = store.get(task.id)
        assert row is not None
        assert (row.status, row.answer) == ("claimed", None)
    assert other_store.complete_many(
        [
            {"task_id": t.id, "claim_token": t.claim_token, "answer": "b", "model": "mb"}
            for t in theirs
        ]
    ) == {t.id: True for t in theirs}
    assert store.counts()["solved"] == 4
    answers = {t.id: store.get(t.id).answer for t in mine}  # type: ignore[union-attr]
    assert answers == {t.id: ("b" if t in lost else f"a{t.id}") for t in mine}


def test_complete_twice_is_refused(store: TaskStore) -> None:
    store.enqueue(["p"])
    (task,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert store.complete(task.id, task.claim_token, answer="one", model="m")
    assert not store.complete(task.id, task.claim_token, answer="two", model="m")
    row = store.get(task.id)
    assert row is not None and row.answer == "one"


def test_fail_retries_then_dead_letters(store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"], max_attempts=2)
    (task,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert store.fail(task_id, task.claim_token, error="HTTP 500") == "pending"
    assert store.backlog_size() == 1
    (task,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert task.attempts == 2
    assert store.fail(task_id, task.claim_token, error="HTTP 503") == "dead"
    row = store.get(task_id)
    assert row is not None
    assert (row.status, row.last_error, row.claim_token) == ("dead", "HTTP 503", None)
    assert store.claim(1, worker_id="w", claim_ttl_s=30) == []


def test_non_retryable_failure_is_dead_at_once(store: TaskStore) -> None:
    store.enqueue(["p"], max_attempts=5)
    (task,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert store.fail(task.id, task.claim_token, error="too large", retryable=False) == "dead"
    assert store.counts()["dead"] == 1


def test_fail_many_mixed_and_error_truncated(store: TaskStore) -> None:
    store.enqueue(["p", "q", "r"], max_attempts=1)
    a, b, c = store.claim(3, worker_id="w", claim_ttl_s=30)
    huge = "x" * (MAX_ERROR_CHARS * 3) + "\x00"
    result = store.fail_many(
        [
            TaskFailure(a.id, a.claim_token, huge),
            {"task_id": b.id, "claim_token": str(uuid.uuid4()), "error": "stale"},
            TaskFailure(c.id, c.claim_token, "nope", retryable=False),
        ]
    )
    assert result == {a.id: "dead", b.id: None, c.id: "dead"}
    row = store.get(a.id)
    assert row is not None and row.last_error is not None
    assert MAX_ERROR_CHARS < len(row.last_error) < MAX_ERROR_CHARS + 100
    assert "truncated" in row.last_error
    unchanged = store.get(b.id)
    assert unchanged is not None and unchanged.status == "claimed"


def test_release_does_not_count_the_attempt(store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"], max_attempts=1)
    (task,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert store.release(task_id, task.claim_token)
    row = store.get(task_id)
    assert row is not None
    assert (row.status, row.attempts, row.claim_token) == ("pending", 0, None)
    assert not store.release(task_id, task.claim_token)
    (again,) = store.claim(1, worker_id="w", claim_ttl_s=30)
    assert again.attempts == 1  # max_attempts=1 is still available after a release


def test_release_many_accepts_claimed_tasks(store: TaskStore) -> None:
    store.enqueue(["p", "q"])
    tasks = store.claim(2, worker_id="w", claim_ttl_s=30)
    assert store.release_many(tasks) == {t.id: True for t in tasks}
    assert store.counts()["pending"] == 2


def test_extend_claims_is_fenced_and_renews_expired_claims(
    store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    store.enqueue(["p", "q"])
    a, b = store.claim(2, worker_id="w", claim_ttl_s=30)
    expire_claims(a.id, b.id)
    assert store.backlog_size() == 2
    extended = store.extend_claims(
        [(a.id, a.claim_token), (b.id, str(uuid.uuid4()))], claim_ttl_s=60
    )
    assert extended == 1
    assert store.backlog_size() == 1
    (taken,) = store.claim(5, worker_id="x", claim_ttl_s=30)
    assert taken.id == b.id


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.complete(1, "not-a-uuid", answer="a", model="m"), "results[0].claim_token"),
        (lambda s: s.complete("1", str(uuid.uuid4()), answer="a", model="m"), "results[0].task_id"),
        (
            lambda s: s.complete(1, str(uuid.uuid4()), answer="a", model="m", input_tokens=-1),
            "results[0].input_tokens",
        ),
        (lambda s: s.complete(1, str(uuid.uuid4()), answer="a", model=""), "results[0]"),
        (
            lambda s: s.complete_many(
                [
                    TaskResult(1, str(uuid.uuid4()), "a", "m"),
                    TaskResult(1, str(uuid.uuid4()), "b", "m"),
                ]
            ),
            "results",
        ),
        (lambda s: s.extend_claims({1: str(uuid.uuid4())}, claim_ttl_s=-1), "claim_ttl_s"),
        (lambda s: s.release_many([(1,)]), "claims[0]"),
        (lambda s: s.get("1"), "task_id"),
    ],
)
def test_write_validation_names_the_field(
    store: TaskStore, call: Callable[[TaskStore], object], field: str
) -> None:
    with pytest.raises(TaskValidationError) as info:
        call(store)
    assert info.value.field == field


def test_answers_and_errors_with_unstorable_text_are_made_storable(store: TaskStore) -> None:
    """A backend's JSON may decode to lone surrogates; the paid answer is written with
    U+FFFD in their place instead of failing the whole chunk."""
    store.enqueue(["p", "q"])
    a, b = store.claim(2, worker_id="w", claim_ttl_s=30)
    written = store.complete_many([
        TaskResult(a.id, a.claim_token, "half an emoji \ud83d and a NUL \x00", "m\udfff")])
    assert written == {a.id: True}
    row = store.get(a.id)
    assert row is not None
    assert (row.answer, row.model) == ("half an emoji \ufffd and a NUL \ufffd", "m\ufffd")
    assert store.fail(b.id, b.claim_token, error="bad \ud800 byte", retryable=False) == "dead"
    failed = store.get(b.id)
    assert failed is not None and failed.last_error == "bad \ufffd byte"


@pytest.mark.parametrize("worker_id", ["nul\x00", "\ud800", "w" * 1001])
def test_unstorable_worker_id_is_refused(store: TaskStore, worker_id: str) -> None:
    store.enqueue(["p"])
    with pytest.raises(TaskValidationError) as info:
        store.claim(1, worker_id=worker_id, claim_ttl_s=30)
    assert info.value.field == "worker_id"
    assert store.counts()["pending"] == 1
