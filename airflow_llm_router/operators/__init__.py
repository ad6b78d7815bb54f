"""Operators: solve prompts given in the DAG, or drain the task store's backlog."""

from __future__ import annotations

from airflow_llm_router.operators.prompts import SolvePromptsOperator
from airflow_llm_router.operators.solve import SolveTaskAsyncOperator, SolveTaskOperator

__all__ = ["SolvePromptsOperator", "SolveTaskAsyncOperator", "SolveTaskOperator"]
