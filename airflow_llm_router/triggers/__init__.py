"""Triggers: what the triggerer runs for the deferrable operators and sensors.

The solving triggers (``DrainTrigger``, ``SolveTrigger``) load on first use: they bring
the solver and its HTTP client (aiohttp), which a task that only waits on the backlog (an
asset watcher, the backpressure sensor) should not pay for at its start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_llm_router.triggers.backlog import BacklogArrivalTrigger, BackpressureTrigger

if TYPE_CHECKING:
    from airflow_llm_router.triggers.solve import DrainTrigger, SolveTrigger

__all__ = ["BacklogArrivalTrigger", "BackpressureTrigger", "DrainTrigger", "SolveTrigger"]


def __getattr__(name: str) -> Any:
    if name in ("DrainTrigger", "SolveTrigger"):
        from airflow_llm_router.triggers import solve

        return getattr(solve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
