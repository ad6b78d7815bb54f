"""Hooks: the router (Redis) and the Models Backend (HTTP)."""

from __future__ import annotations

from airflow_llm_router.hooks.models_backend import ModelsBackendHook
from airflow_llm_router.hooks.router import RouterHook

__all__ = ["ModelsBackendHook", "RouterHook"]
