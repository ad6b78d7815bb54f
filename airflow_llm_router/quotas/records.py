"""What the quota store's reads and changes return: plain frozen records.

Kept apart from :mod:`airflow_llm_router.quotas.quota_store` so that module holds only the
transactions; the router-wide budget's records are in
:mod:`airflow_llm_router.quotas.router_budget`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.quotas.router_budget import Action


@dataclass(frozen=True)
class QuotaRecord:
    """One model's stored quota and its last change."""

    model: str
    quota: ModelQuota
    updated_at: datetime
    updated_by: str

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "quota": self.quota.model_dump(),
                "updated_at": self.updated_at.isoformat(), "updated_by": self.updated_by}


@dataclass(frozen=True)
class AuditEntry:
    """One change: ``old`` is None for a creation, ``new`` None for a deletion."""

    id: int
    at: datetime
    actor: str
    action: Action
    source: str
    model: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at.isoformat(), "actor": self.actor,
                "action": self.action, "source": self.source, "model": self.model,
                "old": self.old, "new": self.new}


@dataclass(frozen=True)
class QuotaChange:
    """What one call changed (``audit_id`` is None when the value was already in place)."""

    model: str
    action: Action
    old: ModelQuota | None
    new: ModelQuota | None
    audit_id: int | None
