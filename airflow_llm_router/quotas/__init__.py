"""Durable quotas: the PostgreSQL source of truth, its audit log, and loading from a file."""

from __future__ import annotations

from airflow_llm_router.quotas.config import QuotaConfig
from airflow_llm_router.quotas.loader import parse_quota_document, read_quota_file
from airflow_llm_router.quotas.quota_store import QuotaStore
from airflow_llm_router.quotas.records import AuditEntry, QuotaChange, QuotaRecord
from airflow_llm_router.quotas.router_budget import BudgetChange, BudgetRecord

__all__ = [
    "AuditEntry",
    "BudgetChange",
    "BudgetRecord",
    "QuotaChange",
    "QuotaConfig",
    "QuotaRecord",
    "QuotaStore",
    "parse_quota_document",
    "read_quota_file",
]
