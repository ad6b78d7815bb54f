"""Claiming: order, exclusivity under concurrency, expiry and dead-lettering of lost claims."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.store import ClaimedTask, TaskResult, TaskStore


def test_hot_tasks_are_claimed_before_bulk_then_oldest_first(store: TaskStore) -> None:
    bulk_early = store.enqueue(["b1", "b2", "b3"])
    hot = store.enqueue(["h1", "h2"], priority="hot")
    bulk_late = store.enqueue(["b4"])

    first = store.claim(3, worker_id="w", claim_ttl_s=30)
    assert [t.id for t in first] == [*hot, bulk_early[0]]
    rest = store.claim(10, worker_id="w", claim_ttl_s=30)
    assert [t.id for t in rest] == [*bulk_early[1:], *bulk_late]
    assert store.claim(10, worker_id="w", claim_ttl_s=30) == []


def test_claim_sets_token_attempt_and_owner(store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"], allowed_models=["m1", "m2"], metadata={"k": "v"})
    (task,) = store.claim(5, worker_id="worker-1", claim_ttl_s=30)
    assert task.id == task_id
    assert task.attempts == 1
    assert task.allowed_models == ("m1", "m2")
    assert task.metadata == {"k": "v"}
    row = store.get(task_id)
    assert row is not None
    assert row.status == "claimed"
    assert row.claim_token == task.claim_token
    assert row.claimed_by == "worker-1"
    assert row.claim_expires_at is not None and row.claim_expires_at > row.updated_at


def test_claimed_task_round_trips_through_json(store: TaskStore) -> None:
    store.enqueue(["p"], allowed_models=["m1"], metadata={"k": [1, 2]})
    store.enqueue(["q"])
    tasks = store.claim(2, worker_id="w", claim_ttl_s=30)
    for task in tasks:
        again = ClaimedTask.from_dict(json.loads(json.dumps(task.to_dict())))
        assert again == task
    assert tasks[1].to_dict()["allowed_models"] is None


def test_concurrent_claimers_never_share_a_task(pg_dsn: str, pg_schema: str) -> None:
    total, workers, chunk = 2_000, 8, 10
    with TaskStore(pg_dsn, schema=pg_schema) as setup:
        setup.migrate()
        all_ids = set(setup.enqueue([f"p{i}" for i in range(total)]))
    claimed: list[list[int]] = [[] for _ in range(workers)]
    refused: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(workers)

    def work(index: int) -> None:
        try:
            with TaskStore(pg_dsn, schema=pg_schema) as store:
                barrier.wait(timeout=5)
                while True:
                    tasks = store.claim(chunk, worker_id=f"w{index}", claim_ttl_s=60)
                    if not tasks:
                        if store.backlog_size() == 0:
                            return
                        continue
                    assert len(tasks) <= chunk
                    claimed[index].extend(t.id for t in tasks)
                    written = store.complete_many(
                        [TaskResult(t.id, t.claim_token, f"a{t.id}", "m") for t in tasks]
                    )
                    refused.extend(i for i, ok in written.items() if not ok)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    flat = [task_id for ids in claimed for task_id in ids]
    assert len(flat) == len(set(flat)), "a task was claimed twice"
    assert set(flat) == all_ids
    assert refused == []
    assert sum(1 for ids in claimed if ids) > 1, "only one claimer got work"
    with TaskStore(pg_dsn, schema=pg_schema) as check:
        assert check.counts() == {"pending": 0, "claimed": 0, "solved": total, "dead": 0}


def test_expired_claims_return_to_the_backlog(
    store: TaskStore, other_store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    (task_id,) = store.enqueue(["p"])
    (first,) = store.claim(1, worker_id="a", claim_ttl_s=30)
    assert store.backlog_size() == 0
    assert other_store.claim(1, worker_id="b", claim_ttl_s=30) == []

    assert expire_claims(task_id) == 1
    assert store.backlog_size() == 1
    # the backlog read returned it to pending, its attempt counted
    assert store.counts() == {"pending": 1, "claimed": 0, "solved": 0, "dead": 0}
    (second,) = other_store.claim(1, worker_id="b", claim_ttl_s=30)
    assert second.id == task_id
    assert second.attempts == 2
    assert second.claim_token != first.claim_token
    assert store.backlog_size() == 0


def test_expired_claims_queue_by_priority_and_age(
    store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    older, newer = store.enqueue(["old", "new"])
    (claimed,) = store.claim(1, worker_id="a", claim_ttl_s=30)
    assert claimed.id == older
    expire_claims(older)
    (hot,) = store.enqueue(["hot"], priority="hot")
    assert [t.id for t in store.claim(3, worker_id="b", claim_ttl_s=30)] == [hot, older, newer]


def test_expired_claim_on_last_attempt_is_dead_lettered(
    store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    (task_id,) = store.enqueue(["p"], max_attempts=2)
    for attempt in (1, 2):
        (task,) = store.claim(1, worker_id=f"w{attempt}", claim_ttl_s=30)
        assert task.attempts == attempt
        expire_claims(task_id)

    assert store.claim(1, worker_id="w3", claim_ttl_s=30) == []
    row = store.get(task_id)
    assert row is not None
    assert row.status == "dead"
    assert row.claim_token is None
    assert row.last_error is not None and "claims expired" in row.last_error
    assert "w2" in row.last_error
    assert store.backlog_size() == 0
    assert store.counts() == {"pending": 0, "claimed": 0, "solved": 0, "dead": 1}


def test_dead_lettering_does_not_starve_claims(
    store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    doomed = store.enqueue([f"d{i}" for i in range(3)], max_attempts=1)
    store.claim(3, worker_id="a", claim_ttl_s=30)
    expire_claims(*doomed)
    fresh = store.enqueue(["fresh"])
    assert [t.id for t in store.claim(5, worker_id="b", claim_ttl_s=30)] == fresh
    assert store.counts()["dead"] == 3


def test_counts_cover_every_status(store: TaskStore, expire_claims: Callable[..., int]) -> None:
    assert store.counts() == {"pending": 0, "claimed": 0, "solved": 0, "dead": 0}
    store.enqueue([f"p{i}" for i in range(6)], max_attempts=1)
    a, b, c, _ = store.claim(4, worker_id="w", claim_ttl_s=30)
    assert store.complete(a.id, a.claim_token, answer="x", model="m")
    assert store.fail(b.id, b.claim_token, error="boom") == "dead"
    assert store.counts() == {"pending": 2, "claimed": 2, "solved": 1, "dead": 1}
    assert store.backlog_size() == 2
    expire_claims(c.id)
    # c expired on its last attempt: dead-lettered by the read, not counted as claimable
    assert store.backlog_size() == 2
    assert store.counts() == {"pending": 2, "claimed": 1, "solved": 1, "dead": 2}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": -1}, "n"),
        ({"n": 1.5}, "n"),
        ({"worker_id": ""}, "worker_id"),
        ({"claim_ttl_s": 0}, "claim_ttl_s"),
        ({"claim_ttl_s": float("inf")}, "claim_ttl_s"),
    ],
)
def test_claim_validation_names_the_field(
    store: TaskStore, kwargs: dict[str, object], field: str
) -> None:
    args: dict[str, object] = {"n": 1, "worker_id": "w", "claim_ttl_s": 30.0, **kwargs}
    with pytest.raises(TaskValidationError) as info:
        store.claim(**args)  # type: ignore[arg-type]
    assert info.value.field == field


def test_claim_of_zero_is_empty(store: TaskStore) -> None:
    store.enqueue(["p"])
    assert store.claim(0, worker_id="w", claim_ttl_s=30) == []
    assert store.counts()["pending"] == 1


def test_a_worker_takes_back_only_its_own_live_claims(store: TaskStore) -> None:
    """A restarted worker (same worker id) gets its claims back with their tokens and
    attempts, extended; another worker's claims and finished tasks stay as they are."""
    store.enqueue(["a", "b", "c", "d"])
    mine = store.claim(2, worker_id="w1", claim_ttl_s=5)
    theirs = store.claim(1, worker_id="w2", claim_ttl_s=5)
    store.complete(mine[1].id, mine[1].claim_token, answer="done", model="m")
    before = store.get(mine[0].id)
    assert before is not None and before.claim_expires_at is not None
    adopted = store.adopt(worker_id="w1", claim_ttl_s=600)
    assert [(t.id, t.claim_token, t.attempts) for t in adopted] == [
        (mine[0].id, mine[0].claim_token, 1)]
    after = store.get(mine[0].id)
    assert after is not None and after.claim_expires_at is not None
    assert after.status == "claimed" and after.claim_expires_at > before.claim_expires_at
    other = store.get(theirs[0].id)
    assert other is not None and other.claimed_by == "w2"
    assert store.adopt(worker_id="nobody", claim_ttl_s=600) == []
