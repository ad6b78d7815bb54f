"""The Models Backend's HTTP contract: its configuration and the calls the solver makes."""

from __future__ import annotations

from airflow_llm_router.backend.calls import (
    BackendHttp,
    CallResult,
    CallStatus,
    call_batch,
    call_single,
    http_client,
)
from airflow_llm_router.backend.config import BackendConfig, BackendFields

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
