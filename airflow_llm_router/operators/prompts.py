"""SolvePromptsOperator: solve prompts given in the DAG, under the router's quotas."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from airflow_llm_router.engine.types import as_on_budget, as_priority
from airflow_llm_router.operators.base import SolvingOperator, event_status
from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.settings import SolveSettings

__all__ = ["SolvePromptsOperator"]


class SolvePromptsOperator(SolvingOperator[SolveSettings]):
    """Solve ``prompt`` (the XCom is its answer dict) or ``prompts`` (a list of answer dicts,
    in the prompts' order) under the router's per-model quotas.

    Deferrable by default: no worker slot is held while models think. With
    ``deferrable=False`` the same solver runs in the worker.

    :param prompt: one prompt; give this or ``prompts``.
    :param prompts: several prompts, solved concurrently (``settings.max_in_flight``).
    :param models: allowed models (None: any), tried in order if ``ordered_models``.
    :param ordered_models: prefer the models in the order given.
    :param priority: ``"hot"`` (ahead of bulk work) or ``"bulk"``.
    :param on_budget: when a model is over its spend budget, ``"overflow"`` to the next of
        ``models`` or ``"wait"`` for the budget (docs/budgets.md).
    :param settings: a :class:`~airflow_llm_router.solver.settings.SolveSettings`, or a
        dict of its fields (templates allowed).
    :param router_conn_id: the ``llm_router`` connection.
    :param backend_conn_id: the ``models_backend`` connection.
    :param deferrable: solve in the triggerer (default) rather than in the worker.
    """

    settings_class = SolveSettings
    template_fields = ("prompt", "prompts", "models", "priority", "on_budget", "settings")
    ui_color = "#e8f0fe"

    def __init__(self, *, prompt: str | None = None, prompts: list[str] | None = None,
                 models: list[str] | None = None, ordered_models: bool = True,
                 priority: str = "bulk", on_budget: str = "overflow", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if (prompt is None) == (prompts is None):
            raise ValueError("prompt, prompts: give exactly one of them (to drain the task "
                             "store, use SolveTaskOperator)")
        self.prompt = prompt
        self.prompts = prompts
        self.models = models
        self.ordered_models = ordered_models
        self.priority = priority
        self.on_budget = on_budget

    def execute(self, context: Context) -> Any:
        prompts = [self.prompt] if self.prompt is not None else list(self.prompts or [])
        if not prompts or not all(isinstance(p, str) and p for p in prompts):
            raise ValueError("prompts: give non-empty strings")
        priority, on_budget = as_priority(self.priority), as_on_budget(self.on_budget)
        settings = self.parsed_settings()
        ti = context["ti"]
        base = f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.map_index}"
        items = [
            SolveItem(key=str(i), prompt=p, request_id=f"{base}:{i}",
                      models=tuple(self.models) if self.models else None,
                      ordered=self.ordered_models, priority=priority,
                      on_budget=on_budget)
            for i, p in enumerate(prompts)
        ]
        from airflow_llm_router.triggers.solve import SolveTrigger  # see operators.base

        trigger = SolveTrigger(items=[i.to_dict() for i in items],
                               settings=settings.model_dump(),
                               router_conn_id=self.router_conn_id,
                               backend_conn_id=self.backend_conn_id,
                               deadline=self.deadline(settings))
        return self.execute_complete(context, self.run_trigger(trigger, settings))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: the event carries every prompt's result."""
        if event_status(event) == "error":
            raise AirflowException(f"solving failed: {(event or {}).get('error')}")
        results = [SolveResult.from_dict(doc) for doc in (event or {}).get("results", [])]
        docs = [{k: v for k, v in r.to_dict().items() if k != "key"} for r in results]
        if self.prompt is not None:
            if results[0].status != "solved":
                raise AirflowException(f"the prompt was not solved: {results[0].error}")
            return docs[0]
        return docs
