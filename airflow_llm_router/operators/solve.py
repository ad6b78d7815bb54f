"""SolveTaskOperator: drain the task store's backlog under the router's quotas."""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context
from airflow.sdk.bases.operator import BaseAsyncOperator
from airflow.sdk.exceptions import AirflowException

from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.operators.base import SolvingOperator, event_status, first_event
from airflow_llm_router.solver.settings import DrainSettings
from airflow_llm_router.solver.upkeep import BACKLOG_REPORT_CAP
from airflow_llm_router.store import TaskStore

if TYPE_CHECKING:
    from airflow_llm_router.triggers.solve import DrainTrigger

__all__ = ["SolveTaskAsyncOperator", "SolveTaskOperator"]


class SolveTaskOperator(SolvingOperator[DrainSettings]):
    """Drain the task store: up to ``settings.max_in_flight`` tasks are in progress at once;
    as each ends, its answer is written (fenced by its claim token) and another task is
    claimed, until the backlog is empty (and stays so for ``settings.linger_s``) or
    ``settings.time_budget_s`` is spent. Tasks left unsolved go back to the backlog, never
    lost. The XCom is the drain's summary (solved, failed, dead, released, stale, elapsed).

    Deferrable by default: the drain runs in the triggerer and no worker slot is held;
    ``settings.start_in_worker_s`` drains in the worker first, for a sooner start, and
    hands the rest to the triggerer. With ``deferrable=False`` the same drain runs in the
    worker. For prompts given in the DAG, use
    :class:`~airflow_llm_router.operators.prompts.SolvePromptsOperator`.

    :param settings: a :class:`~airflow_llm_router.solver.settings.DrainSettings`, or a dict
        of its fields (templates allowed, e.g. from a ``BackpressureSensor``'s
        ``solver_kwargs``).
    :param postgres_conn_id: the PostgreSQL connection of the task store.
    :param store_schema: schema of the task store.
    :param store_table: table of the task store.
    :param router_conn_id: the ``llm_router`` connection.
    :param backend_conn_id: the ``models_backend`` connection.
    :param deferrable: drain in the triggerer (default) rather than in the worker.
    """

    settings_class = DrainSettings
    template_fields = ("store_schema", "store_table", "settings")
    ui_color = "#e8f0fe"

    def __init__(self, *, postgres_conn_id: str = "postgres_default",
                 store_schema: str = "llm_router", store_table: str = "tasks",
                 **kwargs: Any) -> None:
        for moved in ("prompt", "prompts"):
            if moved in kwargs:
                raise ValueError(f"{moved}: SolveTaskOperator drains the task store; to "
                                 "solve prompts given in the DAG use SolvePromptsOperator")
        super().__init__(**kwargs)
        self.postgres_conn_id = postgres_conn_id
        self.store_schema = store_schema
        self.store_table = store_table

    def execute(self, context: Context) -> Any:
        settings = self.parsed_settings()
        starts_here = self.deferrable and settings.start_in_worker_s > 0
        backlog = self._migrate(count_backlog=starts_here and settings.start_in_flight == 0)
        deadline = self.deadline(settings)
        state: dict[str, Any] = {"started": time.time()}
        if starts_here:
            state["in_worker"] = self._start_in_worker(context, settings, deadline, state,
                                                       backlog)
            if time.time() >= deadline:
                return self.execute_complete(context, {"status": "done", "summary": {},
                                                       "state": state})
        trigger = self._trigger(context, settings, deadline, state)
        return self.execute_complete(context, self.run_trigger(trigger, settings))

    def _migrate(self, count_backlog: bool = False) -> int:
        """Create or update the store's table; with ``count_backlog``, the backlog after it
        (on the same connection, counted up to ``BACKLOG_REPORT_CAP``), else 0."""
        with TaskStore.from_conn_id(self.postgres_conn_id, schema=self.store_schema,
                                    table=self.store_table) as store:
            store.migrate()
            return store.backlog_size(cap=BACKLOG_REPORT_CAP) if count_backlog else 0

    def _start_in_worker(self, context: Context, settings: DrainSettings, deadline: float,
                         state: dict[str, Any], backlog: int) -> dict[str, Any]:
        """Drain here, in the worker, until the backlog is empty or
        ``settings.start_in_worker_s`` is spent; the summary of what it did. The triggerer
        starts a deferred trigger on its next loop (1-2 s), so an arrival on an idle system
        is admitted that much sooner; what is left (and the lingering) goes to the trigger
        after. Claims not yet admitted when the time is spent go back to the backlog."""
        until = min(deadline, time.time() + settings.start_in_worker_s)
        if settings.start_in_flight is not None:
            n = settings.start_in_flight or self._advised_in_flight(settings, backlog)
            settings = settings.model_copy(update={"max_in_flight": n})
        # past `until` it claims nothing and starts no prompt's call, but a straggler in
        # flight may still be hedged until the task's deadline
        head = self._trigger(context, settings, until, state, until_empty=True,
                             hedge_deadline=deadline)
        event = asyncio.run(first_event(head))
        if event_status(event) == "error":
            raise AirflowException(f"draining failed: {event.get('error')}")
        summary = dict(event.get("summary") or {})
        self.log.info("drained in the worker (%d in flight) for %.1f s: %s; deferring the "
                      "rest", settings.max_in_flight, float(summary.get("elapsed_s", 0.0)),
                      summary)
        return summary

    def _advised_in_flight(self, settings: DrainSettings, backlog: int) -> int:
        """The calls in flight the router advises for ``backlog`` tasks, or
        ``max_in_flight`` if that is more; capped by the backlog and by what the advised
        solvers would hold (at most its ``max_solvers``, 16, of ``max_in_flight`` each), so
        a model with a huge quota does not open thousands of connections in one worker."""
        client = RouterHook(self.router_conn_id).client
        try:
            advice = client.advice(backlog, settings.max_in_flight)
        finally:
            client.close()
        advised = min(backlog, math.ceil(advice.in_flight_needed),
                      advice.solvers * settings.max_in_flight)
        return max(settings.max_in_flight, advised)

    def _trigger(self, context: Context, settings: DrainSettings, deadline: float,
                 state: dict[str, Any], *, until_empty: bool = False,
                 hedge_deadline: float | None = None) -> DrainTrigger:
        """The drain, as a trigger; it takes back the live claims of this task's earlier
        tries (a try that crashed could not hand them back)."""
        from airflow_llm_router.triggers.solve import DrainTrigger  # see operators.base

        ti = context["ti"]
        return DrainTrigger(
            store={"postgres_conn_id": self.postgres_conn_id, "schema": self.store_schema,
                   "table": self.store_table},
            worker_id=_worker_id(context),
            settings=settings.model_dump(),
            router_conn_id=self.router_conn_id,
            backend_conn_id=self.backend_conn_id,
            deadline=deadline,
            state=state,
            earlier_workers=[_worker_id(context, n) for n in range(1, int(ti.try_number))],
            until_empty=until_empty,
            hedge_deadline=hedge_deadline,
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: the event carries the drain's totals (with those of
        its start in the worker, carried in its state)."""
        if event_status(event) == "error":
            raise AirflowException(f"draining failed: {(event or {}).get('error')}")
        summary = _merge_summaries((event or {}).get("summary") or {},
                                  ((event or {}).get("state") or {}).get("in_worker") or {})
        self.log.info("drain ended: %s", summary)
        return summary


def _merge_summaries(summary: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """A drain's summary with the counts of an earlier part of the same drain added (its
    start in the worker); ``elapsed_s`` is the later part's, counted from the drain's
    start."""
    out = dict(summary)
    for name, value in earlier.items():
        if name == "elapsed_s":
            out.setdefault(name, value)
        elif isinstance(value, int):
            out[name] = int(out.get(name, 0)) + value
    return out


class SolveTaskAsyncOperator(SolveTaskOperator, BaseAsyncOperator):
    """The same drain as :class:`SolveTaskOperator`, as an async task: it runs in the
    worker's event loop (``aexecute``), holding the worker slot, not in the triggerer.

    Pick it when the triggerer should stay a waiting room (Airflow's advice: async tasks
    for many HTTP calls in one task instance): a triggerer restart or failover cannot
    re-run the drain, so it never re-sends calls; a worker that dies ends the try, and the
    next try (``retries``) takes back the dead try's live claims at once. Pick the
    deferrable operator to keep worker slots free while the drain waits on the quotas.
    ``deferrable`` is ignored.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("deferrable", None)
        super().__init__(deferrable=False, **kwargs)

    def execute(self, context: Context) -> Any:
        return BaseAsyncOperator.execute(self, context)

    async def aexecute(self, context: Context) -> Any:
        settings = self.parsed_settings()
        await asyncio.to_thread(self._migrate)
        event = await first_event(self._trigger(context, settings, self.deadline(settings),
                                                {"started": time.time()}))
        return self.execute_complete(context, event)


def _worker_id(context: Context, try_number: int | None = None) -> str:
    ti = context["ti"]
    n = ti.try_number if try_number is None else try_number
    return f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.map_index}.try{n}"
