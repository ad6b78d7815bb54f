"""Coalesce what many coroutines submit into one batched call, and give each its answer.

Several parts of a drain do the same thing: many coroutines each have one small request
(admit this prompt, stamp this lease as sent, send this prompt in a ``/batch``), and one call
for all of them costs about what one call for one costs. A :class:`Coalescer` gathers the
items submitted under one key while a batch is open and hands them to ``send`` in one call:

- a batch opens with its first item and is sent at the end of the current event-loop turn
  (``delay_s=0``), or ``delay_s`` later, or at once when it reaches ``max_size``;
- ``send(key, items)`` returns one result per item, in order; each submitter gets its own,
  or the exception ``send`` raised;
- ``size`` weighs an item (an item may itself be a list of requests), so ``max_size``
  bounds what one call carries.

An item bigger than ``max_size`` goes alone. Nothing is lost on failure: every submitter of
a failed batch sees the error. Fire-and-forget callers (:meth:`Coalescer.submit_nowait`) get
failures logged, never silently dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Coalescer"]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
I = TypeVar("I")  # noqa: E741 (the item type)
R = TypeVar("R")


@dataclass
class _Batch(Generic[I, R]):
    items: list[I] = field(default_factory=list)
    futures: list[asyncio.Future[R]] = field(default_factory=list)
    size: int = 0
    timer: asyncio.Handle | None = None
    unwatched: bool = False  # some submitter will not look at its future


class Coalescer(Generic[K, I, R]):
    """Batch items per key; see the module docstring.

    :param send: ``send(key, items)`` makes one call for the items and returns one result
        per item, in order.
    :param delay_s: how long a batch stays open after its first item (0: until the end of
        the current event-loop turn, which is when every coroutine woken together has
        submitted).
    :param max_size: the most weight one call carries (None: no bound).
    :param size: the weight of one item (1 by default).
    :param name: names the batches in logs.
    """

    def __init__(
        self,
        send: Callable[[K, list[I]], Awaitable[Sequence[R]]],
        *,
        delay_s: float = 0.0,
        max_size: int | None = None,
        size: Callable[[I], int] | None = None,
        name: str = "coalescer",
    ) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s: {delay_s!r} must be >= 0 seconds")
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size: {max_size!r} must be >= 1 or None")
        self._send = send
        self._delay_s = delay_s
        self._max_size = max_size
        self._size = size or (lambda _item: 1)
        self._name = name
        self._open: dict[K, _Batch[I, R]] = {}
        self._sending: set[asyncio.Task[None]] = set()
        #: calls made to ``send`` so far (one per batch)
        self.calls = 0

    async def submit(self, key: K, item: I) -> R:
        """Add ``item`` to the open batch of ``key`` and wait for its result."""
        return await self.submit_nowait(key, item, log_errors=False)

    def submit_nowait(self, key: K, item: I, *, log_errors: bool = True) -> asyncio.Future[R]:
        """Add ``item`` and return the future of its result without waiting for it.

        :param log_errors: log a failed call (at warning) for a caller that will not look
            at the future.
        """
        loop = asyncio.get_running_loop()
        weight = self._size(item)
        batch = self._open.get(key)
        if batch is not None and self._max_size is not None and batch.items \
                and batch.size + weight > self._max_size:
            self._flush(key, batch)
            batch = None
        if batch is None:
            batch = self._open[key] = _Batch()
            if self._delay_s > 0:
                batch.timer = loop.call_later(self._delay_s, self._flush, key, batch)
            else:
                batch.timer = loop.call_soon(self._flush, key, batch)
        future: asyncio.Future[R] = loop.create_future()
        if log_errors:
            future.add_done_callback(_retrieve)
            batch.unwatched = True
        batch.items.append(item)
        batch.futures.append(future)
        batch.size += weight
        if self._max_size is not None and batch.size >= self._max_size:
            self._flush(key, batch)
        return future

    @property
    def pending(self) -> int:
        """Items submitted and not answered yet (open batches and calls in flight)."""
        return sum(len(b.items) for b in self._open.values()) + len(self._sending)

    def _flush(self, key: K, batch: _Batch[I, R]) -> None:
        if self._open.get(key) is not batch:
            return  # already sent (full before its timer fired)
        del self._open[key]
        if batch.timer is not None:
            batch.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._call(key, batch),
                                                      name=f"{self._name}-send")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _call(self, key: K, batch: _Batch[I, R]) -> None:
        self.calls += 1
        try:
            results = await self._send(key, batch.items)
            if len(results) != len(batch.items):
                raise RuntimeError(f"{self._name}: {len(results)} results for "
                                   f"{len(batch.items)} items")
        except BaseException as err:  # every submitter sees it, cancellation included
            for future in batch.futures:
                if not future.done():
                    future.set_exception(err)
            if not isinstance(err, Exception):
                raise
            if batch.unwatched:
                log.warning("%s: a batched call of %d item(s) failed: %s: %s", self._name,
                            len(batch.items), type(err).__name__, err)
            return
        for future, result in zip(batch.futures, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def aclose(self) -> None:
        """Send the open batches now and wait for every call in flight."""
        for key, batch in list(self._open.items()):
            self._flush(key, batch)
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a fire-and-forget future's exception as seen (the batch logged it once)."""
    if not future.cancelled():
        future.exception()
