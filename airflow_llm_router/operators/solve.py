"""SolveTaskOperator: solve prompts given directly, or drain the task store chunk by chunk."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException

from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import SolveTrigger

__all__ = ["SolveTaskOperator"]

#: Extra time a deferral may take after its deadline, for calls in flight to end.
CALL_MARGIN_S = 600.0


class SolveTaskOperator(BaseOperator):
    """Solve LLM prompts under the router's per-model quotas.

    Two uses:

    - ``prompt=`` or ``prompts=[...]``: solve these; the result (XCom) is the answer dict, or
      a list of them in the prompts' order.
    - neither: drain the task store from the triggerer. Up to ``max_in_flight`` tasks are in
      progress at once; as each ends, its answer is written (fenced by claim token) and
      another task is claimed, until the backlog is empty or ``time_budget_s`` is spent.
      Tasks left unsolved go back to the backlog, never lost. The result is a summary dict.

    Deferrable by default: no worker slot is held while models think. With
    ``deferrable=False`` the same solver runs in the worker.

    :param models: allowed models (None: any), tried in order if ``ordered_models``.
    :param priority: ``"hot"`` or ``"bulk"`` for direct prompts (stored tasks carry theirs).
    :param chunk_size: the most tasks claimed in one statement (claims happen as slots free).
    :param max_in_flight: prompts this instance has in admission or in a call at once.
    :param time_budget_s: stop claiming new chunks after this long.
    :param claim_ttl_s: claims are extended while their task is in progress; if the
        triggerer dies, they expire after this and the tasks return to the backlog.
    :param max_errors: 5xx/timeouts per prompt before it counts as a failed attempt.
    :param retry_backoff_s: first pause after a 5xx/timeout; doubles with each one.
    :param batch_size: above 1, prompts admitted on the same model at about the same time go
        to the backend's ``/batch`` together (each under its own lease). Off by default: a
        batch answers with its slowest prompt.
    :param max_output_tokens: sent to the backend as the output cap of each call.
    :param linger_s: drain only: once the backlog is empty, wait this long (in the
        triggerer, woken by the store's enqueue notifications) for new tasks before ending;
        each arrival restarts the wait. Tasks arriving meanwhile are claimed within
        milliseconds instead of waiting for a new DAG run. 0 (default): end at once.
    """

    template_fields = ("prompt", "prompts", "models", "priority", "store_schema", "store_table")
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        prompt: str | None = None,
        prompts: list[str] | None = None,
        models: list[str] | None = None,
        ordered_models: bool = True,
        priority: str = "bulk",
        router_conn_id: str = "llm_router_default",
        backend_conn_id: str = "models_backend_default",
        postgres_conn_id: str = "postgres_default",
        store_schema: str = "llm_router",
        store_table: str = "tasks",
        chunk_size: int = 100,
        max_in_flight: int = 100,
        time_budget_s: float = 1500.0,
        claim_ttl_s: float = 120.0,
        max_errors: int = 3,
        retry_backoff_s: float = 1.0,
        batch_size: int = 1,
        max_output_tokens: int | None = None,
        linger_s: float = 0.0,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if prompt is not None and prompts is not None:
            raise ValueError("prompt, prompts: give one of them, not both")
        for name, value in (("chunk_size", chunk_size), ("max_in_flight", max_in_flight),
                            ("max_errors", max_errors), ("batch_size", batch_size)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r} must be a whole number >= 1")
        for name, seconds in (("time_budget_s", time_budget_s), ("claim_ttl_s", claim_ttl_s)):
            if seconds <= 0:
                raise ValueError(f"{name}: {seconds!r} must be > 0 seconds")
        if not isinstance(linger_s, (int, float)) or linger_s < 0:
            raise ValueError(f"linger_s: {linger_s!r} must be >= 0 seconds (0: don't linger)")
        self.prompt = prompt
        self.prompts = prompts
        self.models = models
        self.ordered_models = ordered_models
        self.priority = priority
        self.router_conn_id = router_conn_id
        self.backend_conn_id = backend_conn_id
        self.postgres_conn_id = postgres_conn_id
        self.store_schema = store_schema
        self.store_table = store_table
        self.chunk_size = chunk_size
        self.max_in_flight = max_in_flight
        self.time_budget_s = time_budget_s
        self.claim_ttl_s = claim_ttl_s
        self.max_errors = max_errors
        self.retry_backoff_s = retry_backoff_s
        self.batch_size = batch_size
        self.max_output_tokens = max_output_tokens
        self.linger_s = float(linger_s)
        self.deferrable = deferrable

    # -- entry points -----------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        if self.prompt is not None or self.prompts is not None:
            return self._solve_direct(context)
        with self._store() as store:
            store.migrate()
        started = time.time()
        drain = {
            "postgres_conn_id": self.postgres_conn_id,
            "schema": self.store_schema,
            "table": self.store_table,
            "worker_id": _worker_id(context),
            "claim_ttl_s": self.claim_ttl_s,
            "claim_batch": self.chunk_size,
            "max_output_tokens": self.max_output_tokens,
            "linger_s": self.linger_s,
        }
        event = self._solve({"mode": "drain", "started": started}, drain=drain)
        return self.execute_complete(context, event)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: the event carries the results or the drain's totals."""
        results = _results(event)
        state = (event or {}).get("state") or {}
        if state.get("mode") == "drain":
            if results is None:
                raise AirflowException(f"draining failed: {(event or {}).get('error')}")
            summary = (event or {}).get("summary") or {}
            self.log.info("drain ended: %s", summary)
            return summary
        return self._direct_output(results, event)

    # -- direct prompts ---------------------------------------------------------------

    def _solve_direct(self, context: Context) -> Any:
        prompts = [self.prompt] if self.prompt is not None else list(self.prompts or [])
        if not prompts or not all(isinstance(p, str) and p for p in prompts):
            raise ValueError("prompts: give non-empty strings")
        ti = context["ti"]
        base = f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.map_index}"
        items = [
            SolveItem(key=str(i), prompt=p, request_id=f"{base}:{i}",
                      models=tuple(self.models) if self.models else None,
                      ordered=self.ordered_models, priority=self.priority,
                      max_output_tokens=self.max_output_tokens)
            for i, p in enumerate(prompts)
        ]
        event = self._solve({"mode": "direct"}, items=items)
        return self.execute_complete(context, event)

    def _direct_output(self, results: list[SolveResult] | None,
                       event: dict[str, Any] | None = None) -> Any:
        if results is None:
            raise AirflowException(f"solving failed: {(event or {}).get('error')}")
        docs = [{k: v for k, v in r.to_dict().items() if k != "key"} for r in results]
        if self.prompt is not None:
            if results[0].status != "solved":
                raise AirflowException(f"the prompt was not solved: {results[0].error}")
            return docs[0]
        return docs

    # -- the trigger, deferred or inline ----------------------------------------------

    def _solve(self, state: dict[str, Any], *, items: list[SolveItem] | None = None,
               drain: dict[str, Any] | None = None) -> dict[str, Any]:
        """Defer to the trigger (raises TaskDeferred), or run it here and return its event."""
        deadline = time.time() + self.time_budget_s
        trigger = SolveTrigger(
            items=[i.to_dict() for i in items] if items is not None else None,
            drain=drain,
            router_conn_id=self.router_conn_id,
            backend_conn_id=self.backend_conn_id,
            deadline=deadline,
            max_in_flight=self.max_in_flight,
            max_errors=self.max_errors,
            retry_backoff_s=self.retry_backoff_s,
            batch_size=self.batch_size,
            state=state,
        )
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete",
                       timeout=timedelta(seconds=self.time_budget_s + CALL_MARGIN_S))
        return asyncio.run(_first_event(trigger))

    def _store(self) -> TaskStore:
        return TaskStore.from_conn_id(self.postgres_conn_id, schema=self.store_schema,
                                      table=self.store_table)


async def _first_event(trigger: SolveTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AirflowException("the solve trigger ended without an event")


def _results(event: dict[str, Any] | None) -> list[SolveResult] | None:
    """The event's results, or None if the trigger reported an error. Anything else is a bug."""
    if not isinstance(event, dict) or event.get("status") not in ("done", "error"):
        raise AirflowException(f"unexpected event from the solve trigger: {event!r:.200}")
    if event["status"] == "error":
        return None
    return [SolveResult.from_dict(doc) for doc in event.get("results", [])]


def _worker_id(context: Context) -> str:
    ti = context["ti"]
    return f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.map_index}.try{ti.try_number}"
