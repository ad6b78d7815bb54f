"""SolveTaskOperator: drain the task store's backlog under the router's quotas."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow.sdk import Context
from airflow.sdk.bases.operator import BaseAsyncOperator
from airflow.sdk.exceptions import AirflowException

from airflow_llm_router.operators.base import SolvingOperator, event_status, first_event
from airflow_llm_router.solver.settings import DrainSettings
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger

__all__ = ["SolveTaskAsyncOperator", "SolveTaskOperator"]


class SolveTaskOperator(SolvingOperator[DrainSettings]):
    """Drain the task store: up to ``settings.max_in_flight`` tasks are in progress at once;
    as each ends, its answer is written (fenced by its claim token) and another task is
    claimed, until the backlog is empty (and stays so for ``settings.linger_s``) or
    ``settings.time_budget_s`` is spent. Tasks left unsolved go back to the backlog, never
    lost. The XCom is the drain's summary (solved, failed, dead, released, stale, elapsed).

    Deferrable by default: the drain runs in the triggerer and no worker slot is held. With
    ``deferrable=False`` the same drain runs in the worker. For prompts given in the DAG,
    use :class:`~airflow_llm_router.operators.prompts.SolvePromptsOperator`.

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
        self._migrate()
        trigger = self._trigger(context, settings)
        return self.execute_complete(context, self.run_trigger(trigger, settings))

    def _migrate(self) -> None:
        with TaskStore.from_conn_id(self.postgres_conn_id, schema=self.store_schema,
                                    table=self.store_table) as store:
            store.migrate()

    def _trigger(self, context: Context, settings: DrainSettings) -> DrainTrigger:
        """The drain, as a trigger; it takes back the live claims of this task's earlier
        tries (a try that crashed could not hand them back)."""
        ti = context["ti"]
        return DrainTrigger(
            store={"postgres_conn_id": self.postgres_conn_id, "schema": self.store_schema,
                   "table": self.store_table},
            worker_id=_worker_id(context),
            settings=settings.model_dump(),
            router_conn_id=self.router_conn_id,
            backend_conn_id=self.backend_conn_id,
            deadline=self.deadline(settings),
            state={"started": time.time()},
            earlier_workers=[_worker_id(context, n) for n in range(1, int(ti.try_number))],
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: the event carries the drain's totals."""
        if event_status(event) == "error":
            raise AirflowException(f"draining failed: {(event or {}).get('error')}")
        summary = (event or {}).get("summary") or {}
        self.log.info("drain ended: %s", summary)
        return summary


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
        event = await first_event(self._trigger(context, settings))
        return self.execute_complete(context, event)


def _worker_id(context: Context, try_number: int | None = None) -> str:
    ti = context["ti"]
    n = ti.try_number if try_number is None else try_number
    return f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.map_index}.try{n}"
