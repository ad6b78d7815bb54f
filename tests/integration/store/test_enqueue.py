"""Enqueue: ids in order, fast for big batches, notifies on commit, validates its input."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from airflow_llm_router.store import TaskStore, TaskValidationError


def test_enqueue_returns_ids_in_prompt_order(store: TaskStore) -> None:
    prompts = ["first", "second", "third"]
    ids = store.enqueue(
        prompts,
        priority="hot",
        allowed_models=["model-b", "model-a", "model-b"],
        kind="summary",
        max_attempts=3,
        metadata=[{"n": 1}, {"n": 2}, {"n": 3}],
    )
    rows = [store.get(task_id) for task_id in ids]
    assert [row.prompt for row in rows if row] == prompts
    first = rows[0]
    assert first is not None
    assert first.status == "pending"
    assert first.priority == "hot"
    assert first.allowed_models == ("model-b", "model-a")  # order kept, duplicate dropped
    assert first.kind == "summary"
    assert first.max_attempts == 3
    assert first.attempts == 0
    assert [row.metadata for row in rows if row] == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_enqueue_defaults(store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"], metadata={"source": "api"})
    row = store.get(task_id)
    assert row is not None
    assert (row.priority, row.kind, row.max_attempts, row.allowed_models) == (
        "bulk",
        "default",
        5,
        None,
    )
    assert row.metadata == {"source": "api"}


def test_enqueue_of_nothing_is_a_no_op(store: TaskStore) -> None:
    assert store.enqueue([]) == []
    assert store.counts()["pending"] == 0


def test_enqueue_ten_thousand_in_one_round_trip(store: TaskStore) -> None:
    prompts = [f"prompt {i}" for i in range(10_000)]
    started = time.perf_counter()
    ids = store.enqueue(prompts)
    elapsed = time.perf_counter() - started
    assert len(ids) == len(set(ids)) == 10_000
    assert ids == sorted(ids)
    assert store.counts()["pending"] == 10_000
    assert elapsed < 3.0, f"enqueue of 10,000 took {elapsed:.2f}s"
    last = store.get(ids[-1])
    assert last is not None and last.prompt == "prompt 9999"


def test_enqueue_notifies_the_channel_on_commit(store: TaskStore, pg_dsn: str) -> None:
    assert store.notify_channel == f"{store.schema}_tasks"
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{store.notify_channel}"')
        store.enqueue(["a", "b", "c"])
        received = list(listener.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in received] == [(store.notify_channel, "3")]


@pytest.mark.parametrize(
    ("prompts", "kwargs", "field"),
    [
        ("a bare string", {}, "prompts"),
        (["ok", ""], {}, "prompts[1]"),
        (["   "], {}, "prompts[0]"),
        (["ok", 3], {}, "prompts[1]"),
        (["nul\x00"], {}, "prompts[0]"),
        (["ok"], {"priority": "urgent"}, "priority"),
        (["ok"], {"max_attempts": 0}, "max_attempts"),
        (["ok"], {"max_attempts": True}, "max_attempts"),
        (["ok"], {"allowed_models": []}, "allowed_models"),
        (["ok"], {"allowed_models": "gpt-4o"}, "allowed_models"),
        (["ok"], {"allowed_models": ["gpt-4o", 7]}, "allowed_models[1]"),
        (["ok"], {"allowed_models": [""]}, "allowed_models[0]"),
        (["ok"], {"kind": ""}, "kind"),
        (["ok"], {"metadata": "x"}, "metadata"),
        (["ok", "ok"], {"metadata": [{}]}, "metadata"),
        (["ok"], {"metadata": {"when": object()}}, "metadata"),
    ],
)
def test_enqueue_validation_names_the_field(
    store: TaskStore, prompts: Any, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(TaskValidationError) as info:
        store.enqueue(prompts, **kwargs)
    assert isinstance(info.value, ValueError)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert store.counts()["pending"] == 0


def test_validation_messages_never_quote_prompts(store: TaskStore) -> None:
    secret = "confidential-prompt-text"
    with pytest.raises(TaskValidationError) as info:
        store.enqueue([secret, ""], priority="bulk")
    assert secret not in str(info.value)
