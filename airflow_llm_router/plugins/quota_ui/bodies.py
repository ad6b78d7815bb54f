"""Request and response bodies of the quota API (they document themselves in OpenAPI)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from airflow_llm_router.engine.quota import ModelQuota


def _patch_model() -> type[BaseModel]:
    """``ModelQuota`` with every field optional and unset by default: a patch validates
    each given field by the quota's own rules (types, ranges, unknown fields), and the
    merged quota is validated again as a whole."""
    fields: dict[str, Any] = {
        name: (info.rebuild_annotation(), None) for name, info in ModelQuota.model_fields.items()
    }
    return create_model("QuotaPatch", __base__=ModelQuota, __doc__=(
        "Some fields of a model's quota; the others keep their value."), **fields)


QuotaPatch = _patch_model()


class Usage(BaseModel):
    """A model's current window against its targets (the router's view)."""

    requests: int
    tokens: int
    in_flight: int
    rpm_pct: float | None
    tpm_pct: float | None
    concurrency_pct: float | None
    cooldown_ms: int
    breaker: str
    #: the share of the quota admission holds the model to, learned from the provider's
    #: 429s (1.0: the quota); below 1, ``effective`` holds the limits in force
    limit_share: float = 1.0
    effective: dict[str, int] | None = None
    #: how long past its window an admission keeps counting (ms): the base guard, or more
    #: while calls are measured reaching the provider late (docs/engine.md, "Guard")
    guard_ms: int = 0


class QuotaView(BaseModel):
    """One model: its quota, whether PostgreSQL stores it and Redis holds the same, and
    its live usage. A model set in Redis directly (``RouterClient.set_quota``) is listed
    with ``stored`` false and no ``updated_at``/``updated_by``; PUT stores it."""

    model_config = ConfigDict(protected_namespaces=())

    model: str
    quota: ModelQuota
    stored: bool
    updated_at: str | None
    updated_by: str | None
    applied: bool
    usage: Usage | None


class QuotaList(BaseModel):
    models: list[QuotaView]
    waiting: int
    now_ms: int


class ChangeView(BaseModel):
    """The result of a change (``audit_id`` is None when nothing changed)."""

    model_config = ConfigDict(protected_namespaces=())

    model: str
    action: str
    old: ModelQuota | None
    new: ModelQuota | None
    audit_id: int | None


class AuditView(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    id: int
    at: str
    actor: str
    action: str
    source: str
    model: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
