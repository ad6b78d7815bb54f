"""The PostgreSQL task store: the backlog of LLM tasks, claimed in fenced chunks."""

from __future__ import annotations

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.store.models import (
    BULK,
    CLAIMED,
    DEAD,
    HOT,
    PENDING,
    PRIORITIES,
    SOLVED,
    STATUSES,
    BacklogSummary,
    ClaimedTask,
    ClaimsInProgress,
    DeadFilter,
    DeadPage,
    DeadTask,
    Requeued,
    RequeueRecord,
    TaskFailure,
    TaskResult,
    TaskRow,
)
from airflow_llm_router.store.task_schema import LATEST_VERSION
from airflow_llm_router.store.task_store import TaskStore

__all__ = [
    "BULK",
    "CLAIMED",
    "DEAD",
    "HOT",
    "LATEST_VERSION",
    "PENDING",
    "PRIORITIES",
    "SOLVED",
    "STATUSES",
    "BacklogSummary",
    "ClaimedTask",
    "ClaimsInProgress",
    "DeadFilter",
    "DeadPage",
    "DeadTask",
    "RequeueRecord",
    "Requeued",
    "TaskFailure",
    "TaskResult",
    "TaskRow",
    "TaskStore",
    "TaskValidationError",
]
