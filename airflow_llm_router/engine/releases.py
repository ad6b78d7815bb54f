"""Wake waiting coroutines when capacity is released or a quota changes (Redis pub/sub)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPubSub
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

__all__ = ["RELEASE_HELPS", "ReleaseListener"]

log = logging.getLogger(__name__)


#: Wait reasons a release can end: a freed slot, tokens settled below their estimate, a
#: finished breaker probe, a model's first answer (``warming``), spend settled below its
#: reservation or a budget raised (``budget``: its retry after is the period's end, hours
#: away for a daily budget). A wait for rpm or a cooldown ends only with time (its retry
#: after is exact) or a quota change, so such waiters sleep through releases.
RELEASE_HELPS = frozenset({"concurrency", "tpm", "input_tpm", "output_tpm", "breaker",
                           "warming", "budget"})


#: How long :meth:`ReleaseListener.stop` waits for the cancelled subscription to end.
STOP_WAIT_S = 5.0


class ReleaseListener:
    """One pub/sub subscription per client, shared by all its waiting coroutines.

    ``generation`` counts every event seen (releases, quota changes, pokes); ``changes``
    only quota changes and pokes. A waiter takes :meth:`mark` before asking for admission
    and then waits for it to move, so an event between the answer and the wait is not
    missed; a waiter that no release can help waits on ``changes`` only, so the releases
    of a busy router do not wake it for nothing.
    """

    def __init__(self, client: aioredis.Redis, channel: str,
                 sharded: Callable[[], Awaitable[bool]] | None = None) -> None:
        """:param sharded: asks the server whether the scripts publish sharded (SPUBLISH,
            Redis 7+), asked again at each (re)subscription; None: plain pub/sub."""
        self._client = client
        self._channel = channel
        self._sharded = sharded
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._changed: asyncio.Condition | None = None
        self.generation = 0
        self.changes = 0

    def mark(self) -> tuple[int, int]:
        """The counters now, for :meth:`wait`."""
        return self.generation, self.changes

    async def start(self) -> None:
        if self._task is not None:
            return
        if isinstance(self._client, AsyncRedisCluster):
            # Its pub/sub picks a node from the nodes it knows: none until it has been
            # initialized (by a first command), so a drain's first act, this subscription,
            # would wait forever on a fresh cluster client.
            await self._client.initialize()
        self._ready = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._listen(), name="llm-router-releases")
        await self._ready.wait()

    async def _listen(self) -> None:
        """Subscribe and count events; after a lost connection (a Redis restart),
        subscribe again with backoff, waking every waiter once (events may have been
        missed meanwhile). Waiters never depend on it alone: each waits with a timeout."""
        assert self._ready is not None and self._changed is not None
        pause = 0.05
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                sharded = self._sharded is not None and await self._sharded()
                if sharded:
                    await pubsub.ssubscribe(self._channel)
                else:
                    await pubsub.subscribe(self._channel)
                self._ready.set()
                pause = 0.05
                async for message in _messages(pubsub, sharded):
                    if message.get("type") not in ("message", "smessage"):
                        continue
                    async with self._changed:
                        self.generation += 1
                        if message.get("data") not in (b"*", "*"):  # not a release: a quota
                            self.changes += 1
                        self._changed.notify_all()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                    OSError) as err:
                log.warning("release channel lost (%s); subscribing again", type(err).__name__)
                self._ready.set()
                self.poke()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def poke(self) -> None:
        """Wake every waiter (a new request joined, say)."""
        self.generation += 1
        self.changes += 1
        if self._changed is not None:
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait(self, seen: tuple[int, int], timeout_s: float, *,
                   releases: bool = True) -> bool:
        """Wait until an event after the :meth:`mark` ``seen`` (with ``releases=False``:
        a quota change or a poke); False on timeout."""
        assert self._changed is not None

        def moved() -> bool:
            return self.mark()[0 if releases else 1] != seen[0 if releases else 1]

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(moved), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def stop(self) -> None:
        """Cancel the subscription and wait for it to end, at most :data:`STOP_WAIT_S`: a
        pub/sub read that ignores its cancellation (seen in redis-py's cluster pub/sub
        while the slot map is refreshed) is left behind with a warning rather than holding
        the caller (a drain closing its client) for ever. The caller's own cancellation
        goes through."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not done:
            log.warning("the release listener did not end within %g s of its cancellation "
                        "(a pub/sub read held it); left behind", STOP_WAIT_S)
        task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a listener's end as seen (it logs its own errors), so asyncio does not report
    an exception never retrieved."""
    if not task.cancelled():
        task.exception()


async def _messages(pubsub: Any, sharded: bool) -> AsyncIterator[dict[str, Any]]:
    """The subscription's messages: a cluster client reads sharded ones per node
    (``get_sharded_message``), every other subscription through ``listen``."""
    if not (sharded and isinstance(pubsub, ClusterPubSub)):
        async for message in pubsub.listen():
            yield message
        return
    while True:
        message = await pubsub.get_sharded_message(ignore_subscribe_messages=True,
                                                   timeout=1.0)
        if message is not None:
            yield message
