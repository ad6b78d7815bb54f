"""A solver's session: the solver and the loops beside it (batched admission, lease
heartbeats, progress log, send stamps) for as long as a block runs, and solving a batch
of prompts with it. The per-prompt work is :class:`~.runner.Solver`'s; this is its
lifetime, shared by the triggers and inline mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from airflow_llm_router.backend import BackendConfig, BackendHttp
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.solver.admitter import BatchAdmitter
from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.outage import RedisOutage
from airflow_llm_router.solver.runner import Solver
from airflow_llm_router.solver.settings import SolveSettings
from airflow_llm_router.solver.upkeep import Progress, keep_alive, report, stop_helpers

__all__ = ["solve_items", "solving"]

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def solving(
    router: AsyncRouterClient,
    http: BackendHttp,
    backend: BackendConfig,
    settings: SolveSettings,
    deadline: float,
    hedge_deadline: float | None = None,
) -> AsyncIterator[Solver]:
    """A solver and its helpers (batched admission, lease heartbeats, send stamps,
    progress log) for as long as the block runs; ``solver.solve(item)`` solves one prompt.

    :param deadline: epoch seconds after which no new call is started; prompts not yet
        admitted come back ``unfinished`` (a drain's tasks return to the backlog).
    :param hedge_deadline: epoch seconds until which a late call already in flight may
        still be hedged (its hedge admitted and sent); None: ``deadline``. A drain that
        hands over to another past ``deadline`` (the operator's start in the worker)
        rescues its stragglers until the task's own deadline."""
    progress = Progress(total=0)
    outage = RedisOutage(settings.redis_outage_s, deadline=deadline)
    async with BatchAdmitter(router, outage) as admitter:
        solver = Solver(router, http, backend, settings, deadline, admitter, progress, outage,
                        hedge_deadline)
        helpers = [asyncio.create_task(keep_alive(router, progress), name="heartbeats"),
                   asyncio.create_task(report(router, progress, settings.progress_every_s),
                                       name="progress")]
        for task in helpers:
            solver.watch_helper(task)
        try:
            yield solver
        finally:
            # calls that lost a hedge's race and still run: their answers are not needed;
            # their leases are left to expire (the provider may still count them)
            for task in list(solver.stragglers):
                task.cancel()
            await stop_helpers(helpers)
            await solver.batcher.aclose()
            await solver.stamps.aclose()
            if solver.settling:  # answered calls' leases: settle them before closing
                await asyncio.gather(*list(solver.settling), return_exceptions=True)
    log.info("solving: %d prompts done: %d solved, %d late calls hedged, %d admission "
             "round trips", progress.done, progress.solved, progress.hedged,
             admitter.round_trips)


async def solve_items(solver: Solver, items: Sequence[SolveItem]) -> list[SolveResult]:
    """Solve every item with ``solver``; results come back in the items' order."""
    solver.progress.total += len(items)
    return list(await asyncio.gather(*(solver.solve(item) for item in items)))
