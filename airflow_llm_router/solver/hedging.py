"""Hedging a late call: when to send a prompt's second call, and which answer to keep.

A backlog ends with its slowest call. Model latencies are heavy-tailed (a log-normal
spread, and stragglers several times the median), so of the hundreds of calls sent as a
backlog runs out, some straggle, and the last of them ends the run, seconds after every
other answer, while the models' capacity sits idle. The engine tells each admission when
a call on its model is late (``Admission.late_after_s``, about the 95th percentile of the
model's learned latency). A call admitted before anything was known of its model's latency
(early in a backlog every model is cold, and the first calls on the slow models are the
ones that straggle) learns its late point once the model has one (:class:`LatePoints`).
A solver with nothing left waiting for admission sends such a
call's prompt to another allowed model as well (admitted like any call: within every
target and budget) and keeps the first answer. The other call runs on to its end, its
answer dropped and its lease settled as any call's: the provider counts it in flight until
it ends, so freeing its slot sooner would let the next call over its concurrency (seen:
a 429 for 33 calls in flight on a model of 32, when the loser was cancelled and its
lease released at once). A hedge still waiting for admission is withdrawn. The cost: one
call more, paid for, for the few prompts that run late at the end.

Whether the solver is idle is the solver's to say
(:meth:`~airflow_llm_router.solver.runner.Solver._call_or_hedge`); here are the two waits
and the models a hedge may go to (:class:`HedgeTargets`).
The solver's deadline for new calls does not end hedging: a solver that stops claiming
(a drain's start in the worker, handing over to its trigger) waits for its calls in
flight, and a straggler among them is rescued until the task's own deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from airflow_llm_router.backend import CallResult
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.solver.outage import REDIS_DOWN

__all__ = ["LATE_READ_S", "MODEL_NAMES_TTL_S", "RECHECK_S", "HedgeTargets", "LatePoints",
           "first_answer", "late_and_idle"]

#: How often a late call whose solver is busy looks again whether it may be hedged.
RECHECK_S = 0.25
#: How long a solver keeps the list of models a hedge of an any-model prompt may go to.
MODEL_NAMES_TTL_S = 10.0
#: How often a solver reads a model's late point from the engine, for its calls admitted
#: before one was known (per model, and only while one of them may be hedged).
LATE_READ_S = 1.0

T = TypeVar("T")


async def late_and_idle(call: asyncio.Task[T], late_s: float | None,
                        learn: Callable[[], Awaitable[float | None]],
                        may_hedge: Callable[[], bool]) -> bool:
    """Wait for ``call`` until it is late (``late_s`` from now); then True as soon as
    ``may_hedge()`` holds while it still runs (looked at every :data:`RECHECK_S`), False
    once it ended. With ``late_s`` None (nothing was known of the model's latency when the
    call was admitted) ``learn()`` is asked for it, every :data:`RECHECK_S` while
    ``may_hedge()`` holds, until it says (the late point counts from now, as the call
    started then)."""
    start = time.monotonic()
    done, _ = await asyncio.wait({call}, timeout=RECHECK_S if late_s is None else late_s)
    while not done:
        if late_s is None and may_hedge():
            late_s = await learn()
        wait = RECHECK_S
        if late_s is not None:
            left = start + late_s - time.monotonic()
            if left <= 0 and not call.done() and may_hedge():
                return True
            wait = max(wait, left)
        done, _ = await asyncio.wait({call}, timeout=wait)
    return False


class LatePoints:
    """The late point of each model as the engine last gave it to this solver: the newest
    an admission on it returned (no extra call), else, for a call admitted while nothing
    was known of its model's latency, read from the engine (``late_after_s``, the figure
    its admissions return) at most every :data:`LATE_READ_S` per model. The engine's Lua
    makes the figure; this only keeps it."""

    def __init__(self, router: AsyncRouterClient) -> None:
        self._router = router
        self._late: dict[str, float] = {}
        self._read_at: dict[str, float] = {}

    def note(self, model: str, late_s: float | None) -> None:
        """An admission on ``model`` said its calls are late after ``late_s`` (None:
        unknown, which forgets nothing)."""
        if late_s is not None:
            self._late[model] = late_s

    async def learn(self, model: str) -> float | None:
        """``model``'s late point (s), or None while nothing is known of its latency (or
        Redis is down, or it was read less than :data:`LATE_READ_S` ago)."""
        known = self._late.get(model)
        if known is not None:
            return known
        now = time.monotonic()
        if now - self._read_at.get(model, -float("inf")) < LATE_READ_S:
            return None
        self._read_at[model] = now
        try:
            late = await self._router.late_after_s(model)
        except REDIS_DOWN:
            return None
        self.note(model, late)
        return self._late.get(model)


async def first_answer(
    first: asyncio.Task[CallResult],
    second: asyncio.Task[tuple[CallResult, str] | None],
    calling: Callable[[], bool],
) -> tuple[CallResult, str | None] | None:
    """The first answer (status ``ok``) of the late call ``first`` and its hedge
    ``second`` (with the hedge's model; None for ``first``'s). A call that ends without
    an answer (an error, a 429, a hedge never admitted) leaves the other to finish; None
    if neither answers (``first``'s result then says why). The hedge is cancelled while
    it only waits for admission (``calling()`` false: withdrawn, nothing sent); a call
    already made is left running, as the provider counts it until it ends (the caller
    keeps it). Cancelled, it cancels both."""
    pending: set[asyncio.Task[object]] = {first, second}
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if first in done and first.result().status == "ok":
                if not second.done() and not calling():
                    second.cancel()
                return first.result(), None
            if second in done:
                got = second.result()
                if got is not None and got[0].status == "ok":
                    return got
        return None
    except asyncio.CancelledError:
        for task in (first, second):
            task.cancel()
        raise


class HedgeTargets:
    """The models a hedge may go to: those its prompt allows but the late call's model;
    for a prompt that allows any, every model's name, read from the router when needed
    and kept :data:`MODEL_NAMES_TTL_S`."""

    def __init__(self, router: AsyncRouterClient) -> None:
        self._router = router
        self._names: tuple[float, tuple[str, ...]] = (-float("inf"), ())

    async def others(self, allowed: tuple[str, ...] | None, model: str) -> tuple[str, ...]:
        """The models but ``model`` of ``allowed`` (None: any); none while Redis is down."""
        if allowed is not None:
            return tuple(m for m in allowed if m != model)
        read_at, names = self._names
        if time.monotonic() - read_at > MODEL_NAMES_TTL_S:
            try:
                names = tuple(sorted(await self._router.get_quotas()))
            except REDIS_DOWN:
                return ()
            self._names = (time.monotonic(), names)
        return tuple(m for m in names if m != model)
