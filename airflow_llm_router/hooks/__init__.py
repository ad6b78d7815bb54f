"""Hooks: the router (Redis) and the Models Backend (HTTP).

``ModelsBackendHook`` loads on first use: it brings the backend's HTTP client (aiohttp),
which a task that only talks to the router (the backpressure sensor) should not pay for
at its start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_llm_router.hooks.router import RouterHook

if TYPE_CHECKING:
    from airflow_llm_router.hooks.models_backend import ModelsBackendHook

__all__ = ["ModelsBackendHook", "RouterHook"]


def __getattr__(name: str) -> Any:
    if name == "ModelsBackendHook":
        from airflow_llm_router.hooks import models_backend

        return models_backend.ModelsBackendHook
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
