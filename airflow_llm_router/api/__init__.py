"""The HTTP API of the router, for callers outside Airflow that share the quotas.

Seed 001's admission contract (``/schedule``, ``/complete``, ``/heartbeat``, ``/advice``)
and task ingestion (``/tasks``), served by the Airflow plugin under ``/llm-router-api`` and
standalone by ``python -m airflow_llm_router.api``. See docs/http_api.md.
"""

from __future__ import annotations

from airflow_llm_router.api.app import create_app
from airflow_llm_router.api.auth import Access, Caller, Reader, Writer, token_access
from airflow_llm_router.api.sources import Lazy, Unavailable

__all__ = ["Access", "Caller", "Lazy", "Reader", "Unavailable", "Writer", "create_app",
           "token_access"]
