"""The drain's side of the task store: each store call, the claims held, the answer buffer.

The store is synchronous (psycopg); its calls run in a worker thread, one at a time. They
ride out a store outage (a PostgreSQL restart or failover) for ``store_outage_s``: retried
with backoff, answers kept buffered meanwhile, then the drain goes on (see
:mod:`airflow_llm_router.solver.outage`). The claims held and the answers not yet written
live here with the calls because an outage past its budget must say how many of each it
leaves behind, and because a claim is recorded by the very call that takes it (even if the
drain is being cancelled), so the drain's clean-up can hand every one back.
:mod:`airflow_llm_router.solver.drain` decides when to claim, write and extend.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_llm_router.exceptions import TaskStoreUnavailable
from airflow_llm_router.solver.items import SolveResult
from airflow_llm_router.solver.outage import StoreOutage
from airflow_llm_router.solver.settings import DrainSettings
from airflow_llm_router.store import ClaimedTask, TaskFailure, TaskResult, TaskStore

__all__ = ["DrainState", "StoreCalls", "write_results"]

log = logging.getLogger(__name__)


@dataclass
class DrainState:
    """A drain's totals, reported in the trigger's event as its summary."""

    started: float
    chunks: int = 0
    solved: int = 0
    failed: int = 0
    dead: int = 0
    released: int = 0
    stale: int = 0
    adopted: int = 0
    hedged: int = 0

    def add(self, counts: dict[str, int]) -> None:
        for name, n in counts.items():
            setattr(self, name, getattr(self, name) + n)

    def summary(self) -> dict[str, Any]:
        return {"solved": self.solved, "failed": self.failed, "dead": self.dead,
                "released": self.released, "stale": self.stale, "chunks": self.chunks,
                "adopted": self.adopted, "hedged": self.hedged,
                "elapsed_s": round(time.time() - self.started, 3)}


def write_results(store: TaskStore, tokens: dict[int, str],
                  results: list[SolveResult]) -> dict[str, int]:
    """Write results, each fenced by its claim token, in three statements; returns counts
    of ``solved``, ``failed``, ``dead``, ``released``, ``stale`` (writes refused) and
    ``hedged`` (results whose prompt had a late call hedged)."""
    solved = [TaskResult(int(r.key), tokens[int(r.key)], r.answer or "", r.model or "",
                         r.input_tokens, r.output_tokens)
              for r in results if r.status == "solved"]
    failed = [TaskFailure(int(r.key), tokens[int(r.key)], r.error or "failed", r.retryable,
                          r.model)
              for r in results if r.status == "failed"]
    unfinished = {int(r.key): tokens[int(r.key)] for r in results if r.status == "unfinished"}
    written = store.complete_many(solved) if solved else {}
    statuses = store.fail_many(failed) if failed else {}
    released = store.release_many(unfinished) if unfinished else {}
    stale = (len(written) - sum(written.values())
             + sum(1 for s in statuses.values() if s is None)
             + len(released) - sum(released.values()))
    if stale:
        log.warning("%d results were refused: their claims had expired and were re-claimed",
                    stale)
    return {"solved": sum(written.values()),
            "failed": sum(1 for s in statuses.values() if s is not None),
            "dead": sum(1 for s in statuses.values() if s == "dead"),
            "released": sum(released.values()), "stale": stale,
            "hedged": sum(r.hedged for r in results)}


@dataclass
class StoreCalls:
    """One drain's store calls, one at a time, with the claims it holds and the answers it
    has not written yet."""

    store: TaskStore
    settings: DrainSettings
    deadline: float
    state: DrainState
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    claims: dict[int, str] = field(default_factory=dict)
    results: list[SolveResult] = field(default_factory=list)
    outage: StoreOutage = field(init=False)

    def __post_init__(self) -> None:
        self.outage = StoreOutage(self.settings.store_outage_s, deadline=self.deadline)

    async def call(self, fn: Any, *args: Any, past_deadline: bool = False,
                   **kwargs: Any) -> Any:
        """Run a store call in a thread, one at a time, retried through a store outage
        within ``store_outage_s`` and (unless ``past_deadline``: writes that keep answers
        and claims) the deadline.

        :raises TaskStoreUnavailable: past the outage budget (or the deadline), saying how
            many answers are still buffered, unwritten.
        """
        try:
            return await self.outage.call(self._call_once,
                                          functools.partial(fn, *args, **kwargs),
                                          what=getattr(fn, "__name__", "a store call"),
                                          past_deadline=past_deadline)
        except TaskStoreUnavailable as err:
            raise TaskStoreUnavailable(
                f"{err} (the task store stayed unreachable past store_outage_s="
                f"{self.settings.store_outage_s:g} s or the drain's deadline; "
                f"{len(self.results)} answers not written, {len(self.claims)} claims held: "
                "their tasks come back when the claims expire)") from err

    async def look(self, moot: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A store call whose answer is moot once the deadline has passed (a claim, a look
        at the backlog): as :meth:`call`, but if the deadline passes during an outage it
        returns ``moot`` instead of raising, so the drain stops claiming and goes on: its
        calls in flight end and its answers are written when the store is back (within
        ``store_outage_s``, which still ends the drain loudly).

        :raises TaskStoreUnavailable: past the outage budget before the deadline."""
        try:
            return await self.call(fn, *args, **kwargs)
        except TaskStoreUnavailable as err:
            if time.time() < self.deadline:
                raise
            log.warning("the drain's deadline passed while the task store was unreachable "
                        "(%s): no more claims; the answers are written when it is back",
                        type(err.__cause__ or err).__name__)
            return moot

    async def _call_once(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a store call in a thread, one at a time. If the drain is cancelled meanwhile,
        the statement still finishes before the cancellation goes on, so the clean-up that
        follows finds the store free and its bookkeeping complete (a claim taken by then is
        handed back).

        The call runs on the executor's future, not in a task (``asyncio.to_thread``'s): a
        shutdown that cancels every task of the loop at once (``asyncio.run`` interrupted,
        as ``dag.test()``'s inline trigger is by Ctrl-C or SIGTERM) cancelled that task
        too, the drain went on without waiting, and the tasks its claim took after that
        stayed claimed until their claims expired (2 of 40 drains interrupted at random)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        async with self.lock:
            done = loop.run_in_executor(None, call)
            try:
                return await asyncio.shield(done)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await done
                raise

    async def claim(self, n: int, worker_id: str) -> list[ClaimedTask]:
        """Claim up to ``n`` tasks for ``worker_id`` (none if the deadline passed during a
        store outage: :meth:`look`)."""
        def take() -> list[ClaimedTask]:  # records the claims even if the drain is cancelled
            claimed = self.store.claim(n, worker_id=worker_id,
                                       claim_ttl_s=self.settings.claim_ttl_s)
            self.claims.update({t.id: t.claim_token for t in claimed})
            return claimed

        return list(await self.look([], take))

    async def adopt(self, workers: Sequence[str]) -> list[ClaimedTask]:
        """Take back the live claims of ``workers``."""
        def take() -> list[ClaimedTask]:
            adopted: list[ClaimedTask] = []
            for worker in workers:
                adopted += self.store.adopt(worker_id=worker,
                                            claim_ttl_s=self.settings.claim_ttl_s)
            self.claims.update({t.id: t.claim_token for t in adopted})
            return adopted

        return list(await self.call(take))

    async def flush(self) -> None:
        """Write the buffered results, one statement per status, each retried through a
        store outage even past the deadline (the answers are paid for); a result leaves
        the buffer only once written, so what an outage past its budget stops is tried
        again by the drain's last flush."""
        for status in ("solved", "failed", "unfinished"):
            part = [r for r in self.results if r.status == status]
            if not part:
                continue
            tokens = {int(r.key): self.claims[int(r.key)] for r in part}
            self.state.add(await self.call(write_results, self.store, tokens, part,
                                           past_deadline=True))
            self.results = [r for r in self.results if r.status != status]
            for task_id in tokens:
                del self.claims[task_id]

    async def extend(self) -> None:
        """Extend every claim held, so a short claim TTL outlives a long prompt."""
        if self.claims:
            await self.call(self.store.extend_claims, dict(self.claims),
                            claim_ttl_s=self.settings.claim_ttl_s, past_deadline=True)

    async def release_rest(self) -> None:
        """Give back the claims still held (a drain cut short) at once, not at expiry."""
        if self.claims:
            released = await self.call(self.store.release_many, dict(self.claims),
                                       past_deadline=True)
            self.state.released += sum(released.values())
