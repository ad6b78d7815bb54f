"""What a client does while Redis Cluster moves the router's slot to another node.

Every key a script touches is declared to it (``keys.py``), so during a migration Redis
refuses a script that could see only part of the state: ``TRYAGAIN`` while the declared
keys are split between the two nodes or some do not exist yet (a fresh model's window, the
recovery marker), ``ASK`` (followed by redis-py) when none is left on the old node. redis-py
retries ``TRYAGAIN`` 16 times, about 0.4 s, then raises ``ClusterError("TTL exhausted.")``;
a migration of a busy namespace takes longer, so the clients go on retrying the refused
call (nothing of it was applied) with a short backoff for up to :data:`MIGRATION_WAIT_S`,
then raise :class:`~airflow_llm_router.exceptions.SlotMigrationError`.

After the move, redis-py's asyncio cluster client (8.1) refreshes its slot map and closes
connections that other coroutines are about to write to: such a call fails with
``AttributeError: 'NoneType' object has no attribute 'writelines'`` before anything of it
is written (:func:`closed_under_call`). It is retried the same way.
"""

from __future__ import annotations

import time

from redis.exceptions import ClusterError, TryAgainError

from airflow_llm_router.exceptions import SlotMigrationError

__all__ = ["MIGRATION_WAIT_S", "SlotRetry", "closed_under_call", "refused_by_migration",
           "retried_in_migration"]

#: How long a client retries a script that a slot migration keeps refusing.
MIGRATION_WAIT_S = 15.0
#: Backoff between retries: doubles from the first to the last.
_FIRST_S, _MOST_S = 0.005, 0.1


def refused_by_migration(err: BaseException) -> bool:
    """Whether ``err`` is Redis Cluster's refusal of a call during a slot migration."""
    if isinstance(err, TryAgainError):
        return True
    return type(err) is ClusterError and "TTL exhausted" in str(err)


def closed_under_call(err: BaseException) -> bool:
    """Whether ``err`` is redis-py's asyncio client writing to a connection that its
    cluster client closed meanwhile (refreshing its slot map after a migration): an
    ``AttributeError`` on a ``None`` stream raised inside ``redis.asyncio``, before the
    command reached the wire."""
    if not isinstance(err, AttributeError) or "'NoneType' object" not in str(err):
        return False
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "redis/asyncio/" in tb.tb_frame.f_code.co_filename.replace(
        "\\", "/")


def retried_in_migration(err: BaseException) -> bool:
    """Whether a client retries ``err`` (with :class:`SlotRetry`): nothing of the call was
    applied, and the slot's move explains it."""
    return refused_by_migration(err) or closed_under_call(err)


class SlotRetry:
    """The retries of one script call refused during a slot migration."""

    def __init__(self, op: str, namespace: str, wait_s: float | None = None) -> None:
        self.op = op
        self.namespace = namespace
        self.wait_s = MIGRATION_WAIT_S if wait_s is None else wait_s
        self._deadline: float | None = None
        self._pause = _FIRST_S

    def pause(self, err: BaseException) -> float:
        """Seconds to wait before the next try; raises once :attr:`wait_s` has passed."""
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.wait_s
        if now >= self._deadline:
            raise SlotMigrationError(
                f"{self.op}: Redis Cluster refused it for {self.wait_s:g} s while the slot "
                f"of router namespace {self.namespace!r} was being migrated "
                f"({type(err).__name__}: {err}); nothing of it was applied: retry once the "
                "migration is over (a migration left half done is completed by "
                "`redis-cli --cluster fix`)") from err
        pause, self._pause = self._pause, min(_MOST_S, self._pause * 2)
        return pause
