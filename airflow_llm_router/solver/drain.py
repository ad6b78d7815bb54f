"""Drain the task store from the triggerer, keeping up to ``max_in_flight`` prompts going.

A chunked drain (claim N, solve all N, write, claim again) idles while each chunk's slowest
prompt finishes: with latencies from 1 s to 2 min, most of a chunk's time is its tail. Here
a new task is claimed as soon as a prompt finishes, answers are written as they come (fenced
by claim token, in small batches), and the claims of prompts still in progress are extended,
so the claim TTL can stay short and a crashed triggerer's tasks come back quickly.

The store is synchronous (psycopg); its calls run in a worker thread, one at a time. They
ride out a store outage (a PostgreSQL restart or failover) for ``store_outage_s``: retried
with backoff, answers kept buffered meanwhile, then the drain goes on (see
:mod:`airflow_llm_router.solver.outage`).

At about 440 lines the module is over the house's 350, for now: the loop that claims as
prompts finish, the answer buffer, the claim extensions and the store-outage wrapper around
each store call share the drain's buffer and outage budget on every step. The next cut is
the store-call wrapper with its buffer, as a small object the drain holds; it was left for
a change of its own, with the fault tests run before and after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from airflow_llm_router.engine.types import as_on_budget, as_priority
from airflow_llm_router.exceptions import TaskStoreUnavailable
from airflow_llm_router.llm_call import call_options
from airflow_llm_router.names import DEFAULT_KIND
from airflow_llm_router.solver.inflight import InFlight
from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.outage import StoreOutage
from airflow_llm_router.solver.runner import Solver
from airflow_llm_router.solver.settings import DrainSettings
from airflow_llm_router.solver.upkeep import BACKLOG_REPORT_CAP, report_backlog, stop_helpers
from airflow_llm_router.store import ClaimedTask, TaskFailure, TaskResult, TaskStore
from airflow_llm_router.store.watch import BacklogWatch

__all__ = ["DrainState", "drain_store"]

log = logging.getLogger(__name__)

#: How often a drain waiting on others' live claims looks whether they are finished.
OTHERS_RECHECK_S = 1.0

#: The backlog watch's connection broke or could not be made (a store outage).
WATCH_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


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
class _Draining:
    store: TaskStore
    settings: DrainSettings
    worker_id: str
    deadline: float
    state: DrainState
    earlier_workers: tuple[str, ...] = ()
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    claims: dict[int, str] = field(default_factory=dict)
    results: list[SolveResult] = field(default_factory=list)
    watch: BacklogWatch | None = None
    waiting_for_others: bool = False
    until_empty: bool = False
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

    async def claim(self, n: int) -> list[Any]:
        def take() -> list[Any]:  # records the claims even if the drain is being cancelled
            claimed = self.store.claim(n, worker_id=self.worker_id,
                                       claim_ttl_s=self.settings.claim_ttl_s)
            self.claims.update({t.id: t.claim_token for t in claimed})
            return claimed

        return list(await self.call(take))

    async def adopt(self, solver: Solver) -> list[asyncio.Task[SolveResult]]:
        """Take back this worker's own live claims (left by an earlier run of the same
        trigger that a triggerer restarted), and those of ``earlier_workers`` (earlier tries
        of the same task, ended by a crash), and solve them first, so nothing waits for
        their claims to expire. Their calls are admitted afresh: the dead run may have sent
        them, and its leases count until they expire."""
        def take() -> list[Any]:
            adopted = []
            for worker in (self.worker_id, *self.earlier_workers):
                adopted += self.store.adopt(worker_id=worker,
                                            claim_ttl_s=self.settings.claim_ttl_s)
            self.claims.update({t.id: t.claim_token for t in adopted})
            return adopted

        adopted = list(await self.call(take))
        if adopted:
            self.state.adopted += len(adopted)
            solver.progress.total += len(adopted)
            log.warning("took back %d claim(s) of %s left by an earlier run of this task",
                        len(adopted), self.worker_id)
        return [asyncio.create_task(solver.solve(item)) for item in chunk_items(adopted)]

    async def start(self, solver: Solver, n: int) -> list[asyncio.Task[SolveResult]]:
        """Claim up to ``n`` tasks and start solving each."""
        claimed = await self.claim(n)
        if claimed:
            self.state.chunks += 1
            solver.progress.total += len(claimed)
        return [asyncio.create_task(solver.solve(item))
                for item in chunk_items(claimed)]

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

    async def idle(self) -> bool:
        """Nothing in progress: whether to claim again (tasks remain, arrived while
        lingering, or came back from a dead worker's claims) or stop (deadline passed;
        backlog empty, nobody else holding claims, and nothing arrived; or, with
        ``until_empty``, backlog empty)."""
        if time.time() >= self.deadline:
            return False
        if await self.call(self.store.backlog_size, cap=1) == 0:
            if self.until_empty:
                return False
            others = await self.call(self.store.claims_in_progress)
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
            await self.call(self.store.backlog_size, cap=1)
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

    async def extend(self) -> None:
        if self.claims:
            await self.call(self.store.extend_claims, dict(self.claims),
                            claim_ttl_s=self.settings.claim_ttl_s, past_deadline=True)


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
                       lambda: d.call(store.backlog_size, cap=BACKLOG_REPORT_CAP),
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
            failure = _collect(done, d.results)
            if failure is not None:  # write what was answered, then end loudly
                await d.flush()
                raise failure
            solver.check()
            now = time.monotonic()
            if now - last_flush >= settings.flush_every_s or not active:
                await d.flush()
                last_flush = now
            if now - last_extend >= settings.claim_ttl_s / 3:
                await d.extend()
                last_extend = now
    finally:
        stop_reporting.set()
        for task in active:
            task.cancel()
        await asyncio.gather(*active, return_exceptions=True)
        await stop_helpers([reporter])
        await d.close()
        await d.flush()
        if d.claims:  # cut short: give the rest back at once rather than at claim expiry
            released = await d.call(store.release_many, dict(d.claims), past_deadline=True)
            state.released += sum(released.values())
    return state
