"""A worker dies holding claims (it claims and never completes): its tasks come back by
themselves when the claims expire, and whoever waits is woken, with nobody enqueuing.

Store-level reproduction of the crash of a drain: before, a second drain read an empty
backlog and stopped ("solved 0"), and nothing woke anyone when the claims expired.
"""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.store import TaskResult, TaskStore
from airflow_llm_router.triggers.backlog import BacklogArrivalTrigger
from tests.integration.watching import until_listening


def _expire_in(pg_dsn: str, schema: str, seconds: float, worker: str) -> int:
    """Make ``worker``'s claims expire ``seconds`` from now, as if it died long ago."""
    query = sql.SQL(
        "UPDATE {} SET claim_expires_at = now() + make_interval(secs => %s) "
        "WHERE status = 'claimed' AND claimed_by = %s").format(sql.Identifier(schema, "tasks"))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        return conn.execute(query, (seconds, worker)).rowcount


def _crash_mid_drain(store: TaskStore, other_store: TaskStore) -> list[int]:
    """10 tasks: a worker claims 4 and dies; a second drain solves the other 6. Returns
    the dead worker's task ids."""
    store.enqueue([f"p{i}" for i in range(10)])
    stranded = [t.id for t in store.claim(4, worker_id="killed", claim_ttl_s=60)]
    rest = other_store.claim(10, worker_id="second", claim_ttl_s=60)
    assert len(rest) == 6
    written = other_store.complete_many(
        [TaskResult(t.id, t.claim_token, "answer", "m") for t in rest])
    assert all(written.values())
    return stranded


async def test_dead_workers_claims_wake_waiters_and_are_taken_over(
    store: TaskStore, other_store: TaskStore, pg_dsn: str, pg_schema: str
) -> None:
    stranded = _crash_mid_drain(store, other_store)
    # what made the second drain stop: nothing claimable. Now it can tell others still work.
    assert other_store.backlog_size() == 0
    progress = other_store.claims_in_progress()
    assert progress.count == 4
    assert progress.next_expiry_s is not None and progress.next_expiry_s > 30

    assert _expire_in(pg_dsn, pg_schema, 1.0, "killed") == 4  # died 59 s ago
    async with store.watch() as watch, other_store.watch() as lingering:
        woke = asyncio.ensure_future(watch.arrival(120))
        also = asyncio.ensure_future(lingering.arrival(120))
        # both wake by themselves: each returns the claims it locked first (SKIP LOCKED
        # may split them) or hears the other's announcement; what counts is that they wake
        assert await asyncio.wait_for(woke, 60) > 0
        assert await asyncio.wait_for(also, 60) > 0
        assert await watch.backlog() == 4

    assert other_store.claims_in_progress().count == 0
    taken = other_store.claim(10, worker_id="second", claim_ttl_s=60)
    assert sorted(t.id for t in taken) == sorted(stranded)
    assert {t.attempts for t in taken} == {2}
    assert store.counts() == {"pending": 0, "claimed": 4, "solved": 6, "dead": 0}


async def test_claims_taken_while_a_watcher_waits_still_wake_it(
    store: TaskStore, other_store: TaskStore, pg_dsn: str, pg_schema: str
) -> None:
    """The watcher started with nothing claimed; a worker then claims with a 1 s TTL and
    dies. Claims are not announced, so the watcher finds them on its periodic re-read of
    the earliest expiry (``EXPIRY_CHECK_S``) and wakes at their expiry."""
    ids = store.enqueue(["a", "b"])
    async with store.watch() as watch:
        assert await watch.backlog() == 2
        waiting = asyncio.ensure_future(watch.arrival(120))
        await until_listening(pg_dsn, pg_schema, waiting)
        dying = await asyncio.to_thread(other_store.claim, 2, worker_id="short-lived",
                                        claim_ttl_s=1.0)
        assert [t.id for t in dying] == ids
        assert await asyncio.wait_for(waiting, 60) == 2
    assert [t.attempts for t in store.claim(5, worker_id="next", claim_ttl_s=60)] == [2, 2]


async def test_watcher_ignores_claims_that_are_extended(
    store: TaskStore, pg_dsn: str, pg_schema: str
) -> None:
    """A live worker's heartbeat moves the wake-up on; nothing is returned or announced."""
    store.enqueue(["p"])
    (task,) = store.claim(1, worker_id="alive", claim_ttl_s=60)
    _expire_in(pg_dsn, pg_schema, 0.5, "alive")
    async with store.watch() as watch:
        waiting = asyncio.ensure_future(watch.arrival(1.5))
        assert store.extend_claims([task], claim_ttl_s=60) == 1
        assert await asyncio.wait_for(waiting, 30) == 0
    row = store.get(task.id)
    assert row is not None and (row.status, row.claim_token) == ("claimed", task.claim_token)


@pytest.fixture
def postgres_conn(monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_EXPIRY", pg_dsn)
    return "postgres_expiry"


async def test_arrival_trigger_fires_when_stranded_work_becomes_claimable(
    store: TaskStore, other_store: TaskStore, postgres_conn: str, pg_dsn: str, pg_schema: str
) -> None:
    stranded = _crash_mid_drain(store, other_store)
    trigger = BacklogArrivalTrigger(postgres_conn_id=postgres_conn, schema=pg_schema,
                                    min_interval_s=0, poll_interval_s=600)
    _path, kwargs = trigger.serialize()
    trigger = BacklogArrivalTrigger(**json.loads(json.dumps(kwargs)))
    events = trigger.run()
    pending = asyncio.ensure_future(anext(events))
    await until_listening(pg_dsn, pg_schema, pending)
    assert not pending.done()  # backlog empty, claims live: nothing to fire
    # the claims expire after the trigger started waiting; nobody enqueues
    assert _expire_in(pg_dsn, pg_schema, 1.0, "killed") == 4
    event = (await asyncio.wait_for(pending, 60)).payload  # its poll is 10 minutes away
    assert event == {"backlog": 4, "announced": 4}
    await events.aclose()
    assert sorted(t.id for t in other_store.claim(10, worker_id="third", claim_ttl_s=60)) \
        == sorted(stranded)
