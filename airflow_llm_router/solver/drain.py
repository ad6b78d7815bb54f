"""Drain the task store from the triggerer, keeping up to ``max_in_flight`` prompts going.

A chunked drain (claim N, solve all N, write, claim again) idles while each chunk's slowest
prompt finishes: with latencies from 1 s to 2 min, most of a chunk's time is its tail. Here
a new task is claimed as soon as a prompt finishes, answers are written as they come (fenced
by claim token, in small batches), and the claims of prompts still in progress are extended,
so the claim TTL can stay short and a crashed triggerer's tasks come back quickly.

The store calls themselves (one at a time in a worker thread, riding out a store outage for
``store_outage_s``), the claims held and the answers not yet written are a
:class:`~airflow_llm_router.solver.store_calls.StoreCalls` the drain holds; this module
decides when to claim, wait, write and extend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from airflow_llm_router.engine.types import as_on_budget, as_priority
from airflow_llm_router.llm_call import call_options
from airflow_llm_router.names import DEFAULT_KIND
from airflow_llm_router.solver.inflight import InFlight
from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.runner import Solver
from airflow_llm_router.solver.settings import DrainSettings
from airflow_llm_router.solver.store_calls import DrainState, StoreCalls
from airflow_llm_router.solver.upkeep import BACKLOG_REPORT_CAP, report_backlog, stop_helpers
from airflow_llm_router.store import ClaimedTask, TaskStore
from airflow_llm_router.store.watch import BacklogWatch

__all__ = ["DrainState", "drain_store"]

log = logging.getLogger(__name__)

#: How often a drain waiting on others' live claims looks whether they are finished.
OTHERS_RECHECK_S = 1.0

#: The backlog watch's connection broke or could not be made (a store outage).
WATCH_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


def chunk_items(claimed: list[ClaimedTask]) -> list[SolveItem]:
    """Solver items for claimed tasks. The request id carries the claim token (and the
    solver adds its run's mark): an answer is written only under the claim it was made
    for."""
    return [
        SolveItem(key=str(t.id), prompt=t.prompt, request_id=f"task-{t.id}:{t.claim_token}",
                  models=t.allowed_models, ordered=True, priority=as_priority(t.priority),
                  kind=None if t.kind == DEFAULT_KIND else t.kind,
                  on_budget=as_on_budget(t.on_budget),
                  max_output_tokens=_cap(options), options=options)
        for t, options in ((t, call_options(t.metadata)) for t in claimed)
    ]


def _cap(options: dict[str, Any] | None) -> int | None:
    """A task's own output cap (``metadata.llm_call.max_output_tokens``), if it sets one."""
    cap = (options or {}).get("max_output_tokens")
    return cap if isinstance(cap, int) else None


@dataclass
class _Draining:
    store: TaskStore
    settings: DrainSettings
    worker_id: str
    deadline: float
    state: DrainState
    earlier_workers: tuple[str, ...] = ()
    watch: BacklogWatch | None = None
    waiting_for_others: bool = False
    until_empty: bool = False
    io: StoreCalls = field(init=False)

    def __post_init__(self) -> None:
        self.io = StoreCalls(self.store, self.settings, self.deadline, self.state)

    async def adopt(self, solver: Solver) -> list[asyncio.Task[SolveResult]]:
        """Take back this worker's own live claims (left by an earlier run of the same
        trigger that a triggerer restarted), and those of ``earlier_workers`` (earlier tries
        of the same task, ended by a crash), and solve them first, so nothing waits for
        their claims to expire. Their calls are admitted afresh: the dead run may have sent
        them, and its leases count until they expire."""
        adopted = await self.io.adopt((self.worker_id, *self.earlier_workers))
        if adopted:
            self.state.adopted += len(adopted)
            solver.progress.total += len(adopted)
            log.warning("took back %d claim(s) of %s left by an earlier run of this task",
                        len(adopted), self.worker_id)
        return [asyncio.create_task(solver.solve(item)) for item in chunk_items(adopted)]

    async def start(self, solver: Solver, n: int) -> list[asyncio.Task[SolveResult]]:
        """Claim up to ``n`` tasks and start solving each."""
        claimed = await self.io.claim(n, self.worker_id)
        if claimed:
            self.state.chunks += 1
            solver.progress.total += len(claimed)
        return [asyncio.create_task(solver.solve(item))
                for item in chunk_items(claimed)]

    async def idle(self) -> bool:
        """Nothing in progress: whether to claim again (tasks remain, arrived while
        lingering, or came back from a dead worker's claims) or stop (deadline passed;
        backlog empty, nobody else holding claims, and nothing arrived; or, with
        ``until_empty``, backlog empty)."""
        if time.time() >= self.deadline:
            return False
        backlog = await self.io.look(None, self.store.backlog_size, cap=1)
        if backlog is None:  # the deadline passed during a store outage
            return False
        if backlog == 0:
            if self.until_empty:
                return False
            others = await self.io.look(None, self.store.claims_in_progress)
            if others is None:
                return False
            if others.count:
                return await self.wait_for_others(others.count, others.next_expiry_s)
            return await self.linger()
        await asyncio.sleep(0.05)  # tasks remain: rows briefly locked by another claimer
        return True

    async def wait_for_others(self, count: int, next_expiry_s: float | None) -> bool:
        """The backlog is empty but ``count`` tasks are claimed by others: they may finish
        them, or may have died (a crashed triggerer's claims stay live until they expire).
        Not done yet: wait until the next claim expires (when the store returns it and
        announces it) or a task arrives, then look again. False past the deadline."""
        left = self.deadline - time.time()
        if left <= 0:
            return False
        if not self.waiting_for_others:
            log.info("backlog empty, %d tasks claimed by others: waiting for them (next "
                     "claim expires in %.1f s)", count, next_expiry_s or 0.0)
            self.waiting_for_others = True
        # look again at the next expiry, an arrival, or within a second: claims finished
        # by their workers announce nothing, and then this drain is done
        await self.watching(lambda watch: watch.arrival(
            min(left, OTHERS_RECHECK_S, max(0.05, next_expiry_s or 0.0) + 0.05)))
        return True

    async def watching(self, wait: Callable[[BacklogWatch], Awaitable[object]]) -> bool:
        """``wait(watch)`` on the backlog watch (opened if need be). If the watch's
        connection is lost (a store outage), it is dropped and this waits, through the
        store's outage path, until the store answers again; then True (look again: the next
        look opens a new watch and re-reads the backlog, so nothing enqueued meanwhile is
        missed).

        :raises TaskStoreUnavailable: the store stayed away past ``store_outage_s``."""
        try:
            await self.open_watch()
            assert self.watch is not None
            return bool(await wait(self.watch))
        except WATCH_LOST as err:
            log.warning("the backlog watch lost its connection (%s); waiting for the task "
                        "store", type(err).__name__)
            with contextlib.suppress(*WATCH_LOST):
                await self.close()
            self.watch = None
            await self.io.look(None, self.store.backlog_size, cap=1)
            return True

    async def open_watch(self) -> None:
        """LISTEN on the store's channel from now on (the backlog is re-read after)."""
        if self.watch is None:
            self.watch = await self.store.watch().__aenter__()

    async def linger(self) -> bool:
        """With the backlog empty: wait up to ``linger_s`` (within the deadline) for new
        tasks, woken by the store's notifications; True if some arrived."""
        until = time.monotonic() + min(self.settings.linger_s,
                                       self.deadline - time.time())
        if until <= time.monotonic():
            return False

        async def wait(watch: BacklogWatch) -> bool:  # the watch LISTENs, then re-reads
            while True:
                if await watch.backlog(cap=1):
                    return True
                left = until - time.monotonic()
                if left <= 0:
                    return False
                await watch.arrival(left)

        return await self.watching(wait)

    async def close(self) -> None:
        if self.watch is not None:
            await self.watch.__aexit__(None, None, None)
            self.watch = None


def _collect(done: Sequence[asyncio.Task[SolveResult]],
             results: list[SolveResult]) -> BaseException | None:
    """Add the results of finished prompts; the first error of a prompt that failed (one
    that raised, not one that ended ``failed``) is returned, after the others' results."""
    failure: BaseException | None = None
    for task in done:
        err = task.exception()
        if err is None:
            results.append(task.result())
        elif failure is None:
            failure = err
    return failure


async def _fill(d: _Draining, solver: Solver, active: InFlight[SolveResult], refill: int,
                claimed: asyncio.Event) -> bool:
    """Claim batch after batch (``claim_batch`` each) while at least ``refill`` slots are
    open, the deadline is ahead and each claim comes back full; False once one comes back
    short (the backlog is empty for now). The tasks of one claim go to admission while the
    next is claimed, so a lead holding hundreds of calls admits its first ones after a
    ``claim_batch`` claim, not after one claim of all of them."""
    settings = d.settings
    while True:
        want = min(settings.max_in_flight - len(active), settings.claim_batch)
        started = await d.start(solver, want)
        if started:
            claimed.set()  # the report the engine holds counts these twice
        active.add(started)
        if len(started) < want:
            return False
        if settings.max_in_flight - len(active) < refill or time.time() >= d.deadline:
            return True
        solver.check()


async def drain_store(store: TaskStore, solver: Solver, settings: DrainSettings,
                      worker_id: str, state: DrainState,
                      earlier_workers: Sequence[str] = (), *,
                      until_empty: bool = False) -> DrainState:
    """Claim, solve and write until the backlog is empty (and stays empty for
    ``settings.linger_s``) or the solver's deadline passes.

    :param worker_id: recorded on each claim; the live claims it already holds (an
        earlier run of the same trigger) are taken back first.
    :param earlier_workers: worker ids of earlier tries of the same task, whose live claims
        are taken back too (a try that crashed could not hand them back).
    :param until_empty: end once nothing is in progress and the backlog is empty, without
        waiting for others' claims or lingering (a drain that hands over to another)."""
    d = _Draining(store, settings, worker_id, solver.deadline, state, tuple(earlier_workers),
                  until_empty=until_empty)
    active: InFlight[SolveResult] = InFlight()
    quiet_until = 0.0  # after a claim came back short, don't ask again for a second
    last_flush = last_extend = time.monotonic()
    refill = max(1, min(10, settings.max_in_flight // 10, settings.claim_batch))
    stop_reporting, claimed = asyncio.Event(), asyncio.Event()
    reporter = asyncio.create_task(
        report_backlog(solver.router, f"{store.schema}.{store.table}",
                       lambda: d.io.call(store.backlog_size, cap=BACKLOG_REPORT_CAP),
                       stop_reporting, claimed),
        name="llm-router-backlog")
    solver.watch_helper(reporter)
    try:
        active.add(await d.adopt(solver))
        while True:
            open_slots = settings.max_in_flight - len(active)
            may_claim = time.time() < d.deadline and time.monotonic() >= quiet_until
            if may_claim and (open_slots >= refill or not active) \
                    and not await _fill(d, solver, active, refill, claimed):
                quiet_until = time.monotonic() + 1.0
            solver.check()
            if not active:
                if not await d.idle():
                    break
                quiet_until = 0.0  # claim again at once
                continue
            done = await active.wait(settings.flush_every_s)
            failure = _collect(done, d.io.results)
            if failure is not None:  # write what was answered, then end loudly
                await d.io.flush()
                raise failure
            solver.check()
            now = time.monotonic()
            if now - last_flush >= settings.flush_every_s or not active:
                await d.io.flush()
                last_flush = now
            if now - last_extend >= settings.claim_ttl_s / 3:
                await d.io.extend()
                last_extend = now
    finally:
        stop_reporting.set()
        for task in active:
            task.cancel()
        await asyncio.gather(*active, return_exceptions=True)
        await stop_helpers([reporter])
        await d.close()
        await d.io.flush()
        await d.io.release_rest()  # cut short: give the rest back at once, not at expiry
    return state
