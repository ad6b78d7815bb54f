"""Merge the list operations that coroutines start in one event-loop turn into one script
call per operation, on the package's coalescing primitive (:mod:`airflow_llm_router.coalesce`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from airflow_llm_router.coalesce import Coalescer
from airflow_llm_router.engine.core import ADMIT_CHUNK
from airflow_llm_router.engine.steps import Script

__all__ = ["ScriptMerger"]


class ScriptMerger:
    """Merge the list operations (admit, complete, heartbeat, sent) that coroutines start in
    one event-loop turn into one script call per operation (up to ``MERGE_LIMIT`` items),
    and split the reply.

    Sixteen coroutines each admitting one prompt then cost Redis about what one call of
    sixteen does: most of a call's cost on the Redis thread is fixed, not per item.

    :param run: runs one script call and returns its reply (one entry per item).
    """

    MERGE_LIMIT = ADMIT_CHUNK  # the same bound on one call's time on the Redis thread

    def __init__(self, run: Callable[[Script], Awaitable[Any]]) -> None:
        self._run = run
        self._merged: Coalescer[str, Script, list[Any]] = Coalescer(
            self._send, max_size=self.MERGE_LIMIT, size=lambda a: len(a.items or ()),
            name="llm-router-scripts")

    async def call(self, action: Script) -> list[Any]:
        """Run ``action`` merged with the same operation's other calls of this loop turn;
        its own slice of the reply."""
        return await self._merged.submit(action.op, action)

    async def _send(self, op: str, actions: list[Script]) -> list[list[Any]]:
        items = tuple(item for action in actions for item in action.items or ())
        models = tuple(dict.fromkeys(m for action in actions for m in action.models))
        reply = await self._run(Script(op, items=items, models=models))
        # what a reply adds after its items' entries (admit: the head of the any-model
        # order, core.py) goes to every caller
        extra = list(reply[len(items):])
        out, start = [], 0
        for action in actions:
            n = len(action.items or ())
            out.append(list(reply[start:start + n]) + extra)
            start += n
        return out
