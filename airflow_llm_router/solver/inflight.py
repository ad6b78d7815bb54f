"""The prompts a drain has in flight, and those of them that ended since it last looked.

``asyncio.wait(active, return_when=FIRST_COMPLETED)`` adds a callback to every task in flight
and takes it off again each time it returns, so a drain with n prompts in flight paid O(n)
for each answer: with 1,400 in flight (a lead solver sending a whole first burst alone),
about 2 s of the 14.5 s of CPU the drain took on W1 (``python -m bench.direct``). Here each
task reports itself once, when it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["InFlight"]

T = TypeVar("T")


class InFlight(Generic[T]):
    """Tasks in flight; :meth:`wait` hands back those that ended and forgets them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[T]] = set()
        self._ended: list[asyncio.Task[T]] = []
        self._waiter: asyncio.Future[None] | None = None

    def add(self, tasks: Iterable[asyncio.Task[T]]) -> None:
        for task in tasks:
            self._tasks.add(task)
            task.add_done_callback(self._add_ended)

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[T]]:
        return iter(list(self._tasks))

    def _add_ended(self, task: asyncio.Task[T]) -> None:
        self._ended.append(task)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, timeout_s: float) -> list[asyncio.Task[T]]:
        """The tasks that ended since the last call (no longer in flight), waiting up to
        ``timeout_s`` for one (none if none did). A bare future and a timer, not
        ``asyncio.wait_for``: before Python 3.12 that can swallow the drain's cancellation
        when the wait ends at the same moment (seen: a SIGTERM mid-drain that never stopped
        the drain)."""
        if not self._ended:
            loop = asyncio.get_running_loop()
            self._waiter = loop.create_future()
            timer = loop.call_later(timeout_s, self._wake)
            try:
                await self._waiter
            finally:
                timer.cancel()
                self._waiter = None
        ended, self._ended = self._ended, []
        self._tasks.difference_update(ended)
        return ended
