"""Solving prompts: the async work shared by the trigger and the non-deferrable operator."""

from __future__ import annotations

from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.settings import DrainSettings, SolveSettings

__all__ = ["DrainSettings", "SolveItem", "SolveResult", "SolveSettings"]
