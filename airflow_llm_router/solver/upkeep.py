"""What runs beside a solver's prompts: lease heartbeats, the progress log and gauges, a
drain's backlog reports, and stopping these loops when the solver closes.

Each loop outlives any one prompt and must never end a drain by itself: a failed
heartbeat only lets a lease expire, a failed stats read only skips a gauge. The solver
(:mod:`airflow_llm_router.solver.runner`) starts them and watches them, so a loop that
does die is logged, not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from airflow_llm_router import metrics
from airflow_llm_router.engine.client import AsyncRouterClient
from airflow_llm_router.solver.outage import REDIS_DOWN

__all__ = ["BACKLOG_REPORT_S", "BACKLOG_REPORT_TTL_S", "HELPER_STOP_S", "Progress",
           "keep_alive", "report", "report_backlog", "stop_helpers"]

log = logging.getLogger(__name__)

#: How often a drain tells the engine how many tasks wait in its store, unclaimed (and for
#: how long a report holds: a drain that died stops counting within that).
BACKLOG_REPORT_S = 1.0
BACKLOG_REPORT_TTL_S = 5.0


@dataclass
class Progress:
    """What a solver has done so far: read by its progress log and gauges, and its live
    leases, which the heartbeat loop keeps alive."""

    total: int
    done: int = 0
    solved: int = 0
    calling: int = 0
    #: hedges sent (second calls for a prompt whose first call ran late)
    hedged: int = 0
    live: set[str] = field(default_factory=set)

    def line(self) -> str:
        """The progress log's line. Calls in flight include hedges and the losing calls of
        hedged prompts, which run on after their prompt is done, so they can outnumber the
        prompts not done; a solver hedges only while none of its prompts waits for
        admission, so then none waits (the difference is not a negative count)."""
        waiting = max(0, self.total - self.done - self.calling)
        return (f"solving: {self.done}/{self.total} done ({self.solved} solved), "
                f"{self.calling} calls in flight, {waiting} waiting")


async def keep_alive(router: AsyncRouterClient, progress: Progress) -> None:
    """Heartbeat every live lease together, a third of the lease TTL apart; never ends
    before it is cancelled (a lease that misses its heartbeats only expires: its slot
    frees, its call goes on, which no error here is worth ending a drain for). A heartbeat
    lost to a Redis outage is simply tried again next time. Any other error is logged with
    its traceback and the leases are heartbeated one by one, so one bad lease (a damaged
    key) does not let the others expire."""
    every = router.settings.lease_ttl_s / 3
    while True:
        await asyncio.sleep(every)
        if progress.live:
            await _heartbeat_round(router, list(progress.live), every)


async def _heartbeat_round(router: AsyncRouterClient, leases: list[str], every: float) -> None:
    """One round of :func:`keep_alive`: every lease in one call; if that fails other than
    by a Redis outage, each lease alone. Never raises but for cancellation."""
    rounds = [leases]
    while rounds:
        batch = rounds.pop(0)
        try:
            await router.heartbeat_many(batch)
        except REDIS_DOWN as err:
            log.warning("lease heartbeat failed (%s); trying again in %.1f s",
                        type(err).__name__, every)
            return
        except Exception as err:
            if len(batch) > 1:
                log.exception("lease heartbeat of %d leases failed (%r); heartbeating each "
                              "alone", len(batch), err)
                rounds = [[lease_id] for lease_id in batch]
            else:
                log.exception("lease %s: heartbeat failed (%r); trying again in %.1f s",
                              batch[0], err, every)


async def report(router: AsyncRouterClient, progress: Progress, every_s: float) -> None:
    """Log progress and send the usage gauges (see :mod:`airflow_llm_router.metrics`)."""
    while True:
        await asyncio.sleep(every_s)
        log.info("%s", progress.line())
        try:
            metrics.usage(await router.stats())
        except Exception:  # gauges are best effort; Redis errors surface in the solving
            log.debug("could not read the router's stats for the gauges", exc_info=True)


#: How long closing a solver waits for a cancelled helper loop to end.
HELPER_STOP_S = 5.0


async def stop_helpers(helpers: list[asyncio.Task[None]]) -> None:
    """Cancel the helper loops and wait at most HELPER_STOP_S for them: a loop caught in a
    call that ignores its cancellation (seen once under load: the progress loop went on
    after its cancellation, and the drain, done with its tasks, never ended) is left
    behind with a warning rather than holding the solver open for ever."""
    for task in helpers:
        task.cancel()
    _, pending = await asyncio.wait(helpers, timeout=HELPER_STOP_S)
    for task in pending:
        log.warning("solver loop %s did not stop within %.0f s of its cancellation; left "
                    "behind", task.get_name(), HELPER_STOP_S)


async def report_backlog(router: AsyncRouterClient, source: str,
                         count: Callable[[], Awaitable[int]], stop: asyncio.Event) -> None:
    """Tell the engine, every :data:`BACKLOG_REPORT_S`, how many tasks wait in ``source``
    unclaimed (``count()``): admission weighs a slower model against how long the whole
    backlog would take, not only the requests waiting in it (``RouterAPI.report_backlog``).
    A failed report is logged and tried again; the last one lapses by itself.

    Ends once ``stop`` is set, cancelled or not: a call under way may swallow its
    cancellation (seen in a loaded CI run: the loop went on reporting after the drain had
    ended, and the drain waited for it for ever)."""
    while not stop.is_set():
        try:
            await router.report_backlog(source, await count(), BACKLOG_REPORT_TTL_S)
        except Exception as err:
            log.warning("could not report the backlog to the router: %s: %s",
                        type(err).__name__, err)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), BACKLOG_REPORT_S)
