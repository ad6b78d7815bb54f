"""Admission for many waiting prompts of one caller, one script call per wake-up.

A trigger holds hundreds of prompts waiting for capacity. If each waited on its own, every
release would wake them all and cost one round trip each. Here they queue in one
:class:`BatchAdmitter`; a single loop asks for all of them with ``admit_many`` (in queue
order, so the caller's own priorities hold), hands out admissions, and sleeps until the next
release, a new arrival, or the soonest computed wait.

Which model each prompt goes to is the engine's choice (``engine/lua/admit.lua``: the model
where it would likely finish soonest), made in one place for every caller.

Why a standing queue and not :class:`~airflow_llm_router.coalesce.Coalescer` (which merges
one-shot calls): a waiting request is decided again and again until admitted, and each
round must carry every waiter in queue order and sleep on the earliest of their
waits or a release. The coalescer answers each submission once; here the queue outlives
rounds, which is the whole point, so the loop is written out once, here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass

from airflow_llm_router import metrics
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.engine.encoding import Completion, encode_request
from airflow_llm_router.engine.releases import RELEASE_HELPS
from airflow_llm_router.engine.types import Admission, AdmitRequest, Rejection, Wait
from airflow_llm_router.exceptions import ImpossibleRequestError
from airflow_llm_router.solver.outage import RedisOutage

__all__ = ["BatchAdmitter"]

log = logging.getLogger(__name__)

#: How long closing an admitter waits for its withdrawals and settlements.
CHORES_S = 5.0


@dataclass
class _Pending:
    request: AdmitRequest
    future: asyncio.Future[Admission | None]
    deadline: float


class BatchAdmitter:
    """Queue admissions of one caller and decide them together.

    Use as ``async with BatchAdmitter(client) as admitter: lease = await admitter.admit(r, t)``.
    """

    def __init__(self, client: AsyncRouterClient, outage: RedisOutage | None = None) -> None:
        self._client = client
        self._outage = outage or RedisOutage(0.0)
        self._pending: dict[str, _Pending] = {}
        self._task: asyncio.Task[None] | None = None
        #: withdrawals and settlements for callers that stopped waiting (see :meth:`admit`)
        self._chores: set[asyncio.Task[None]] = set()
        self.round_trips = 0

    async def __aenter__(self) -> BatchAdmitter:
        await self._client.releases.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._pending:
            try:
                await self._client.cancel(list(self._pending))
            except Exception as err:  # the waiters drop out by themselves at their deadline
                log.warning("could not withdraw %d waiting requests: %s: %s",
                            len(self._pending), type(err).__name__, err)
            for p in self._pending.values():
                if not p.future.done():
                    p.future.set_result(None)
            self._pending.clear()
        if self._chores:
            await asyncio.wait(list(self._chores), timeout=CHORES_S)

    async def admit(self, request: AdmitRequest, timeout_s: float) -> Admission | None:
        """Wait for ``request``'s admission; None after ``timeout_s``.

        :raises ImpossibleRequestError: no allowed model could ever admit it, or the request
            itself is invalid (a bad model name, say): it fails alone, never the queue.
        """
        try:
            encode_request(request)
        except ValueError as err:
            raise ImpossibleRequestError("invalid_request", str(err)) from err
        loop = asyncio.get_running_loop()
        pending = _Pending(request, loop.create_future(), loop.time() + timeout_s)
        self._pending[request.request_id] = pending
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="llm-router-admitter")
        else:
            self._client.releases.poke()
        try:
            return await pending.future
        except asyncio.CancelledError:
            self._given_up(pending)
            raise
        finally:
            self._pending.pop(request.request_id, None)

    def _given_up(self, p: _Pending) -> None:
        """The caller of ``p`` stopped waiting (it was cancelled: a hedge no longer
        needed, a drain ending). A lease it was given meanwhile is settled ``abandoned``
        (never called: its slot frees now, not at its expiry); otherwise it is withdrawn
        from the engine's waiters, where it would hold capacity back for nobody until its
        deadline. A round already under way that admits it settles that lease too."""
        got = p.future
        lease = (got.result() if got.done() and not got.cancelled() and got.exception() is None
                 else None)
        if lease is not None:
            self._abandon(lease)
        else:
            self._chore(self._client.cancel([p.request.request_id]), "withdraw a request")

    def _abandon(self, lease: Admission) -> None:
        self._chore(self._client.complete_many([Completion(lease.lease_id,
                                                           outcome="abandoned")]),
                    f"settle lease {lease.lease_id}")

    def _chore(self, work: Awaitable[object], what: str) -> None:
        """Run ``work`` in the background; an error is logged, never raised (the engine
        drops a waiter at its deadline and a lease at its expiry anyway)."""
        async def run() -> None:
            try:
                await work
            except Exception as err:
                log.warning("could not %s: %s: %s", what, type(err).__name__, err)

        task = asyncio.create_task(run(), name="llm-router-admitter-chore")
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    @property
    def waiting(self) -> int:
        """Requests waiting for admission."""
        return len(self._pending)

    async def _expire(self, expired: list[_Pending]) -> None:
        """Withdraw requests past their deadline from the engine's waiters, then give
        their callers None. In that order: a caller told None may end the solve and close
        this admitter at once, which would cut a withdrawal still under way, and the
        engine would hold capacity back for those waiters until their own deadline."""
        try:
            await self._outage.call(self._client.cancel,
                                    [p.request.request_id for p in expired], what="cancel")
        except Exception as err:  # they drop out of the engine's waiters at their deadline
            log.warning("could not withdraw %d expired requests: %s: %s",
                        len(expired), type(err).__name__, err)
        for p in expired:
            if not p.future.done():
                p.future.set_result(None)

    async def _run(self) -> None:
        """The admission loop. It never dies silently: should a round fail past the Redis
        outage budget (or with an unexpected error), every waiting caller gets the error."""
        try:
            await self._rounds()
        except Exception as err:
            log.exception("the admission loop failed; %d waiting prompts get the error",
                          len(self._pending))
            for p in list(self._pending.values()):
                if not p.future.done():
                    p.future.set_exception(err)
            raise

    async def _rounds(self) -> None:
        loop = asyncio.get_running_loop()
        releases = self._client.releases
        while self._pending:
            seen = releases.mark()
            batch = list(self._pending.values())
            sent = [p.request for p in batch]
            decisions = await self._outage.call(self._client.admit_many, sent,
                                                what="admission")
            self.round_trips += 1
            soonest = float("inf")
            on_release = False  # whether a release could end one of the waits
            expired: list[_Pending] = []
            waits: Counter[str] = Counter()  # by reason, counted once per round
            now = loop.time()
            for p, decision in zip(batch, decisions, strict=True):
                if p.future.cancelled() and isinstance(decision, Admission):
                    self._abandon(decision)  # its caller gave up while this round ran
                if p.future.done():
                    continue
                if isinstance(decision, Admission):
                    p.future.set_result(decision)
                elif isinstance(decision, Rejection):
                    p.future.set_exception(
                        ImpossibleRequestError(decision.reason, decision.message()))
                elif p.deadline <= now:
                    expired.append(p)
                else:
                    assert isinstance(decision, Wait)
                    waits[decision.reason] += 1
                    soonest = min(soonest, decision.retry_after_ms / 1000, p.deadline - now)
                    on_release = on_release or decision.reason in RELEASE_HELPS
            for reason, count in waits.items():
                metrics.waited(reason, count)
            if expired:
                await self._expire(expired)
            # let the coroutines that were answered leave the queue before looking again
            await asyncio.sleep(0)
            if self._pending and soonest != float("inf"):
                await releases.wait(seen, soonest, releases=on_release)
