"""SolveTaskOperator: drain the task store's backlog under the router's quotas."""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from airflow_llm_router.operators.base import SolvingOperator, event_status
from airflow_llm_router.solver.settings import DrainSettings
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger

__all__ = ["SolveTaskOperator"]


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
        with TaskStore.from_conn_id(self.postgres_conn_id, schema=self.store_schema,
                                    table=self.store_table) as store:
            store.migrate()
        trigger = DrainTrigger(
            store={"postgres_conn_id": self.postgres_conn_id, "schema": self.store_schema,
                   "table": self.store_table},
            worker_id=_worker_id(context),
            settings=settings.model_dump(),
            router_conn_id=self.router_conn_id,
            backend_conn_id=self.backend_conn_id,
            deadline=self.deadline(settings),
            state={"started": time.time()},
        )
        return self.execute_complete(context, self.run_trigger(trigger, settings))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: the event carries the drain's totals."""
        if event_status(event) == "error":
            raise AirflowException(f"draining failed: {(event or {}).get('error')}")
        summary = (event or {}).get("summary") or {}
        self.log.info("drain ended: %s", summary)
        return summary


def _worker_id(context: Context) -> str:
    ti = context["ti"]
    return f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.map_index}.try{ti.try_number}"
