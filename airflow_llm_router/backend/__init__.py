"""The Models Backend's HTTP contract: its configuration and the calls the solver makes."""

from __future__ import annotations

from airflow_llm_router.backend.calls import CallResult, CallStatus, call_batch, call_single
from airflow_llm_router.backend.config import BackendConfig, BackendFields
from airflow_llm_router.backend.session import BackendHttp, http_client

__all__ = [
    "BackendConfig",
    "BackendFields",
    "BackendHttp",
    "CallResult",
    "CallStatus",
    "call_batch",
    "call_single",
    "http_client",
]
