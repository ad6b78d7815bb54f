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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from airflow_llm_router import metrics
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.solver.outage import REDIS_DOWN

__all__ = ["BACKLOG_COUNT_SPACING", "BACKLOG_REPORT_CAP", "BACKLOG_REPORT_MIN_S",
           "BACKLOG_REPORT_S", "BACKLOG_REPORT_TTL_S", "HELPER_STOP_S",
           "Progress", "keep_alive", "report", "report_backlog", "stop_helpers"]

log = logging.getLogger(__name__)

#: How often a drain tells the engine how many tasks wait in its store, unclaimed (and for
#: how long a report holds: a drain that died stops counting within that).
BACKLOG_REPORT_S = 1.0
#: the least time between two reports of a drain that claims on and on
BACKLOG_REPORT_MIN_S = 0.1
BACKLOG_REPORT_TTL_S = 5.0
#: A report counts the store's pending tasks up to this many: a full count reads every
#: pending entry of the claim index (80 ms at 100,000 on a loaded 2-core machine, 10x that
#: at a million) up to ten times a second per drain. The engine only needs to know that
#: the backlog outlasts a slow model's call: 100,000 tasks are over two minutes of work
#: below 800 calls a second, past any model's likely latency (docs/scale.md).
BACKLOG_REPORT_CAP = 100_000
#: Between two reports a drain waits at least this many times what its last count took,
#: so counting a backlog near the cap takes at most a tenth of a connection's time.
BACKLOG_COUNT_SPACING = 10.0


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
                         count: Callable[[], Awaitable[int]], stop: asyncio.Event,
                         claimed: asyncio.Event | None = None) -> None:
    """Tell the engine how many tasks wait in ``source`` unclaimed (``count()``): admission
    weighs a slower model against how long the whole backlog would take, not only the
    requests waiting in it (``RouterAPI.report_backlog``). A failed report is logged and
    tried again; the last one lapses by itself.

    Reports after the drain's first claim (``claimed`` set), then every
    :data:`BACKLOG_REPORT_S` and after each claim, at most every
    :data:`BACKLOG_REPORT_MIN_S` (or :data:`BACKLOG_COUNT_SPACING` times what the last
    ``count()`` took, when that is longer: a count over a large backlog is not free).
    The engine counts the reported tasks and the requests
    waiting in it, and a claimed task waits there: a report from before a claim counts it
    twice. At a drain's start that was most of the backlog: W1's 2,000 tasks reported
    before two drains claimed 800 made the engine see 2,111 for a second, a horizon of
    39 s where 21 s was right, and reasoner-large took calls that ended 33 s in (5 of 8
    warm runs 32.5-35.0 s, the others 24.2-28.6 s).

    Ends once ``stop`` is set, cancelled or not: a call under way may swallow its
    cancellation (seen in a loaded CI run: the loop went on reporting after the drain had
    ended, and the drain waited for it for ever)."""
    claimed = claimed or asyncio.Event()
    reported: float | None = None
    spacing = BACKLOG_REPORT_MIN_S
    while True:
        # the first report after the first claim (or a period with none): it would be
        # out of date at once
        await _first_set(stop, claimed, BACKLOG_REPORT_S)
        if reported is not None and not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), reported + spacing - time.monotonic())
        if stop.is_set():
            return
        claimed.clear()
        reported = time.monotonic()
        try:
            tasks = await count()
            spacing = max(BACKLOG_REPORT_MIN_S,
                          BACKLOG_COUNT_SPACING * (time.monotonic() - reported))
            await router.report_backlog(source, tasks, BACKLOG_REPORT_TTL_S)
        except Exception as err:
            log.warning("could not report the backlog to the router: %s: %s",
                        type(err).__name__, err)


async def _first_set(first: asyncio.Event, second: asyncio.Event, timeout_s: float) -> None:
    """Until either event is set, or ``timeout_s`` has passed."""
    waits = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
