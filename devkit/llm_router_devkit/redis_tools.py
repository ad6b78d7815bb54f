"""Redis housekeeping for tests, demos and benchmarks: never needed in production."""

from __future__ import annotations

from typing import Any

import redis

from airflow_llm_router.engine.keys import RouterKeys

__all__ = ["drop_namespace"]


def drop_namespace(client: Any, namespace: str) -> int:
    """Delete every key of a router namespace (quotas, windows, leases, counters): what a
    Redis restart without persistence does to it. For a namespace a test, demo or benchmark
    made of its own. ``client`` is a ``redis.Redis`` or a Redis URL; returns how many keys
    there were."""
    own = isinstance(client, str)
    conn = redis.Redis.from_url(client) if own else client
    try:
        keys = list(conn.scan_iter(match=RouterKeys(namespace).prefix + "*", count=1000))
        return int(conn.delete(*keys)) if keys else 0
    finally:
        if own:
            conn.close()
