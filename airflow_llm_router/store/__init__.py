"""The PostgreSQL task store: the backlog of LLM tasks, claimed in fenced chunks.

:class:`TaskStore` holds its parts (``connection``, ``ingestion``, ``claims``, ``admin``);
the records it takes and answers are exported here with it.
"""

from __future__ import annotations

from airflow_llm_router.store.backlog_records import (
    BacklogSummary,
    DeadFilter,
    DeadPage,
    DeadTask,
    Requeued,
    RequeueRecord,
)
from airflow_llm_router.store.records import (
    BULK,
    CLAIMED,
    DEAD,
    HOT,
    PENDING,
    PRIORITIES,
    SOLVED,
    STATUSES,
    ClaimedTask,
    ClaimsInProgress,
    Enqueued,
    NewTask,
    TaskFailure,
    TaskResult,
    TaskRow,
)
from airflow_llm_router.store.task_schema import LATEST_VERSION
from airflow_llm_router.store.task_store import TaskStore
from airflow_llm_router.store.watch import APPLICATION_NAME

__all__ = [
    "APPLICATION_NAME",
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
    "Enqueued",
    "NewTask",
    "RequeueRecord",
    "Requeued",
    "TaskFailure",
    "TaskResult",
    "TaskRow",
    "TaskStore",
]
