"""Checks of what callers hand to the claim cycle (claims, results, failures, ids, tokens),
and the mapping of claimed rows to :class:`ClaimedTask`. Pure Python, no database.

What :meth:`TaskStore.enqueue` is handed is checked in :mod:`.validation`.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.store.models import MAX_ERROR_CHARS, ClaimedTask, TaskFailure, TaskResult
from airflow_llm_router.store.text_checks import text_problem

#: Longest ``worker_id`` a claim accepts (it is stored in ``claimed_by``).
MAX_WORKER_ID_CHARS = 1000

_SURROGATE = re.compile("[\ud800-\udfff]")


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


def clean_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL, nor UTF-8 a lone surrogate (a backend's JSON may
    decode to one): replace them with U+FFFD rather than fail a whole chunk of answers."""
    value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", value)
    return value


def clean_error(error: object) -> str:
    """Make an error message storable: a string, no NUL, at most ``MAX_ERROR_CHARS``."""
    text = clean_text(str(error))
    if len(text) > MAX_ERROR_CHARS:
        cut = len(text) - MAX_ERROR_CHARS
        text = f"{text[:MAX_ERROR_CHARS]}... [{cut} more characters truncated]"
    return text


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


def claimed_task(row: Sequence[Any]) -> ClaimedTask:
    return ClaimedTask(
        id=row[0],
        prompt=row[1],
        kind=row[2],
        priority=row[3],
        allowed_models=tuple(row[4]) if row[4] is not None else None,
        attempts=row[5],
        max_attempts=row[6],
        claim_token=row[7],
        metadata=row[8] or {},
        on_budget=row[9],
    )


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
