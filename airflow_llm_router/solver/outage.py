"""Ride out short outages of Redis and of the task store: retry with jittered backoff.

A Redis restart or failover, or a PostgreSQL restart, takes seconds; ending a drain for it
would hand back every claim and throw away the answers of the calls in flight (answers the
backend was paid for). The solver's Redis calls (admit, complete, heartbeat, mark_sent,
stats) go through a :class:`RedisOutage`, a drain's store calls (claims, extensions, the
writes of answers) through a :class:`StoreOutage`: :meth:`Outage.call` retries errors that
mean "cannot be reached now" with jittered exponential backoff for as long as the outage
has lasted less than its budget (``redis_outage_s``, ``store_outage_s``) and, where the
caller gives one, the deadline has not passed; then it raises the error so the drain ends
loudly.

Only connection-level errors are retried (and a cluster client's finding none of its
startup nodes, or not every slot, which redis-py reports otherwise): a script error, a
bad argument or a refused password is a bug, bad input or a wrong setting, and surfaces
at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions

from airflow_llm_router.exceptions import TaskStoreUnavailable

__all__ = ["NOT_AN_OUTAGE", "REDIS_DOWN", "Outage", "RedisOutage", "StoreOutage",
           "cluster_unreachable"]

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

#: redis-py raises these as ConnectionErrors, but no retry mends them: the password or the
#: user's rights are wrong (a setting of the connection).
NOT_AN_OUTAGE: tuple[type[Exception], ...] = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
)

#: what redis-py's cluster client says when none of its startup nodes answers, or the nodes
#: it reached do not cover every slot yet (a node lost, its replica not promoted yet)
_CLUSTER_UNREACHABLE = ("cannot be connected", "not covered")


def cluster_unreachable(err: BaseException) -> bool:
    """A Redis Cluster client found no node to start from, or not every slot: an outage
    (redis-py raises a ``RedisClusterException``, not a connection error, for it)."""
    return (isinstance(err, redis.exceptions.RedisClusterException)
            and any(text in str(err) for text in _CLUSTER_UNREACHABLE))


_FIRST_PAUSE_S = 0.05
_MAX_PAUSE_S = 2.0


class Outage:
    """The outage state of one service for one solver: when it was last seen failing, and
    the budget.

    Every caller shares it, so an outage is logged once and its length counts from the first
    failure any call saw, not per call.

    :param service: what is unreachable, for the log (``"Redis"``, ``"Task store"``).
    :param setting: the name of the budget's setting, for errors.
    :param budget_s: how long an outage may last before calls give up and raise.
    :param down: the errors that mean the service cannot be reached now.
    :param deadline: epoch seconds past which calls give up at once rather than wait
        (None: the budget alone bounds them).
    """

    def __init__(self, service: str, setting: str, budget_s: float,
                 down: tuple[type[Exception], ...], *, deadline: float | None = None,
                 not_down: tuple[type[Exception], ...] = ()) -> None:
        if budget_s < 0:
            raise ValueError(f"{setting}: {budget_s!r} must be >= 0 seconds")
        self.service, self.budget_s, self.deadline = service, budget_s, deadline
        self._down, self._not_down = down, not_down
        self._since: float | None = None
        #: outages seen (each logged once when it starts and once when it ends)
        self.outages = 0

    def is_down(self, err: Exception) -> bool:
        """``err`` means the service cannot be reached now (so a retry may mend it)."""
        return isinstance(err, self._down) and not isinstance(err, self._not_down)

    @property
    def down(self) -> bool:
        return self._since is not None

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, what: str,
                   past_deadline: bool = False) -> T:
        """``await fn(*args)``, retried while the service is down, the outage is within
        budget and (unless ``past_deadline``: a write of answers already paid for) the
        deadline has not passed.

        :raises: the last error, past the budget or the deadline.
        """
        until = None if past_deadline else self.deadline
        pause = _FIRST_PAUSE_S
        while True:
            try:
                result = await fn(*args)
            except Exception as err:
                if not self.is_down(err):
                    raise
                now = time.monotonic()
                if self._since is None:
                    self._since = now
                    self.outages += 1
                    limit = self.budget_s if until is None else max(
                        0.0, min(self.budget_s, until - time.time()))
                    log.warning("%s unreachable (%s: %s); retrying for up to %.1f s",
                                self.service, type(err).__name__, err, limit)
                late = until is not None and time.time() >= until
                if late or now - self._since >= self.budget_s:
                    log.error("%s unreachable for %.1f s, past %s: %s gives up",
                              self.service, now - self._since,
                              "the deadline" if late else f"the outage budget of "
                              f"{self.budget_s:g} s", what)
                    raise
                await asyncio.sleep(pause * random.uniform(0.5, 1.0))
                pause = min(pause * 2, _MAX_PAUSE_S)
                continue
            if self._since is not None:
                log.warning("%s reachable again after %.1f s", self.service,
                            time.monotonic() - self._since)
                self._since = None
            return result


class RedisOutage(Outage):
    """Redis's outages for one solver (budget: ``redis_outage_s``). A refused password is
    not an outage: it raises at once."""

    def __init__(self, budget_s: float, *, deadline: float | None = None) -> None:
        super().__init__("Redis", "redis_outage_s", budget_s, REDIS_DOWN, deadline=deadline,
                         not_down=NOT_AN_OUTAGE)

    def is_down(self, err: Exception) -> bool:
        return super().is_down(err) or cluster_unreachable(err)


class StoreOutage(Outage):
    """The task store's outages for one drain (budget: ``store_outage_s``)."""

    def __init__(self, budget_s: float, *, deadline: float | None = None) -> None:
        super().__init__("Task store", "store_outage_s", budget_s,
                         (TaskStoreUnavailable,), deadline=deadline)
