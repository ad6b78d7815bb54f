"""Errors of the quota store, built on the package-wide classes in ``exceptions``."""

from __future__ import annotations

from airflow_llm_router.exceptions import RouterError


class QuotaStoreError(RouterError):
    """The quota store could not carry out a change; nothing of it was applied."""


class QuotaNotFoundError(QuotaStoreError, KeyError):
    """The model has no quota to patch or delete."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
