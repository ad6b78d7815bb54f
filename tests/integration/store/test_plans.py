"""The claim cycle reads by its indexes whatever the table's statistics, and a capped
backlog count reads at most its cap: the plans PostgreSQL ran, as ``auto_explain`` reports
them to the store's own connection."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.store import TaskStore

PENDING = 3000


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@pytest.fixture
def plans(store: TaskStore) -> Iterator[list[dict[str, Any]]]:
    """The plan of every statement the store's connection runs from now on (analyzed)."""
    conn = store.connection.connect()
    seen: list[dict[str, Any]] = []

    def note(diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if text.startswith("duration:") and "{" in text:
            seen.append(json.loads(text[text.index("{"):]))

    for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                    "SET auto_explain.log_analyze = on", "SET auto_explain.log_level = notice",
                    "SET auto_explain.log_format = json"):
        conn.execute(setting)
    conn.commit()
    conn.add_notice_handler(note)
    yield seen
    conn.remove_notice_handler(note)


def _scans_of(plans: list[dict[str, Any]], words: str) -> list[dict[str, Any]]:
    """The scan nodes of the statement whose text holds ``words``."""
    (doc,) = [p for p in plans if words in p["Query Text"]]
    return [n for n in _nodes(doc["Plan"]) if "Scan" in n["Node Type"]
            and n["Node Type"] != "CTE Scan"]


@pytest.fixture
def no_statistics(pg_dsn: str, pg_schema: str, store: TaskStore) -> Callable[[], None]:
    """A table filled before anything analyzed it, as after a big enqueue until autovacuum
    gets to it (kept off for the test)."""

    def make() -> None:
        store.migrate()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)")
                         .format(sql.Identifier(pg_schema, "tasks")))
        store.enqueue([f"task {i}" for i in range(PENDING)])

    return make


def test_a_claim_walks_the_claim_index_with_no_statistics(
    store: TaskStore, no_statistics: Callable[[], None],
    plans: list[dict[str, Any]],
) -> None:
    no_statistics()
    plans.clear()
    claimed = store.claim(10, worker_id="w", claim_ttl_s=60)
    assert len(claimed) == 10
    scans = _scans_of(plans, "status = 'pending'")
    # planned from the statistics alone, this gathered all 3,000 pending rows by bitmap
    # and sorted them; by the index it stops after the 10 it takes
    assert {n["Node Type"] for n in scans} <= {"Index Scan", "Index Only Scan"}, scans
    (pick,) = [n for n in scans if n.get("Index Name") == "tasks_pending_idx"]
    assert pick["Actual Rows"] <= 10 * pick.get("Actual Loops", 1), pick


def test_a_capped_backlog_count_reads_at_most_its_cap(
    store: TaskStore, no_statistics: Callable[[], None],
    plans: list[dict[str, Any]], expire_claims: Callable[..., int],
) -> None:
    no_statistics()
    (lost,) = store.claim(1, worker_id="w", claim_ttl_s=60)
    assert expire_claims(lost.id) == 1
    plans.clear()
    assert store.backlog_size(cap=100) == 100  # the expired claim went back to pending
    scans = _scans_of(plans, "AS p)")
    assert {n["Node Type"] for n in scans} <= {"Index Scan", "Index Only Scan"}, scans
    (pending,) = [n for n in scans if n.get("Index Name") == "tasks_pending_idx"]
    assert pending["Actual Rows"] <= 100, pending  # not all 3,000
    assert store.backlog_size(cap=1) == 1
    assert store.backlog_size() == PENDING


def test_a_cap_must_be_a_count(store: TaskStore) -> None:
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(TaskValidationError) as err:
            store.backlog_size(cap=bad)  # type: ignore[arg-type]
        assert err.value.field == "cap"
