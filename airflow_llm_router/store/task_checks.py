"""Checks of a new task: what :meth:`TaskStore.enqueue` and ``enqueue_tasks`` are handed,
before anything is written.

A task is checked once, when it enters the store, against everything that could make it
fail later: text PostgreSQL cannot store (NUL, lone surrogates), sizes nobody means,
model names the engine would refuse inside a drain. One bad row refuses the whole call,
with a :class:`TaskValidationError` naming the field and the row (``prompts[3]``,
``metadata[7]``, ``tasks[2].kind``); messages never quote prompt text.

Rows are checked into :class:`EnqueueRows`, one value per task for every column, so a batch
that shares its settings (:meth:`TaskStore.enqueue`) and one whose tasks differ
(:meth:`TaskStore.enqueue_tasks`) bind to the same statement.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.names import MAX_KIND_CHARS, kind_problem, validate_model_name
from airflow_llm_router.store.records import NewTask
from airflow_llm_router.store.storable import (
    MAX_METADATA_CHARS,
    metadata_json,
    text_problem,
    validate_metadata,
)

__all__ = [
    "DEFAULT_MAX_PROMPT_CHARS",
    "MAX_ALLOWED_MODELS",
    "MAX_ATTEMPTS",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "MAX_KIND_CHARS",
    "MAX_METADATA_CHARS",
    "EnqueueRows",
    "validate_enqueue",
    "validate_max_prompt_chars",
    "validate_on_budget",
    "validate_tasks",
]

#: Longest prompt accepted by default (characters); ``TaskStore(max_prompt_chars=...)``.
DEFAULT_MAX_PROMPT_CHARS = 1_000_000
#: Most models one task may list.
MAX_ALLOWED_MODELS = 64
#: Most claims a task may be allowed.
MAX_ATTEMPTS = 1000
#: Longest idempotency key (characters).
MAX_IDEMPOTENCY_KEY_CHARS = 200

_PRIORITIES = ("hot", "bulk")
_ON_BUDGET = ("overflow", "wait")


@dataclass(frozen=True)
class EnqueueRows:
    """The checked tasks of one enqueue, a list per column (one value per task), ready to
    bind to its statement. ``allowed_models`` holds each task's list as a PostgreSQL array
    literal (or None): arrays cannot nest lists of different lengths."""

    prompts: list[str]
    priorities: list[str]
    allowed_models: list[str | None]
    kinds: list[str]
    max_attempts: list[int]
    metadata: list[str]
    idempotency_keys: list[str | None]
    on_budget: list[str]

    def params(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "priorities": self.priorities,
                "allowed_models": self.allowed_models, "kinds": self.kinds,
                "max_attempts": self.max_attempts, "metadata": self.metadata,
                "keys": self.idempotency_keys, "on_budget": self.on_budget}


def validate_enqueue(prompts: object, *, priority: object, allowed_models: object,
                     kind: object, max_attempts: object, metadata: object,
                     idempotency_keys: object = None, on_budget: object = "overflow",
                     max_prompt_chars: int) -> EnqueueRows:
    """Check every argument of an enqueue; raise on the first bad one, naming it."""
    checked = validate_prompts(prompts, max_prompt_chars)
    count = len(checked)
    models = validate_allowed_models(allowed_models)
    return EnqueueRows(
        prompts=checked,
        priorities=[validate_priority(priority)] * count,
        allowed_models=[_models_literal(models)] * count,
        kinds=[validate_kind(kind)] * count,
        max_attempts=[validate_max_attempts(max_attempts)] * count,
        metadata=validate_metadata(metadata, count),
        idempotency_keys=validate_idempotency_keys(idempotency_keys, count),
        on_budget=[validate_on_budget(on_budget)] * count,
    )


def validate_tasks(tasks: object, max_prompt_chars: int) -> EnqueueRows:
    """Check :class:`NewTask` objects; errors name ``tasks[i].<field>``."""
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Sequence):
        raise TaskValidationError("tasks", "must be a list of NewTask objects")
    columns: dict[str, list[Any]] = {name: [] for name in (
        "prompts", "priorities", "allowed_models", "kinds", "max_attempts", "metadata",
        "on_budget")}
    for i, task in enumerate(tasks):
        if not isinstance(task, NewTask):
            raise TaskValidationError(f"tasks[{i}]", f"must be a NewTask, got "
                                      f"{type(task).__name__}")
        with _within(f"tasks[{i}]"):
            columns["prompts"] += validate_prompts([task.prompt], max_prompt_chars)
            columns["priorities"].append(validate_priority(task.priority))
            columns["allowed_models"].append(
                _models_literal(validate_allowed_models(task.allowed_models)))
            columns["kinds"].append(validate_kind(task.kind))
            columns["max_attempts"].append(validate_max_attempts(task.max_attempts))
            columns["metadata"].append(
                "{}" if task.metadata is None else metadata_json("metadata", task.metadata))
            _check_key("idempotency_key", task.idempotency_key)
            columns["on_budget"].append(validate_on_budget(task.on_budget))
    keys = [task.idempotency_key for task in tasks]
    _reject_repeats([f"tasks[{i}].idempotency_key" for i in range(len(keys))], keys)
    return EnqueueRows(**columns, idempotency_keys=keys)


@contextmanager
def _within(prefix: str) -> Iterator[None]:
    """Re-raise a field's error under ``prefix`` (``prompts[0]`` becomes the ``prompt``)."""
    try:
        yield
    except TaskValidationError as err:
        message = str(err)[len(err.field) + 2:]
        field = "prompt" if err.field == "prompts[0]" else err.field
        raise TaskValidationError(f"{prefix}.{field}", message) from err


