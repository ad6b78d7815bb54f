"""The router's metrics, sent through Airflow's own ``Stats`` so that the StatsD or
OpenTelemetry dashboards already watching Airflow see them (``[metrics]`` configures where).

Names start with ``llm_router.`` (after Airflow's ``statsd_prefix``). Each per-model metric
carries the model both in its name (``llm_router.admitted.gpt-small``: plain StatsD has no
tags) and as the tag ``model`` (OpenTelemetry, InfluxDB-style StatsD):

========================================  =======  ==========================================
name                                      type     when
========================================  =======  ==========================================
``llm_router.admitted.<model>``           counter  a prompt was admitted (solver)
``llm_router.admission_wait.<model>``     timer    ms from asking to being admitted (solver)
``llm_router.waits.<reason>``             counter  an admission answered "wait" (rpm, tpm, ...)
``llm_router.rate_limited.<model>``       counter  the backend answered 429
``llm_router.errors.<model>``             counter  the call failed (5xx, timeout, ...)
``llm_router.in_flight.<model>``          gauge    calls in flight now
``llm_router.window_requests.<model>``    gauge    requests in the current window
``llm_router.window_tokens.<model>``      gauge    tokens in the current window
``llm_router.rpm_used_pct.<model>``       gauge    window requests / rpm, percent
``llm_router.tpm_used_pct.<model>``       gauge    window tokens / tpm, percent
``llm_router.limit_share.<model>``        gauge    share of the quota in force (1: the quota;
                                                   less: learned from the provider's 429s)
``llm_router.guard_ms.<model>``           gauge    how long past its window an admission
                                                   counts (ms; widened by late arrivals)
``llm_router.spend_micro_usd.<model>``    gauge    a priced model's spend this budget period:
                                                   settled + reserved, micro-dollars
``llm_router.budget_used_pct.<model>``    gauge    that spend / its budget, percent (only
                                                   with a budget)
``llm_router.total_spend_micro_usd``      gauge    every priced model's spend together, in
                                                   the router-wide budget's period
``llm_router.total_budget_used_pct``      gauge    that / the router-wide budget, percent
``llm_router.waiting``                    gauge    requests waiting for capacity
========================================  =======  ==========================================

Waits for a spent budget count as ``llm_router.waits.budget`` (docs/budgets.md).

Gauges are sent whenever stats are read: by the solver's progress loop while it runs and by
the quota API. A metric never raises: a broken metrics backend must not stop solving.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_llm_router.engine.stats import RouterStats, SpendStats

__all__ = ["admitted", "errored", "rate_limited", "usage", "waited"]

log = logging.getLogger(__name__)

PREFIX = "llm_router"

_initialized = False


def _stats() -> Any:
    """The Task SDK's ``Stats``, initialised from ``[metrics]`` once per process.

    Workers initialise it themselves; the triggerer and the API server initialise only the
    core copy, which the SDK's module does not share, so we do it here (same factory, same
    settings: initialising twice only replaces the client socket).
    """
    global _initialized
    from airflow.sdk.observability import stats

    if not _initialized:
        from airflow.configuration import conf
        from airflow.observability.metrics import stats_utils

        stats.initialize(factory=stats_utils.get_stats_factory(),
                         export_legacy_names=conf.getboolean("metrics", "legacy_names_on",
                                                             fallback=True))
        _initialized = True
    return stats


def _name(metric: str, model: str | None = None) -> str:
    if model is None:
        return f"{PREFIX}.{metric}"
    from airflow.sdk.observability.stats import normalize_name_for_stats

    return f"{PREFIX}.{metric}.{normalize_name_for_stats(model, log_warning=False)}"


def _emit(kind: str, metric: str, value: float | None = None, model: str | None = None) -> None:
    """Send one metric: ``incr`` by ``value`` (1 if None), or a gauge or timing of it."""
    try:
        stats = _stats()
        tags = {"model": model} if model is not None else None
        if kind == "incr":
            stats.incr(_name(metric, model), 1 if value is None else int(value), tags=tags)
        elif kind == "gauge":
            stats.gauge(_name(metric, model), value, tags=tags)
        else:
            stats.timing(_name(metric, model), value, tags=tags)
    except Exception:  # metrics are best effort
        log.debug("could not emit %s", metric, exc_info=True)


def admitted(model: str, waited_s: float) -> None:
    """A prompt was admitted on ``model`` after asking for ``waited_s`` seconds."""
    _emit("incr", "admitted", model=model)
    _emit("timing", "admission_wait", max(0.0, waited_s) * 1000, model=model)


def waited(reason: str, count: int = 1) -> None:
    """``count`` admissions answered "wait" because of ``reason`` (rpm, tpm, concurrency,
    ...): a caller that decides many requests at once counts each reason once per batch."""
    _emit("incr", f"waits.{reason}", count)


def rate_limited(model: str) -> None:
    _emit("incr", "rate_limited", model=model)


def errored(model: str) -> None:
    _emit("incr", "errors", model=model)


def hedged(model: str) -> None:
    """A late call on ``model`` was hedged: its prompt sent to another model as well."""
    _emit("incr", "hedged", model=model)


def usage(stats: RouterStats) -> None:
    """Gauges of every model's current window and in-flight calls."""
    _emit("gauge", "waiting", stats.waiting)
    for name, m in stats.models.items():
        _emit("gauge", "in_flight", m.in_flight, model=name)
        _emit("gauge", "window_requests", m.requests, model=name)
        _emit("gauge", "window_tokens", m.tokens, model=name)
        _emit("gauge", "limit_share", m.limit_share, model=name)
        _emit("gauge", "guard_ms", m.guard_ms, model=name)
        if m.quota is not None:
            _emit("gauge", "rpm_used_pct", 100.0 * m.requests / m.quota.rpm, model=name)
            _emit("gauge", "tpm_used_pct", 100.0 * m.tokens / m.quota.tpm, model=name)
        _spend_gauges(m.spend, "spend_micro_usd", "budget_used_pct", name)
    _spend_gauges(stats.total_spend, "total_spend_micro_usd", "total_budget_used_pct")


def _spend_gauges(spend: SpendStats | None, spent: str, used_pct: str,
                  model: str | None = None) -> None:
    """A budget period's spend (settled + reserved) and its share of the budget, if any."""
    if spend is None:
        return
    _emit("gauge", spent, spend.committed_micro_usd, model=model)
    if spend.budget_micro_usd:
        _emit("gauge", used_pct, 100.0 * spend.committed_micro_usd / spend.budget_micro_usd,
              model=model)
