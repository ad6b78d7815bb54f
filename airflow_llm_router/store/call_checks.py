"""Checks of the arguments of calls on tasks already in the store (pure Python): the
claim cycle's claims, tokens, results and failures, and backlog admin's pages, dead-letter
filters, requeue ids and actors.

Each check raises :class:`TaskValidationError` naming the field and the fix, before any
statement runs. What an enqueue is handed (new tasks) is checked in :mod:`.task_checks`;
both use :mod:`.storable` for what PostgreSQL text can hold.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.names import kind_problem, validate_model_name
from airflow_llm_router.store.backlog_records import (
    DEAD_OFFSET_MAX,
    DEAD_PAGE_MAX,
    MAX_ERROR_FILTER_CHARS,
    REQUEUE_MAX,
    DeadFilter,
)
from airflow_llm_router.store.records import ClaimedTask, TaskFailure, TaskResult
from airflow_llm_router.store.storable import clean_error, clean_text, text_problem

#: Longest ``worker_id`` a claim accepts (it is stored in ``claimed_by``).
MAX_WORKER_ID_CHARS = 1000
#: The largest task id (the store's ids are PostgreSQL bigints).
MAX_TASK_ID = 2**63 - 1
#: Longest ``actor``/``source`` a requeue records.
MAX_ACTOR_CHARS = 256


def validate_claim_args(n: object, worker_id: object, claim_ttl_s: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise TaskValidationError("n", f"must be an integer >= 0, got {n!r}")
    if not isinstance(worker_id, str) or not worker_id.strip():
        raise TaskValidationError(
            "worker_id", "must be a non-empty string naming the claimer, e.g. the task instance"
        )
    if len(worker_id) > MAX_WORKER_ID_CHARS:
        raise TaskValidationError(
            "worker_id", f"has {len(worker_id)} characters; at most {MAX_WORKER_ID_CHARS}")
    if problem := text_problem(worker_id):
        raise TaskValidationError("worker_id", problem)
    validate_ttl(claim_ttl_s)


def validate_ttl(claim_ttl_s: object) -> float:
    if (
        isinstance(claim_ttl_s, bool)
        or not isinstance(claim_ttl_s, (int, float))
        or not math.isfinite(claim_ttl_s)
        or claim_ttl_s <= 0
    ):
        raise TaskValidationError(
            "claim_ttl_s", f"must be a positive number of seconds, got {claim_ttl_s!r}"
        )
    return float(claim_ttl_s)


def validate_task_id(field_name: str, task_id: object) -> int:
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise TaskValidationError(field_name, f"must be an integer task id, got {task_id!r}")
    return task_id


def validate_cap(cap: object) -> int | None:
    """How many pending tasks a count may read (``backlog_size(cap=...)``): 1 or more, or
    None (every one)."""
    if cap is None:
        return None
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise TaskValidationError(
            "cap", f"must be an integer >= 1 (or None to count every task), got {cap!r}")
    return cap


def validate_token(field_name: str, token: object) -> str:
    """Claim tokens are UUIDs; a malformed one is a caller bug, not a stale claim."""
    try:
        return str(uuid.UUID(str(token)))
    except ValueError as err:
        raise TaskValidationError(
            field_name, f"is not a claim token (a UUID from claim()), got {token!r}"
        ) from err


def validate_tokens(field_name: str, count: object) -> int | None:
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise TaskValidationError(field_name, f"must be None or an integer >= 0, got {count!r}")
    return count


def claim_pairs(claims: object, field_name: str = "claims") -> list[tuple[int, str]]:
    """Normalise claims given as ``{id: token}``, ``[(id, token)]`` or ``[ClaimedTask]``."""
    if isinstance(claims, Mapping):
        items: Iterable[object] = list(claims.items())
    elif isinstance(claims, Iterable) and not isinstance(claims, (str, bytes)):
        items = claims
    else:
        raise TaskValidationError(
            field_name, "must be a dict {task_id: claim_token}, (id, token) pairs or ClaimedTasks"
        )
    pairs: list[tuple[int, str]] = []
    seen: set[int] = set()
    for i, item in enumerate(items):
        if isinstance(item, ClaimedTask):
            task_id, token = item.id, item.claim_token
        elif isinstance(item, tuple) and len(item) == 2:
            task_id, token = item
        else:
            raise TaskValidationError(
                f"{field_name}[{i}]", "must be an (id, claim_token) pair or a ClaimedTask"
            )
        task_id = validate_task_id(f"{field_name}[{i}].task_id", task_id)
        if task_id in seen:
            raise TaskValidationError(
                f"{field_name}[{i}]", f"task {task_id} appears twice; give each task once"
            )
        seen.add(task_id)
        pairs.append((task_id, validate_token(f"{field_name}[{i}].claim_token", token)))
    return pairs


def check_result(i: int, item: TaskResult | Mapping[str, Any]) -> TaskResult:
    """Validate one result; answers and model names are made storable, never rejected."""
    if isinstance(item, Mapping):
        try:
            item = TaskResult(**item)
        except TypeError as err:
            raise TaskValidationError(f"results[{i}]", str(err)) from err
    if not isinstance(item, TaskResult):
        raise TaskValidationError(f"results[{i}]", "must be a TaskResult or a dict")
    if not isinstance(item.answer, str) or not isinstance(item.model, str) or not item.model:
        raise TaskValidationError(
            f"results[{i}]", "answer must be a string and model a non-empty string"
        )
    return TaskResult(
        task_id=validate_task_id(f"results[{i}].task_id", item.task_id),
        claim_token=validate_token(f"results[{i}].claim_token", item.claim_token),
        answer=clean_text(item.answer),
        model=clean_text(item.model),
        input_tokens=validate_tokens(f"results[{i}].input_tokens", item.input_tokens),
        output_tokens=validate_tokens(f"results[{i}].output_tokens", item.output_tokens),
    )


def check_failure(i: int, item: TaskFailure | Mapping[str, Any]) -> TaskFailure:
    if isinstance(item, Mapping):
        try:
            item = TaskFailure(**item)
        except TypeError as err:
            raise TaskValidationError(f"failures[{i}]", str(err)) from err
    if not isinstance(item, TaskFailure):
        raise TaskValidationError(f"failures[{i}]", "must be a TaskFailure or a dict")
    return TaskFailure(
        task_id=validate_task_id(f"failures[{i}].task_id", item.task_id),
        claim_token=validate_token(f"failures[{i}].claim_token", item.claim_token),
        error=clean_error(item.error),
        retryable=bool(item.retryable),
        model=clean_text(item.model) if isinstance(item.model, str) and item.model else None,
    )


def reject_duplicates(field_name: str, ids: list[int]) -> None:
    seen: set[int] = set()
    for task_id in ids:
        if task_id in seen:
            raise TaskValidationError(
                field_name, f"task {task_id} appears twice; give each task once per call"
            )
        seen.add(task_id)


# --- backlog admin: the dead-letter list and requeue --------------------------------------

def _count(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TaskValidationError(field, f"must be an integer from {low} to {high}, "
                                         f"got {value!r}")
    return value


def check_page(limit: object, offset: object) -> tuple[int, int]:
    """``limit`` 1..:data:`DEAD_PAGE_MAX`, ``offset`` 0..:data:`DEAD_OFFSET_MAX`."""
    return (_count("limit", limit, 1, DEAD_PAGE_MAX),
            _count("offset", offset, 0, DEAD_OFFSET_MAX))


def check_filter(matching: object) -> DeadFilter:
    """A :class:`DeadFilter` whose conditions the store can match (each named on error)."""
    if not isinstance(matching, DeadFilter):
        raise TaskValidationError("matching", "must be a DeadFilter (DeadFilter() matches "
                                              "every dead task)")
    if matching.kind is not None and (problem := kind_problem(matching.kind)):
        raise TaskValidationError("kind", problem)
    if matching.model is not None:
        validate_model_name("model", matching.model)
    error = matching.error_contains
    if error is not None:
        if not isinstance(error, str) or not error.strip():
            raise TaskValidationError("error_contains", "must be a non-empty string, or "
                                                        "None for no condition")
        if len(error) > MAX_ERROR_FILTER_CHARS:
            raise TaskValidationError("error_contains", f"has {len(error)} characters; "
                                      f"use a substring of at most {MAX_ERROR_FILTER_CHARS}")
        if problem := text_problem(error):
            raise TaskValidationError("error_contains", problem)
    return matching


def check_ids(ids: object) -> list[int]:
    """1..:data:`REQUEUE_MAX` distinct integer task ids, ascending."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TaskValidationError("ids", "must be a list of task ids")
    if not ids:
        raise TaskValidationError("ids", "must name at least one task id")
    if len(ids) > REQUEUE_MAX:
        raise TaskValidationError("ids", f"names {len(ids)} tasks; at most {REQUEUE_MAX} per "
                                         "call: split the list")
    for i, task_id in enumerate(ids):
        if (isinstance(task_id, bool) or not isinstance(task_id, int)
                or not 1 <= task_id <= MAX_TASK_ID):
            raise TaskValidationError(f"ids[{i}]", f"must be a positive integer task id "
                                                   f"(at most {MAX_TASK_ID}), got {task_id!r}")
    return sorted(set(ids))


def check_requeue(ids: object, matching: object) -> tuple[list[int] | None, DeadFilter | None]:
    """Exactly one of ``ids`` and ``matching``, each checked."""
    if (ids is None) == (matching is None):
        raise TaskValidationError("ids", "give either ids (these tasks) or matching (every "
                                         "dead task it matches), not both and not neither")
    if ids is not None:
        return check_ids(ids), None
    return None, check_filter(matching)


def check_actor(field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TaskValidationError(field, "must be a non-empty string (who requeues, or how)")
    if len(value) > MAX_ACTOR_CHARS:
        raise TaskValidationError(field, f"has {len(value)} characters; at most "
                                         f"{MAX_ACTOR_CHARS}")
    if problem := text_problem(value):
        raise TaskValidationError(field, problem)
    return value


def check_limit(field: str, value: object, high: int) -> int:
    """An integer from 1 to ``high``."""
    return _count(field, value, 1, high)
