"""Enqueue: ids in order, fast for big batches, notifies on commit, validates its input."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.store import TaskStore


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
        # prompts PostgreSQL cannot store, or absurdly large
        (["ok", "lone \ud800 surrogate"], {}, "prompts[1]"),
        (["ok", "ok", "\udfff"], {}, "prompts[2]"),
        (["x" * 1_000_001], {}, "prompts[0]"),
        # model names the engine would refuse later, inside a drain
        (["ok"], {"allowed_models": ["bad{x}"]}, "allowed_models[0]"),
        (["ok"], {"allowed_models": ["gpt-4o", "with space"]}, "allowed_models[1]"),
        (["ok"], {"allowed_models": ["a#1"]}, "allowed_models[0]"),
        (["ok"], {"allowed_models": ["m" * 129]}, "allowed_models[0]"),
        (["ok"], {"allowed_models": [f"m{i}" for i in range(65)]}, "allowed_models"),
        (["ok"], {"allowed_models": {"gpt-4o": 1}}, "allowed_models"),
        # priority, kind, max_attempts
        (["ok"], {"priority": None}, "priority"),
        (["ok"], {"priority": ["hot"]}, "priority"),
        (["ok"], {"kind": "k" * 101}, "kind"),
        (["ok"], {"kind": "line\nbreak"}, "kind"),
        (["ok"], {"kind": "nul\x00"}, "kind"),
        (["ok"], {"kind": "\ud800"}, "kind"),
        (["ok"], {"kind": 3}, "kind"),
        (["ok"], {"max_attempts": 1001}, "max_attempts"),
        (["ok"], {"max_attempts": 2.0}, "max_attempts"),
        (["ok"], {"max_attempts": "3"}, "max_attempts"),
        # metadata jsonb cannot hold, or too big
        (["ok"], {"metadata": {"n": float("nan")}}, "metadata"),
        (["ok"], {"metadata": {"s": "nul\x00"}}, "metadata"),
        (["ok"], {"metadata": {"s": ["\ud800"]}}, "metadata"),
        (["ok"], {"metadata": {1: "int key"}}, "metadata"),
        (["ok"], {"metadata": {"blob": "x" * 70_000}}, "metadata"),
        (["ok", "ok"], {"metadata": [{}, {"bad": {"deep": "\x00"}}]}, "metadata[1]"),
        (["ok", "ok"], {"metadata": [{}, ["not a dict"]]}, "metadata[1]"),
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


def test_a_bad_row_refuses_the_whole_batch(store: TaskStore, pg_dsn: str) -> None:
    """Nothing of a refused batch is written, and no notification goes out."""
    prompts = [f"good {i}" for i in range(50)] + ["bad \ud800"] + ["good"] * 10
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{store.notify_channel}"')
        with pytest.raises(TaskValidationError) as info:
            store.enqueue(prompts)
        assert list(listener.notifies(timeout=0.2)) == []
    assert info.value.field == "prompts[50]"
    assert "surrogate" in str(info.value) and "U+D800" in str(info.value)
    assert store.counts() == {"pending": 0, "claimed": 0, "solved": 0, "dead": 0}


def test_bad_model_name_next_to_valid_prompts_is_refused(store: TaskStore) -> None:
    store.enqueue(["valid"], allowed_models=["gpt-4o"])
    refused = r"^allowed_models\[0\]: 'bad\{x\}' is not a valid model name"
    with pytest.raises(TaskValidationError, match=refused):
        store.enqueue(["x"], allowed_models=["bad{x}"])
    assert store.counts()["pending"] == 1


def test_prompt_limit_is_configurable(pg_dsn: str, pg_schema: str) -> None:
    with TaskStore(pg_dsn, schema=pg_schema, max_prompt_chars=10) as small:
        small.migrate()
        assert len(small.enqueue(["x" * 10])) == 1
        with pytest.raises(TaskValidationError) as info:
            small.enqueue(["ok", "x" * 11])
        assert info.value.field == "prompts[1]"
        assert "11 characters" in str(info.value) and "max_prompt_chars" in str(info.value)
    with pytest.raises(TaskValidationError) as bad:
        TaskStore(pg_dsn, schema=pg_schema, max_prompt_chars=0)
    assert bad.value.field == "max_prompt_chars"


def test_largest_values_allowed_are_stored(store: TaskStore) -> None:
    """The bounds refuse absurd input, not what a real caller sends."""
    prompt = "é" * 1_000_000
    metadata = {"blob": "x" * 60_000, "nested": [{"a": [1, 2.5, None, True]}]}
    models = [f"m{i}" for i in range(64)]
    (task_id,) = store.enqueue([prompt], allowed_models=models, kind="k" * 100,
                               max_attempts=1000, metadata=metadata)
    row = store.get(task_id)
    assert row is not None
    assert row.prompt == prompt and row.metadata == metadata
    assert row.allowed_models == tuple(models) and row.max_attempts == 1000


def test_duplicate_models_are_folded_in_order(store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"], allowed_models=("b", "a", "b", "a"))
    row = store.get(task_id)
    assert row is not None and row.allowed_models == ("b", "a")
