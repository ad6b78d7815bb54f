"""The demo backlog: deterministic, varied, and enqueued as generated."""

from __future__ import annotations

from collections import Counter

import psycopg
from psycopg import sql

from airflow_llm_router.store import TaskStore
from llm_router_devkit.demo.seed import KINDS, groups, make_backlog, seed_store
from llm_router_devkit.simulator import SimulatorProfile

MODELS = [m.name for m in SimulatorProfile.default().models]


def test_same_seed_same_backlog_other_seed_other_backlog() -> None:
    assert make_backlog(200, seed=7, models=MODELS) == make_backlog(200, seed=7, models=MODELS)
    assert make_backlog(200, seed=7) != make_backlog(200, seed=8)
    assert make_backlog(50, seed=7) == make_backlog(200, seed=7)[:50]


def test_mix_of_kinds_lengths_lists_and_priorities() -> None:
    tasks = make_backlog(1000, seed=1, models=MODELS)
    assert len(tasks) == 1000 and len({t.prompt for t in tasks}) == 1000
    assert abs(sum(KIND.share for KIND in KINDS) - 1.0) < 1e-9
    kinds = Counter(t.kind for t in tasks)
    assert set(kinds) == {k.name for k in KINDS}
    by_group = groups(tasks)
    assert 0.6 < by_group[None] / 1000 < 0.85  # most tasks allow any model
    assert by_group[("coder", "chat-large")] > 0
    assert 10 < sum(t.priority == "hot" for t in tasks) < 100
    lengths = sorted(len(t.prompt) for t in tasks)
    assert lengths[0] < 200 and lengths[-1] > 4000  # a sentence to a few pages


def test_lists_keep_only_the_backends_models() -> None:
    tasks = make_backlog(300, seed=1, models=["chat-large", "flash"])
    lists = {t.allowed_models for t in tasks}
    assert lists == {None, ("chat-large",)}  # premium-scarce/chat-medium became any model


def test_seed_store_enqueues_in_order(pg_dsn: str, pg_schema: str) -> None:
    tasks = make_backlog(120, seed=5, models=MODELS)
    with TaskStore(pg_dsn, schema=pg_schema) as store:
        store.migrate()
        ids = seed_store(store, tasks)
        assert store.counts() == {"pending": 120, "claimed": 0, "solved": 0, "dead": 0}
    assert ids == sorted(ids) and len(set(ids)) == 120
    query = sql.SQL("SELECT prompt, kind, allowed_models, priority FROM {} ORDER BY id").format(
        sql.Identifier(pg_schema, "tasks"))
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(query).fetchall()
    assert [(r[0], r[1], tuple(r[2]) if r[2] else None, r[3]) for r in rows] == [
        (t.prompt, t.kind, t.allowed_models, t.priority) for t in tasks
    ]
