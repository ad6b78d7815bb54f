"""Quotas with live usage, their changes, stats and the audit log; and ``GET /me``, the
caller's rights (the quota page offers only the controls the user may use).

The routes are synchronous: the quota store and the router client they use
(:class:`~airflow_llm_router.web.service.QuotaService`) are, and FastAPI runs them in its
thread pool."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response, status

from airflow_llm_router import metrics
from airflow_llm_router.engine.quota import MODEL_NAME_RE, ModelQuota
from airflow_llm_router.engine.stats import ModelStats, RouterStats, SpendStats
from airflow_llm_router.exceptions import QuotaNotFoundError, QuotaStoreError, QuotaValidationError
from airflow_llm_router.quotas import QuotaChange, QuotaRecord
from airflow_llm_router.web.auth import Reader, Rights, Writer, rights
from airflow_llm_router.web.bodies import (
    AuditView,
    ChangeView,
    QuotaList,
    QuotaPatch,
    QuotaView,
    SpendView,
    Usage,
)
from airflow_llm_router.web.service import QuotaService, ServiceUnavailable

router = APIRouter(tags=["quotas"])

ModelName = Annotated[str, Path(pattern=MODEL_NAME_RE.pattern, description=(
    "1-128 letters, digits or '. _ : / @ + -', starting with a letter or digit"))]


def service(request: Request) -> QuotaService:
    """The app's quota service (503 if it has none, or it cannot be built)."""
    source = request.app.state.service
    if source is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            "this API serves no quota store (start it with one)")
    try:
        found: QuotaService = source.get()
        return found
    except ServiceUnavailable as err:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(err)) from err


Service = Annotated[QuotaService, Depends(service)]


def _pct(used: int, limit: int) -> float:
    return round(100.0 * used / limit, 1)


def _usage(m: ModelStats | None, quota: ModelQuota) -> Usage | None:
    if m is None:
        return None
    return Usage(requests=m.requests, tokens=m.tokens, in_flight=m.in_flight,
                 rpm_pct=_pct(m.requests, quota.rpm), tpm_pct=_pct(m.tokens, quota.tpm),
                 concurrency_pct=_pct(m.in_flight, quota.max_concurrency),
                 cooldown_ms=m.cooldown_ms, breaker=m.breaker, breaker_cause=m.breaker_cause,
                 limit_share=m.limit_share, effective=m.effective, guard_ms=m.guard_ms,
                 spend=spend_view(m.spend))


def spend_view(s: SpendStats | None) -> SpendView | None:
    if s is None:
        return None
    pct = (None if s.budget_micro_usd is None
           else round(100.0 * s.committed_micro_usd / max(1, s.budget_micro_usd), 1))
    return SpendView(budget_micro_usd=s.budget_micro_usd, settled_micro_usd=s.settled_micro_usd,
                     reserved_micro_usd=s.reserved_micro_usd, spend_pct=pct,
                     period_s=s.period_s, period_start_ms=s.period_start_ms)


def _view(record: QuotaRecord, stats: RouterStats) -> QuotaView:
    live = stats.models.get(record.model)
    return QuotaView(model=record.model, quota=record.quota, stored=True,
                     updated_at=record.updated_at.isoformat(), updated_by=record.updated_by,
                     applied=live is not None and live.quota == record.quota,
                     usage=_usage(live, record.quota))


def _router_only(live: ModelStats) -> QuotaView:
    assert live.quota is not None
    return QuotaView(model=live.model, quota=live.quota, stored=False, updated_at=None,
                     updated_by=None, applied=True, usage=_usage(live, live.quota))


def stats_of(svc: QuotaService) -> RouterStats:
    try:
        stats = svc.router.stats()
    except Exception as err:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"cannot read the router's stats from Redis: {err}") from err
    metrics.usage(stats)
    return stats


def store_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except QuotaNotFoundError as err:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(err)) from err
    except QuotaValidationError as err:  # the route validated the body; the merge is checked
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(err)) from err
    except QuotaStoreError as err:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(err)) from err


def _change(change: QuotaChange) -> ChangeView:
    return ChangeView(model=change.model, action=change.action, old=change.old,
                      new=change.new, audit_id=change.audit_id)


@router.get("/quotas", summary="Every quota with its live usage (stored ones, then any "
            "that only Redis holds)")
def list_quotas(_: Reader, svc: Service) -> QuotaList:
    records = store_call(svc.store.records)
    stats = stats_of(svc)
    stored = {r.model for r in records}
    views = [_view(r, stats) for r in records] + [
        _router_only(m) for name, m in stats.models.items()
        if name not in stored and m.quota is not None]
    return QuotaList(models=views, waiting=stats.waiting, now_ms=stats.now_ms,
                     total_spend=spend_view(stats.total_spend))


@router.get("/quotas/{model:path}", summary="One model's quota with its live usage",
            responses={404: {"description": "no quota for this model"}})
def get_quota(model: ModelName, _: Reader, svc: Service) -> QuotaView:
    record = store_call(svc.store.get, model)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"model {model!r} has no quota")
    return _view(record, stats_of(svc))


@router.put("/quotas/{model:path}", summary="Create or replace a model's quota",
            responses={201: {"description": "created"}, 422: {"description": "invalid"}})
def put_quota(model: ModelName, quota: ModelQuota, caller: Writer, svc: Service,
              response: Response) -> ChangeView:
    change = store_call(svc.store.put, model, quota, actor=caller.name, source="api")
    if change.action == "create":
        response.status_code = status.HTTP_201_CREATED
    return _change(change)


@router.patch("/quotas/{model:path}", summary="Change some fields of a model's quota",
              responses={404: {"description": "no quota for this model"}})
def patch_quota(model: ModelName, patch: QuotaPatch,  # type: ignore[valid-type]
                caller: Writer, svc: Service) -> ChangeView:
    fields = patch.model_dump(exclude_unset=True)  # type: ignore[attr-defined]
    return _change(store_call(svc.store.patch, model, fields, actor=caller.name,
                               source="api"))


@router.delete("/quotas/{model:path}", summary="Delete a model's quota (it admits nothing)",
               responses={404: {"description": "no quota for this model"}})
def delete_quota(model: ModelName, caller: Writer, svc: Service) -> ChangeView:
    return _change(store_call(svc.store.delete, model, actor=caller.name, source="api"))


@router.get("/stats", summary="Per model: window usage against target, in flight against "
            "cap, cooldown, breaker, counters and recent 429s and errors")
def stats(_: Reader, svc: Service) -> dict[str, Any]:
    current = stats_of(svc)
    doc = current.to_dict()
    recent = svc.history.recent(current)
    for name, model in doc["models"].items():
        quota = current.models[name].quota
        model["targets"] = None if quota is None else {
            "rpm": quota.rpm, "tpm": quota.tpm, "max_concurrency": quota.max_concurrency}
        model["recent"] = recent[name]
    return doc


@router.get("/audit", summary="Recent quota changes, newest first")
def audit(_: Reader, svc: Service,
          model: Annotated[str | None, Query(pattern=MODEL_NAME_RE.pattern)] = None,
          limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> list[AuditView]:
    entries = store_call(svc.store.audit, model, limit)
    return [AuditView(**e.to_dict()) for e in entries]


@router.get("/me", summary="The caller and what they may change")
def me(caller_rights: Annotated[Rights, Depends(rights)]) -> Rights:
    return caller_rights
