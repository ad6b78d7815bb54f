"""Durable quotas: the PostgreSQL source of truth, its audit log, and loading from a file."""

from __future__ import annotations

from airflow_llm_router.exceptions import QuotaNotFoundError, QuotaStoreError
from airflow_llm_router.quotas.loader import parse_quota_document, read_quota_file
from airflow_llm_router.quotas.quota_store import AuditEntry, QuotaChange, QuotaRecord, QuotaStore

__all__ = [
    "AuditEntry",
    "QuotaChange",
    "QuotaNotFoundError",
    "QuotaRecord",
    "QuotaStore",
    "QuotaStoreError",
    "parse_quota_document",
    "read_quota_file",
]
