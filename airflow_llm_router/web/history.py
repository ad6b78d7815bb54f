"""Traffic over time: what the engine recorded per model in time buckets
(:mod:`~airflow_llm_router.engine.history`), for the page's chart.

The router's own scripts write the buckets in Redis as they admit and settle calls, so the
chart shows every caller's traffic, the same from any API server process; these routes only
read them. Each model comes with its current targets, so a model idle for the whole span
still shows what it is allowed.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, status

from airflow_llm_router.engine.history import MAX_HISTORY_MINUTES, RouterHistory
from airflow_llm_router.engine.quota import MODEL_NAME_RE, ModelQuota
from airflow_llm_router.web.auth import Reader
from airflow_llm_router.web.quotas import Service
from airflow_llm_router.web.service import QuotaService

router = APIRouter(tags=["traffic"])

#: Models one ``GET /history`` may name (a page of the quota table is 50).
MAX_MODELS_PER_REQUEST = 100

Minutes = Annotated[int, Query(ge=1, le=MAX_HISTORY_MINUTES, description=(
    f"the span to read, 1-{MAX_HISTORY_MINUTES} minutes (the engine keeps one hour)"))]


def _read(svc: QuotaService, models: list[str] | None, minutes: int, offset: int = 0,
          limit: int = MAX_MODELS_PER_REQUEST) -> tuple[RouterHistory, dict[str, ModelQuota]]:
    """The history of ``models``, or of the page ``offset``/``limit`` of every model with a
    quota (by name), and every quota."""
    try:
        quotas = svc.router.get_quotas()
        names = models if models is not None else sorted(quotas)[offset : offset + limit]
        return svc.router.history(names, minutes), quotas
    except Exception as err:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"cannot read the router's traffic history from Redis: {err}") from err


def _targets(quota: ModelQuota | None) -> dict[str, Any] | None:
    if quota is None:
        return None
    return {"rpm": quota.rpm, "tpm": quota.tpm, "max_concurrency": quota.max_concurrency,
            "window_s": quota.window_s}


def _document(history: RouterHistory, quotas: dict[str, ModelQuota]) -> dict[str, Any]:
    doc = history.to_dict()
    for name, model in doc["models"].items():
        model["quota"] = _targets(quotas.get(name))
    return doc


@router.get("/history", summary="Traffic over time of the models named, or of a page of "
            "every model: per bucket, admissions, the window's peak requests and tokens, peak "
            "in flight, 429s, errors, breaker openings, targets and effective limits")
def all_history(_: Reader, svc: Service, minutes: Minutes = 60,
                model: Annotated[list[str] | None, Query(
                    max_length=MAX_MODELS_PER_REQUEST,
                    description="models to read (repeat the parameter); if absent, a page "
                                "of every model with a quota, by name")] = None,
                offset: Annotated[int, Query(ge=0, description="without model: the first "
                                             "model of the page (by name)")] = 0,
                limit: Annotated[int, Query(ge=1, le=MAX_MODELS_PER_REQUEST, description=(
                    "without model: models per page"))] = 50,
                ) -> dict[str, Any]:
    for name in model or []:
        if not MODEL_NAME_RE.match(name):
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [{
                "loc": ["query", "model"], "field": "model", "type": "string_pattern_mismatch",
                "msg": f"{name!r} is not a model name (1-128 letters, digits or "
                       "'. _ : / @ + -', starting with a letter or digit)"}])
    history, quotas = _read(svc, model, minutes, offset, limit)
    doc = _document(history, quotas)
    if model is None:  # a page of every model: say where it is
        doc.update(total=len(quotas), offset=offset, limit=limit)
    return doc


@router.get("/models/{model:path}/history", summary="One model's traffic over time",
            responses={404: {"description": "no quota and no recorded traffic"}})
def model_history(model: Annotated[str, Path(pattern=MODEL_NAME_RE.pattern)], _: Reader,
                  svc: Service, minutes: Minutes = 60) -> dict[str, Any]:
    history, quotas = _read(svc, [model], minutes)
    doc = _document(history, quotas)
    found = doc["models"][model]
    if found["quota"] is None and not history.models[model].buckets:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"model {model!r} has no quota and no recorded traffic")
    return {"model": model, "now_ms": doc["now_ms"], "bucket_ms": doc["bucket_ms"],
            "span_ms": doc["span_ms"], **found}
