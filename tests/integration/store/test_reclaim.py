"""Expired claims come back by themselves: any claim or backlog read returns them to
pending (attempts kept; dead-lettered on their last attempt) and announces them on the
store's channel, as an enqueue does; ``claims_in_progress`` tells "empty" from "others are
still working"."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from airflow_llm_router.store import ClaimsInProgress, TaskStore


@pytest.fixture
def listener(store: TaskStore, pg_dsn: str) -> Iterator[psycopg.Connection[object]]:
    """A session LISTENing on the store's channel, as a watcher does."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'LISTEN "{store.notify_channel}"')
        yield conn


def _payloads(conn: psycopg.Connection[object], timeout: float = 2.0) -> list[str]:
    """Notifications received so far (waiting up to ``timeout`` for the first)."""
    first = [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
    return first + [n.payload for n in conn.notifies(timeout=0.1)] if first else []


def test_backlog_read_returns_expired_claims_and_announces_them(
    store: TaskStore, expire_claims: Callable[..., int],
    listener: psycopg.Connection[object],
) -> None:
    ids = store.enqueue(["a", "b", "c"])
    assert _payloads(listener) == ["3"]  # the enqueue
    store.claim(3, worker_id="dead-worker", claim_ttl_s=30)
    assert expire_claims(ids[0], ids[1]) == 2

    assert store.backlog_size() == 2
    assert _payloads(listener) == ["2"]  # the same notification as an enqueue of 2
    for task_id in ids[:2]:
        row = store.get(task_id)
        assert row is not None
        assert (row.status, row.attempts, row.claim_expires_at) == ("pending", 1, None)
    assert store.counts() == {"pending": 2, "claimed": 1, "solved": 0, "dead": 0}
    assert store.backlog_size() == 2
    assert _payloads(listener, timeout=0.3) == []  # announced once, not on every read


def test_claim_returns_expired_claims_and_announces_those_it_leaves(
    store: TaskStore, other_store: TaskStore, expire_claims: Callable[..., int],
    listener: psycopg.Connection[object],
) -> None:
    ids = store.enqueue(["a", "b", "c"])
    _payloads(listener)
    store.claim(3, worker_id="dead-worker", claim_ttl_s=30)
    expire_claims(*ids)
    (taken,) = other_store.claim(1, worker_id="b", claim_ttl_s=30)
    assert (taken.id, taken.attempts) == (ids[0], 2)
    assert _payloads(listener) == ["2"]  # the two it did not take
    assert other_store.backlog_size() == 2


def test_expired_claims_on_their_last_attempt_are_dead_lettered_silently(
    store: TaskStore, expire_claims: Callable[..., int],
    listener: psycopg.Connection[object],
) -> None:
    (task_id,) = store.enqueue(["p"], max_attempts=1)
    _payloads(listener)
    store.claim(1, worker_id="w1", claim_ttl_s=30)
    expire_claims(task_id)
    assert store.backlog_size() == 0
    row = store.get(task_id)
    assert row is not None and row.status == "dead" and row.claim_token is None
    assert row.last_error is not None and "claims expired" in row.last_error
    assert _payloads(listener, timeout=0.3) == []  # nothing came back


def test_late_worker_whose_claim_nobody_took_still_writes(
    store: TaskStore, other_store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    """Returned to pending but not claimed again, the old claim is still the current one:
    its answer is written (no paid answer thrown away), its heartbeat revives it."""
    first, second = store.enqueue(["p", "q"])
    a, b = store.claim(2, worker_id="slow", claim_ttl_s=30)
    expire_claims(first, second)
    assert other_store.backlog_size() == 2  # both back in pending
    assert store.complete(a.id, a.claim_token, answer="late", model="m")
    assert store.extend_claims([b], claim_ttl_s=30) == 1
    row = store.get(b.id)
    assert row is not None and (row.status, row.attempts) == ("claimed", 1)
    assert other_store.claim(5, worker_id="other", claim_ttl_s=30) == []
    assert store.counts() == {"pending": 0, "claimed": 1, "solved": 1, "dead": 0}


def test_claims_in_progress_tells_empty_from_still_working(
    store: TaskStore, expire_claims: Callable[..., int]
) -> None:
    assert store.claims_in_progress() == ClaimsInProgress(0, None, None)
    ids = store.enqueue([f"p{i}" for i in range(5)])
    store.claim(3, worker_id="w", claim_ttl_s=60)
    store.claim(2, worker_id="w", claim_ttl_s=120)
    expire_claims(ids[0])

    progress = store.claims_in_progress()
    assert progress.count == 4
    assert progress.next_expiry_s is not None and 0 < progress.next_expiry_s <= 60
    assert progress.next_expires_at is not None
    assert store.backlog_size() == 1  # the expired one came back; the others are live