def _models_literal(models: list[str] | None) -> str | None:
    """``{"a","b"}``: checked model names hold no quote, backslash, brace, comma or space
    (``names.MODEL_NAME_RE``), so quoting each is the whole escaping an array literal needs."""
    return None if models is None else "{" + ",".join(f'"{m}"' for m in models) + "}"


def validate_idempotency_keys(keys: object, count: int) -> list[str | None]:
    """None (no keys), or one key (or None) per prompt, no key given twice."""
    if keys is None:
        return [None] * count
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TaskValidationError(
            "idempotency_keys", "must be None or a list with one key (or None) per prompt")
    if len(keys) != count:
        raise TaskValidationError(
            "idempotency_keys", f"has {len(keys)} entries for {count} prompts; give one key "
            "(or None) per prompt")
    fields = [f"idempotency_keys[{i}]" for i in range(count)]
    for field, key in zip(fields, keys, strict=True):
        _check_key(field, key)
    _reject_repeats(fields, keys)
    return list(keys)


def _check_key(field: str, key: object) -> None:
    if key is None:
        return
    if not isinstance(key, str) or not key:
        raise TaskValidationError(field, f"must be None or a non-empty string, got {key!r}")
    if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise TaskValidationError(
            field, f"has {len(key)} characters, more than {MAX_IDEMPOTENCY_KEY_CHARS}; use a "
            "short id (a UUID, or the source's own id)")
    if problem := text_problem(key):
        raise TaskValidationError(field, problem)
    if not key.isprintable():
        raise TaskValidationError(
            field, "contains a control character or line break; use printable text only")


def _reject_repeats(fields: Sequence[str], keys: Sequence[object]) -> None:
    first: dict[object, str] = {}
    for field, key in zip(fields, keys, strict=True):
        if key is None:
            continue
        if key in first:
            raise TaskValidationError(
                field, f"repeats the key of {first[key]}; one key names one task, so give "
                "each task its own")
        first[key] = field


def validate_max_prompt_chars(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TaskValidationError(
            "max_prompt_chars", f"must be an integer >= 1 (characters), got {value!r}")
    return value


def validate_prompts(prompts: object, max_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> list[str]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TaskValidationError(
            "prompts", "must be a list of strings; wrap a single prompt as [prompt]")
    checked: list[str] = []
    for i, prompt in enumerate(prompts):
        field = f"prompts[{i}]"
        if not isinstance(prompt, str):
            raise TaskValidationError(field, f"must be a string, got {type(prompt).__name__}")
        if len(prompt) > max_chars:
            raise TaskValidationError(
                field, f"has {len(prompt)} characters, more than max_prompt_chars={max_chars}; "
                "split it, or raise the store's max_prompt_chars")
        if not prompt.strip():
            raise TaskValidationError(field, "is empty; drop it or give it text")
        if problem := text_problem(prompt):
            raise TaskValidationError(field, problem)
        checked.append(prompt)
    return checked


def validate_priority(priority: object) -> str:
    if not isinstance(priority, str) or priority not in _PRIORITIES:
        raise TaskValidationError(
            "priority", f"must be 'hot' or 'bulk', got {priority!r}; use 'hot' to jump the queue")
    return priority


def validate_on_budget(on_budget: object) -> str:
    if not isinstance(on_budget, str) or on_budget not in _ON_BUDGET:
        raise TaskValidationError(
            "on_budget", f"must be 'overflow' or 'wait', got {on_budget!r}; 'wait' holds the "
            "task while its preferred model is over its spend budget, 'overflow' lets it go "
            "on to its next allowed model")
    return on_budget


def validate_allowed_models(allowed_models: object) -> list[str] | None:
    """None means any model; otherwise valid names in order of preference, duplicates folded
    into their first place."""
    if allowed_models is None:
        return None
    if isinstance(allowed_models, (str, bytes, Mapping)) or not isinstance(
            allowed_models, Iterable):
        raise TaskValidationError(
            "allowed_models", "must be None (any model) or a list of model names, e.g. ['gpt-4o']")
    models: list[str] = []
    for i, model in enumerate(allowed_models):
        validate_model_name(f"allowed_models[{i}]", model)
        if model not in models:
            models.append(model)
        if len(models) > MAX_ALLOWED_MODELS:
            raise TaskValidationError(
                "allowed_models", f"lists more than {MAX_ALLOWED_MODELS} models; pass None for "
                "any model")
    if not models:
        raise TaskValidationError(
            "allowed_models", "is an empty list, which no model satisfies; pass None for any model")
    return models


def validate_kind(kind: object) -> str:
    problem = kind_problem(kind)
    if problem:
        raise TaskValidationError("kind", problem)
    return kind  # type: ignore[return-value]  # kind_problem checked it is a str


def validate_max_attempts(max_attempts: object) -> int:
    if (isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
            or not 1 <= max_attempts <= MAX_ATTEMPTS):
        raise TaskValidationError(
            "max_attempts", f"must be an integer from 1 to {MAX_ATTEMPTS}, got {max_attempts!r}")
    return max_attempts
