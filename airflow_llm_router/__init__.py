"""airflow-llm-router: per-model LLM traffic control and backlog draining for Airflow 3."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
