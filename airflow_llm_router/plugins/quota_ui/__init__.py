"""The quota UI: a FastAPI app (JSON API and page) for the Airflow API server."""

from __future__ import annotations

from airflow_llm_router.plugins.quota_ui.app import URL_PREFIX, create_app

__all__ = ["URL_PREFIX", "create_app"]
