"""Solve a chunk of prompts concurrently under the router's admission.

For each prompt: wait for admission (batched, woken by releases), call the backend with the
admitted model, settle the lease with the actual usage and outcome, and retry what a retry
can fix — a 429 on the next admissible model (the engine cools the model down for everyone),
a 5xx or timeout after a backoff. Live leases are heartbeated together, not one task each.
A prompt's call options (``metadata.llm_call``) and the protocol's refusal of them are
checked here too, before admission, so a refused option costs no lease.

The Solver's per-prompt steps (attempts, call, hedge) share its state, so they stay in one
module; the loops that run beside them (heartbeats, progress, stopping) are in
:mod:`airflow_llm_router.solver.upkeep`, the hedge's waits and targets in
:mod:`~airflow_llm_router.solver.hedging`, batched sends in
:mod:`~airflow_llm_router.solver.sending` and settling a lease (what a call's result tells
the engine, and the fallback to a bare outcome) in :mod:`~airflow_llm_router.solver.settling`;
a solver's lifetime with those loops (``solving``) in :mod:`~airflow_llm_router.solver.session`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from dataclasses import replace
from typing import Any

from airflow_llm_router import metrics
from airflow_llm_router.backend import (
    BackendConfig,
    BackendHttp,
    CallResult,
    call_single,
)
from airflow_llm_router.backend.protocols import protocol_named
from airflow_llm_router.engine import AsyncRouterClient, Completion
from airflow_llm_router.engine.types import Admission, AdmitRequest
from airflow_llm_router.exceptions import ImpossibleRequestError
from airflow_llm_router.solver.admitter import BatchAdmitter
from airflow_llm_router.solver.hedging import (
    HedgeTargets,
    LatePoints,
    first_answer,
    late_and_idle,
)
from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.outage import RedisOutage
from airflow_llm_router.solver.sending import MicroBatcher, SendStamps
from airflow_llm_router.solver.settings import SolveSettings
from airflow_llm_router.solver.settling import outcome_of, settle, settlement
from airflow_llm_router.solver.upkeep import Progress
from airflow_llm_router.tokens import count_input_tokens

__all__ = ["Solver", "outcome_of", "settlement"]

log = logging.getLogger(__name__)


class Solver:
    """Solves prompts one by one, many at once; see :func:`~.session.solving`."""

    def __init__(self, router: AsyncRouterClient, http: BackendHttp,
                 backend: BackendConfig, settings: SolveSettings, deadline: float,
                 admitter: BatchAdmitter, progress: Progress, outage: RedisOutage,
                 hedge_deadline: float | None = None) -> None:
        self.router, self.http, self.backend = router, http, backend
        self.settings, self.deadline = settings, deadline
        #: until when a late call already in flight may be hedged (epoch s; see session.solving)
        self.hedge_deadline = max(deadline, hedge_deadline or deadline)
        self.admitter, self.progress = admitter, progress
        self.outage = outage
        #: This run's mark in every request id. A retried admission of the same run (its
        #: reply lost to a Redis hiccup) finds its lease again; a restarted run (another
        #: triggerer, a retried task) reserves afresh, since the dead run may have sent the
        #: call already and the backend counts the repeat as a new request. The dead run's
        #: leases keep counting until they expire.
        self.run_mark = secrets.token_hex(4)
        self.slots = asyncio.Semaphore(settings.max_in_flight)
        self.stamps = SendStamps(router, outage)
        #: settlements of answered calls still being sent to Redis (see :meth:`_settle`)
        self.settling: set[asyncio.Task[None]] = set()
        #: the first error of a helper loop (heartbeats, stamps, ...): the drain ends with it
        self.failure: BaseException | None = None
        self.batcher = MicroBatcher(http, backend, self.stamps, batch_size=settings.batch_size,
                                    batch_wait_s=settings.batch_wait_s)
        #: hedges waiting for admission (they never keep a late call from being hedged)
        self.hedges_waiting = 0
        #: calls that lost a hedge's race, running on to their end (see _call_or_hedge)
        self.stragglers: set[asyncio.Task[Any]] = set()
        self.hedge_targets = HedgeTargets(router)
        self.late_points = LatePoints(router)
        #: the backend's protocol: whether prompts can share a ``/batch``, which call
        #: options it can send
        self.wire = protocol_named(backend.protocol)

    def _left(self) -> float:
        return self.deadline - time.time()

    def check(self) -> None:
        """Raise the error that stopped a helper loop, if one did (never hang without it)."""
        if self.failure is not None:
            raise RuntimeError(f"a solver loop failed: {type(self.failure).__name__}: "
                               f"{self.failure}") from self.failure

    def watch_helper(self, task: asyncio.Task[None]) -> None:
        """Record the failure of a helper loop that should run until the solver closes."""
        def done(t: asyncio.Task[None]) -> None:
            if not t.cancelled() and t.exception() is not None and self.failure is None:
                self.failure = t.exception()
                log.error("solver loop %s failed: %r", t.get_name(), t.exception())
        task.add_done_callback(done)

    async def solve(self, item: SolveItem) -> SolveResult:
        async with self.slots:
            result = await self._attempts(item)
        self.progress.done += 1
        self.progress.solved += result.status == "solved"
        return result

    async def _attempts(self, item: SolveItem) -> SolveResult:
        errors = limited = calls = 0
        hedged = False
        last: CallResult | None = None
        model: str | None = None  # of the last call
        unknown: set[str] = set()  # models the backend said it does not have
        refused = self.wire.refuses(item.options)
        if refused is not None:  # never admitted: no capacity spent on a call not sent
            return SolveResult(item.key, "failed", error=refused, retryable=False)
        tokens = count_input_tokens(item.prompt)
        if item.options and "system" in item.options:  # the system message is input too
            tokens += count_input_tokens(str(item.options["system"]))
        cap = self._output_cap(item)
        while errors < self.settings.max_errors and limited < self.settings.max_rate_limited:
            # With an output cap the call cannot exceed input + cap: reserve exactly that.
            # Without, the engine adds the chosen model's learned output per call.
            request = AdmitRequest(
                input_tokens=tokens if cap is None else None,
                estimated_tokens=None if cap is None else tokens + cap,
                estimated_output_tokens=cap, models=item.models, ordered=item.ordered,
                priority=item.priority,
                request_id=f"{item.request_id}:{self.run_mark}:{calls + 1}",
                kind=item.kind, on_budget=item.on_budget,
                hedges_late=self.settings.hedge_late_calls)
            asked = time.monotonic()
            try:
                lease = await self.admitter.admit(request, max(0.0, self._left()))
            except ImpossibleRequestError as err:
                return SolveResult(item.key, "failed", error=str(err), retryable=False,
                                   calls=calls)
            if lease is None:
                return SolveResult(item.key, "unfinished", calls=calls, rate_limited=limited,
                                   error=last.error if last else None)
            metrics.admitted(lease.model, time.monotonic() - asked)
            self.late_points.note(lease.model, lease.late_after_s)
            calls += 1
            last, model, hedges = await self._call_or_hedge(item, request, lease)
            calls += hedges
            hedged = hedged or hedges > 0
            if last.status == "ok":
                return SolveResult(item.key, "solved", answer=last.answer, model=model,
                                   input_tokens=last.input_tokens,
                                   output_tokens=last.output_tokens, calls=calls,
                                   rate_limited=limited, hedged=hedged)
            if last.status == "unknown_model" and model not in unknown:
                # the model's fault, not the prompt's: its breaker is open now (settled
                # before the call returned), so admission sends the prompt elsewhere
                unknown.add(model)
                if item.models is not None and unknown.issuperset(item.models):
                    return SolveResult(item.key, "failed", error=last.error, retryable=False,
                                       model=model, calls=calls, hedged=hedged)
                continue
            if not last.retryable:
                return SolveResult(item.key, "failed", error=last.error, retryable=False,
                                   model=model, calls=calls, hedged=hedged)
            if last.status == "rate_limited":
                limited += 1
                continue
            errors += 1
            pause = self.settings.backoff_s * 2 ** (errors - 1) * random.uniform(0.5, 1.0)
            await asyncio.sleep(max(0.0, min(pause, self._left())))
        return SolveResult(item.key, "failed", error=last.error if last else None,
                           retryable=True, model=model, calls=calls, rate_limited=limited,
                           hedged=hedged)

    async def _call_or_hedge(self, item: SolveItem, request: AdmitRequest,
                             lease: Admission) -> tuple[CallResult, str, int]:
        """Call ``lease``'s model. If the call runs late (past the admission's
        ``late_after_s``, or its model's late point learned since, when the admission had
        none) while none of this solver's prompts waits for admission, send the
        prompt to another allowed model as well and keep the first answer. The other call
        runs on to its end (its answer dropped, its lease settled as any call's): the
        provider counts it in flight until then, so its slot must not free sooner. Why:
        near the end of a backlog the last straggler ends the whole run, and by then
        capacity is idle; a second call costs one call. Returns the result kept, its model
        and the extra calls made (0 or 1). See :mod:`airflow_llm_router.solver.hedging`."""
        if not self.settings.hedge_late_calls:
            return await self._call(item, lease.model, lease.lease_id), lease.model, 0
        first = asyncio.create_task(self._call(item, lease.model, lease.lease_id),
                                    name="llm-router-call")
        try:
            # admitted while nothing was known of its model's latency (None), the call
            # learns its late point once the model has one
            if not await late_and_idle(first, lease.late_after_s,
                                       lambda: self.late_points.learn(lease.model),
                                       self._may_hedge):
                return await first, lease.model, 0
            others = await self.hedge_targets.others(item.models, lease.model)
            if not others:
                return await first, lease.model, 0
            sent: list[str] = []  # the hedge's model, once it is admitted
            second = asyncio.create_task(self._hedge(item, request, others, lease.model, sent),
                                         name="llm-router-hedge")
            kept = await first_answer(first, second, calling=lambda: bool(sent))
            for task in (first, second):
                if not task.done():  # a call that lost the race: it ends by itself
                    self.stragglers.add(task)
                    task.add_done_callback(self.stragglers.discard)
            if kept is None:
                return first.result(), lease.model, len(sent)
            return kept[0], kept[1] or lease.model, len(sent)
        finally:
            if not first.done() and first not in self.stragglers:
                first.cancel()  # this prompt's solving was cancelled meanwhile

    def _may_hedge(self) -> bool:
        """Whether a late call may be hedged now: no prompt of this solver waits for
        admission (hedges aside: they would take capacity a waiting prompt needs), and
        the hedge deadline is ahead (past the deadline for new calls, the rescue of calls
        in flight goes on: a drain's start in the worker waits for them)."""
        return (self.admitter.waiting <= self.hedges_waiting
                and self.hedge_deadline > time.time())

    async def _hedge(self, item: SolveItem, request: AdmitRequest, models: tuple[str, ...],
                     late_model: str, sent: list[str]) -> tuple[CallResult, str] | None:
        """The second call of a late prompt, on one of ``models`` (the engine's choice, or
        the prompt's order), its model added to ``sent`` once admitted; None if it was
        not admitted. A hedge is not hedged in turn (one per call), so its admission does
        not say that it hedges (``hedges_late``)."""
        hedge = replace(request, models=models,
                        ordered=item.ordered and item.models is not None,
                        request_id=f"{request.request_id}:hedge", hedges_late=False)
        self.hedges_waiting += 1
        try:
            lease = await self.admitter.admit(hedge,
                                              max(0.0, self.hedge_deadline - time.time()))
        except ImpossibleRequestError:
            return None
        finally:
            self.hedges_waiting -= 1
        if lease is None:
            return None
        sent.append(lease.model)
        self.late_points.note(lease.model, lease.late_after_s)
        self.progress.hedged += 1
        metrics.hedged(late_model)
        log.debug("prompt %s: call on %s late; hedged on %s", item.key, late_model,
                  lease.model)
        return await self._call(item, lease.model, lease.lease_id), lease.model

    def _output_cap(self, item: SolveItem) -> int | None:
        """The output cap sent with the call: the prompt's, else the solver's, else the
        backend connection's (None: uncapped)."""
        return (item.max_output_tokens or self.settings.max_output_tokens
                or self.backend.max_output_tokens)

    async def _call(self, item: SolveItem, model: str, lease_id: str) -> CallResult:
        self.progress.live.add(lease_id)
        self.progress.calling += 1
        try:
            if self.settings.batch_size > 1 and self.wire.batches:
                result = await self.batcher.call(model, item.prompt, lease_id,
                                                 self._output_cap(item))
            else:
                result = await call_single(
                    self.http, self.backend, model=model, prompt=item.prompt,
                    max_output_tokens=self._output_cap(item), options=item.options,
                    on_sent=lambda: self.stamps.mark(lease_id))
        finally:
            self.progress.live.discard(lease_id)
            self.progress.calling -= 1
        outcome = outcome_of(result)
        if outcome == "rate_limited":
            metrics.rate_limited(model)
        elif outcome != "ok":
            metrics.errored(model)
        done = settlement(lease_id, result)
        if outcome == "ok":
            # The answer goes back to the caller (and into the store) now, whatever Redis
            # does: settling its lease is bookkeeping, retried through an outage.
            self._settle_later(done)
        else:
            await self._settle(done)  # a cooldown or breaker must count before a retry
        return result

    def _settle_later(self, done: Completion) -> None:
        """Settle a lease in the background (closing the solver waits for it)."""
        task = asyncio.create_task(self._settle(done), name="llm-router-settle")
        self.settling.add(task)
        task.add_done_callback(self.settling.discard)

    async def _settle(self, done: Completion) -> None:
        """Settle one lease; never raises (see :func:`settle`)."""
        await settle(self.router, self.outage, done)
