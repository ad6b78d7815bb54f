"""Checks of what callers hand to the dead-letter list and to requeue (pure Python).

Kept apart from :mod:`.validation` (what enqueue refuses) and :mod:`.checks` (the claim
cycle): the operator's view of failures has its own arguments and limits.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.names import kind_problem, validate_model_name
from airflow_llm_router.store.models import (
    DEAD_OFFSET_MAX,
    DEAD_PAGE_MAX,
    REQUEUE_MAX,
    DeadFilter,
)
from airflow_llm_router.store.text_checks import text_problem

#: Longest ``error_contains`` substring accepted (characters).
MAX_ERROR_FILTER_CHARS = 200
#: The largest task id (the store's ids are PostgreSQL bigints).
MAX_TASK_ID = 2**63 - 1
#: Longest ``actor``/``source`` a requeue records.
MAX_ACTOR_CHARS = 256


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
