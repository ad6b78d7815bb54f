"""The router's clients: :class:`RouterClient` (blocking: hooks, workers, command lines) and
:class:`AsyncRouterClient` (asyncio: triggers). Both expose the same operations, written
once in :class:`~airflow_llm_router.engine.api.RouterAPI` over the policy of
:class:`~airflow_llm_router.engine.core.RouterCore`; they only do I/O.

- ``engine/api.py``: the operations, shared by both clients;
- ``engine/sync_client.py``: ``RouterClient``;
- ``engine/async_client.py``: ``AsyncRouterClient``;
- ``engine/merger.py``: one script call for the calls of one event-loop turn;
- ``engine/releases.py``: the pub/sub listener that wakes waiting coroutines.
"""

from __future__ import annotations

from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.merger import ScriptMerger
from airflow_llm_router.engine.releases import RELEASE_HELPS, ReleaseListener
from airflow_llm_router.engine.sync_client import RouterClient

__all__ = ["RELEASE_HELPS", "AsyncRouterClient", "ReleaseListener", "RouterClient", "ScriptMerger"]
