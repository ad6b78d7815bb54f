"""Triggers that wait on the task store's backlog in the triggerer, woken by its enqueues and
by claims that expire (a worker died holding them).

- :class:`BacklogArrivalTrigger` watches an asset: it fires when tasks arrive, so a DAG
  scheduled on that asset starts within seconds of new work, not at its next cron tick.
- :class:`BackpressureTrigger` is the deferred half of :class:`BackpressureSensor`: it waits,
  holding no worker slot, until there is a backlog and an enabled model, and hands back the
  router's advice.

Both LISTEN on the store's channel (:class:`~airflow_llm_router.store.watch.BacklogWatch`)
and read the backlog once after they start listening, so tasks enqueued before they started
are not missed; both also re-read it every ``poll_interval_s`` in case a notification was
lost (a dropped connection). The watch also wakes at the earliest claim expiry and returns
expired claims to pending, so stranded work fires them with nobody enqueuing.

Each read counts pending tasks up to ``backlog_cap`` (:data:`BACKLOG_REPORT_CAP`, 100,000 by
default), as a drain's report does: a full count reads every pending entry of the claim
index (~0.4 s at a million rows on a loaded machine), and neither trigger needs more than
"is there work, and how much up to a drain's worth".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import BaseHook
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.solver.upkeep import BACKLOG_REPORT_CAP
from airflow_llm_router.store import TaskStore
from airflow_llm_router.store.watch import BacklogWatch
from airflow_llm_router.triggers.base import RouterTrigger, SerializedArguments

__all__ = ["BacklogArrivalTrigger", "BackpressureTrigger"]


def _checked_cap(backlog_cap: object) -> int:
    if isinstance(backlog_cap, bool) or not isinstance(backlog_cap, int) or backlog_cap < 1:
        raise ValueError(f"backlog_cap must be an integer >= 1 (pending tasks a backlog read "
                         f"counts up to; default {BACKLOG_REPORT_CAP}), got {backlog_cap!r}")
    return backlog_cap


async def _watch(postgres_conn_id: str, schema: str, table: str) -> BacklogWatch:
    conn = await BaseHook.aget_connection(postgres_conn_id)
    return BacklogWatch(TaskStore.dsn_from_connection(conn), schema=schema, table=table)


class BacklogArrivalTrigger(SerializedArguments, BaseEventTrigger):
    """Fires when tasks arrive in the store: use it in an ``AssetWatcher`` of the asset the
    drain DAG is scheduled on.

    It fires once at start if the backlog is not empty (work that came while nobody
    watched), then on each enqueue, when expired claims come back to pending (announced by
    whoever returned them, or returned by this trigger's watch at their expiry), and when a
    periodic re-read finds the backlog grown with no notification (one was lost); a backlog
    shrinking under a drain fires nothing.
    Enqueues within ``min_interval_s`` of an event are folded into one more event at the end
    of that interval, so a stream of small enqueues does not queue a DAG run per enqueue;
    the first enqueue after a quiet spell fires at once.
    Event payload: ``{"backlog": tasks claimable now, up to backlog_cap, "announced": tasks
    the enqueues and returned claims announced since the last event}``. A backlog at the cap
    cannot be seen to grow by a poll, only by announcements: a lost notification then goes
    unnoticed while a drain's worth of work waits anyway.

    :param postgres_conn_id: the PostgreSQL connection of the task store.
    :param min_interval_s: the shortest time between two events.
    :param poll_interval_s: how often the backlog is re-read with no notification.
    :param backlog_cap: pending tasks each read counts up to (the event's ``backlog`` is at
        most this).
    """

    def __init__(
        self,
        *,
        postgres_conn_id: str = "postgres_default",
        schema: str = "llm_router",
        table: str = "tasks",
        min_interval_s: float = 10.0,
        poll_interval_s: float = 60.0,
        backlog_cap: int = BACKLOG_REPORT_CAP,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if min_interval_s < 0 or poll_interval_s <= 0:
            raise ValueError("min_interval_s must be >= 0 and poll_interval_s > 0 (seconds)")
        self.backlog_cap = _checked_cap(backlog_cap)
        self.postgres_conn_id = postgres_conn_id
        self.schema = schema
        self.table = table
        self.min_interval_s = min_interval_s
        self.poll_interval_s = poll_interval_s

    async def run(self) -> AsyncIterator[TriggerEvent]:
        async with await _watch(self.postgres_conn_id, self.schema, self.table) as watch:
            backlog = await watch.backlog(cap=self.backlog_cap)
            if backlog:
                yield TriggerEvent({"backlog": backlog, "announced": 0})
            while True:
                announced = await watch.arrival(self.poll_interval_s)
                seen, backlog = backlog, await watch.backlog(cap=self.backlog_cap)
                if not announced and backlog <= seen:
                    continue  # a quiet poll; a backlog that grew unannounced lost a notification
                fired = time.monotonic()
                self.log.info("tasks arrived (%d announced, backlog %d)", announced, backlog)
                yield TriggerEvent({"backlog": backlog, "announced": announced})
                # fold the enqueues of the next min_interval_s into one event
                folded = 0
                while (left := fired + self.min_interval_s - time.monotonic()) > 0:
                    folded += await watch.arrival(left)
                backlog = await watch.backlog(cap=self.backlog_cap)
                if folded:
                    yield TriggerEvent({"backlog": backlog, "announced": folded})


class BackpressureTrigger(RouterTrigger):
    """Wait until the store has a backlog and the router an enabled model, then fire once
    with the router's advice: ``{"status": "ready", "backlog": n, "advice": {...}}``, or
    ``{"status": "error", "error": "..."}``.

    Woken by enqueues; without them the backlog and the quotas are re-read every
    ``poll_interval_s`` (a model enabled in the quota UI is seen within that time).
    Parameters as :class:`~airflow_llm_router.sensors.backpressure.BackpressureSensor`;
    ``backlog_cap``: pending tasks each read counts up to (the advice is asked for at most
    this backlog, far more than ``max_solvers`` solvers keep in flight).
    """

    def __init__(
        self,
        *,
        router_conn_id: str,
        postgres_conn_id: str,
        schema: str,
        table: str,
        per_solver_in_flight: int,
        max_solvers: int,
        input_tokens_per_call: int = 0,
        poll_interval_s: float = 5.0,
        backlog_cap: int = BACKLOG_REPORT_CAP,
    ) -> None:
        super().__init__()
        self.backlog_cap = _checked_cap(backlog_cap)
        self.router_conn_id = router_conn_id
        self.postgres_conn_id = postgres_conn_id
        self.schema = schema
        self.table = table
        self.per_solver_in_flight = per_solver_in_flight
        self.max_solvers = max_solvers
        self.input_tokens_per_call = input_tokens_per_call
        self.poll_interval_s = poll_interval_s

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            event = await self._wait_for_work()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the sensor turns it into a task failure that says why
            yield TriggerEvent({"status": "error", "error": f"{type(err).__name__}: {err}"})
            return
        yield TriggerEvent(event)

    async def _wait_for_work(self) -> dict[str, Any]:
        router = await RouterHook(self.router_conn_id).get_async_client()
        try:
            async with await _watch(self.postgres_conn_id, self.schema, self.table) as watch:
                waited_for = ""
                while True:
                    backlog = await watch.backlog(cap=self.backlog_cap)
                    if backlog:
                        advice = await router.advice(backlog, self.per_solver_in_flight,
                                                     self.max_solvers, self.input_tokens_per_call)
                        if advice.any_enabled:
                            return {"status": "ready", "backlog": backlog,
                                    "advice": advice.to_dict()}
                        why = "an enabled model"
                    else:
                        why = "a backlog"
                    if why != waited_for:
                        self.log.info("waiting for %s in %s.%s", why, self.schema, self.table)
                        waited_for = why
                    await watch.arrival(self.poll_interval_s)
        finally:
            await router.aclose()
