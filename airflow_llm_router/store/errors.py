"""Errors specific to the task store, built on the package-wide classes in ``exceptions``."""

from __future__ import annotations

from airflow_llm_router.exceptions import TaskStoreError


class TaskValidationError(TaskStoreError, ValueError):
    """An argument to the task store is invalid; ``field`` names it and the message the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
