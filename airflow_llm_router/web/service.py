"""What the quota, budget and history routes talk to: the router (Redis, its synchronous
client) and the quota store (PostgreSQL).

Built on first use from the Airflow connections a
:class:`~airflow_llm_router.quotas.config.QuotaConfig` names (the plugin: the
``[llm_router]`` section), so the server starts even before those connections exist; until
they do, the routes answer 503 naming what is missing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.quotas.config import QuotaConfig
from airflow_llm_router.quotas.quota_store import QuotaStore
from airflow_llm_router.web.errors import first_line

#: Counters whose recent change the stats report (429s and errors "in the last windows").
RECENT_COUNTERS = ("rate_limited", "errors")
#: How many of a model's windows "recent" spans.
RECENT_WINDOWS = 5


class ServiceUnavailable(RuntimeError):
    """The router or the quota store cannot be reached or is not configured."""


@dataclass
class CounterHistory:
    """Samples of the engine's cumulative counters, to report their change over the last
    few windows (the engine keeps totals only). Per API server process; a fresh process
    reports the change since its first sample."""

    samples: deque[tuple[float, dict[str, dict[str, int]]]] = field(
        default_factory=lambda: deque(maxlen=512))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def recent(self, stats: RouterStats) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        current = {name: {c: m.counters.get(c, 0) for c in RECENT_COUNTERS}
                   for name, m in stats.models.items()}
        with self.lock:
            self.samples.append((now, current))
            history = list(self.samples)
        out: dict[str, dict[str, Any]] = {}
        for name, m in stats.models.items():
            span = RECENT_WINDOWS * (m.quota.window_s if m.quota else 60.0)
            base_at, base = next(((at, s[name]) for at, s in history
                                  if now - at <= span and name in s), (now, current[name]))
            out[name] = {c: current[name][c] - base[c] for c in RECENT_COUNTERS}
            out[name]["over_s"] = round(now - base_at, 1)
        return out


class QuotaService:
    """The router client and the quota store that the routes share."""

    def __init__(self, router: RouterClient, store: QuotaStore) -> None:
        self.router = router
        self.store = store
        self.history = CounterHistory()

    @classmethod
    def from_config(cls, config: QuotaConfig, namespace: str | None = None) -> QuotaService:
        """From ``config``'s connections (``namespace``: the router connection's unless
        given); migrates the quota tables."""
        try:
            hook = RouterHook(config.router_conn_id, namespace=namespace)
            router = hook.client
            config = config.with_router_extra(
                hook.get_connection(config.router_conn_id).extra_dejson)
            store = config.open_store(router)
            store.migrate()
        except Exception as err:
            raise ServiceUnavailable(
                f"the quota service needs the connections {config.router_conn_id!r} (Redis) "
                f"and {config.postgres_conn_id!r} (PostgreSQL): {type(err).__name__}: "
                f"{first_line(err)}") from err
        return cls(router, store)


class LazyService:
    """Builds the service once, on first use, from ``factory``; retries after a failure."""

    def __init__(self, factory: Callable[[], QuotaService]) -> None:
        self._factory = factory
        self._service: QuotaService | None = None
        self._lock = threading.Lock()

    def get(self) -> QuotaService:
        with self._lock:
            if self._service is None:
                self._service = self._factory()
            return self._service
