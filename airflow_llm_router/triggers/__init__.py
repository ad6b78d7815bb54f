"""Triggers: what the triggerer runs for the deferrable operators and sensors."""

from __future__ import annotations

from airflow_llm_router.triggers.backlog import BacklogArrivalTrigger, BackpressureTrigger
from airflow_llm_router.triggers.solve import DrainTrigger, SolveTrigger

__all__ = ["BacklogArrivalTrigger", "BackpressureTrigger", "DrainTrigger", "SolveTrigger"]
