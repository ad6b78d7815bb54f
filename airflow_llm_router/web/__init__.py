"""The router's one HTTP surface: every route, served by the Airflow plugin under
``/llm-router/api`` and standalone by ``python -m airflow_llm_router.web``.

One route module per concern (``admission``, ``ingestion``, ``backlog``, ``quotas``,
``budget``, ``history``), one auth module with two strategies (``auth``: Airflow's auth
manager, or a bearer token), one app factory (``app``). See docs/http_api.md.
"""

from __future__ import annotations

from airflow_llm_router.web.app import create_app
from airflow_llm_router.web.auth import Access, Caller, Reader, Writer, airflow_access, token_access
from airflow_llm_router.web.service import QuotaService
from airflow_llm_router.web.sources import Lazy, Unavailable

__all__ = ["Access", "Caller", "Lazy", "QuotaService", "Reader", "Unavailable", "Writer",
           "airflow_access", "create_app", "token_access"]
