"""A private ``redis-server`` on a free loopback port, for tests that stop, restart or flush
Redis (the shared one on 6379 must never be disturbed). It lives in the devkit, which the
soak benchmark shares."""

from __future__ import annotations

from llm_router_devkit.redis_tools import PrivateRedis, private_redis

__all__ = ["PrivateRedis", "private_redis"]
