"""Ride out short Redis outages: retry the solver's Redis calls with jittered backoff.

A Redis restart or failover takes seconds; ending a drain for it would hand back every claim
and throw away the answers of the calls in flight. The solver's Redis calls (admit, complete,
heartbeat, mark_sent, stats) go through :meth:`RedisOutage.call`, which retries connection
errors with jittered exponential backoff for as long as the outage has lasted less than the
budget (``redis_outage_s``), then raises the error so the drain ends loudly.

Only connection-level errors are retried: a script error or a bad argument is a bug or bad
input and surfaces at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions

__all__ = ["REDIS_DOWN", "RedisOutage"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors that mean "Redis cannot be reached now" (restart, failover, network), not "wrong".
REDIS_DOWN: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    ConnectionError,
    TimeoutError,
)

_FIRST_PAUSE_S = 0.05
_MAX_PAUSE_S = 2.0


class RedisOutage:
    """The outage state of one solver: when Redis was last seen failing, and the budget.

    Every caller shares it, so an outage is logged once and its length counts from the first
    failure any call saw, not per call.

    :param budget_s: how long an outage may last before calls give up and raise.
    """

    def __init__(self, budget_s: float) -> None:
        if budget_s < 0:
            raise ValueError(f"redis_outage_s: {budget_s!r} must be >= 0 seconds")
        self.budget_s = budget_s
        self._since: float | None = None
        #: outages seen (each logged once when it starts and once when it ends)
        self.outages = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, what: str) -> T:
        """``await fn(*args)``, retried while Redis is down and the outage is within budget."""
        pause = _FIRST_PAUSE_S
        while True:
            try:
                result = await fn(*args)
            except REDIS_DOWN as err:
                now = time.monotonic()
                if self._since is None:
                    self._since = now
                    self.outages += 1
                    log.warning("Redis unreachable (%s: %s); retrying for up to %g s",
                                type(err).__name__, err, self.budget_s)
                if now - self._since >= self.budget_s:
                    log.error("Redis unreachable for %.1f s, past the outage budget of %g s: "
                              "%s gives up", now - self._since, self.budget_s, what)
                    raise
                await asyncio.sleep(pause * random.uniform(0.5, 1.0))
                pause = min(pause * 2, _MAX_PAUSE_S)
                continue
            if self._since is not None:
                log.warning("Redis reachable again after %.1f s", time.monotonic() - self._since)
                self._since = None
            return result
