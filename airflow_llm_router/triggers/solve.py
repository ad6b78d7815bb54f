"""The trigger that solves a chunk of prompts in the triggerer, with no worker slot held."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import BaseHook
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_llm_router.backend import http_client
from airflow_llm_router.hooks.models_backend import ModelsBackendHook
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.solver.drain import DrainOptions, DrainState, drain_store
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.solver.runner import SolveOptions, Solver, solve_items, solving
from airflow_llm_router.store import TaskStore

__all__ = ["SolveTrigger"]


class SolveTrigger(BaseTrigger):
    """Solve prompts under the router's admission, in the triggerer, and yield one event.

    Two modes: ``items`` (prompts given directly; the event carries every result), or
    ``drain`` (claim tasks from the store, keep ``max_in_flight`` of them going, write each
    answer fenced by its claim token; the event carries the totals).

    Safe to run twice (a triggerer can fail over): admissions are keyed by request ids that
    hold the task's claim token, so a second run of the same items gets live leases back
    instead of reserving again; two drains claim different tasks (SKIP LOCKED), and a late
    writer is refused by the claim token.

    :param items: :class:`SolveItem` dicts, or None with ``drain``.
    :param drain: ``{"postgres_conn_id", "schema", "table", "worker_id", "claim_ttl_s",
        "claim_batch", "max_output_tokens", "linger_s"}`` to drain the task store until
        ``deadline``.
    :param router_conn_id: the ``llm_router`` connection.
    :param backend_conn_id: the ``models_backend`` connection.
    :param deadline: epoch seconds; prompts not admitted by then come back ``unfinished``.
    :param max_in_flight: prompts admitted or in a call at once.
    :param max_errors: 5xx/timeouts before a prompt is given up.
    :param retry_backoff_s: first pause after a 5xx/timeout; doubles with each one.
    :param batch_size: above 1, same-model prompts admitted together go to ``/batch``.
    :param state: the caller's bookkeeping, returned unchanged in the event (so resuming
        does not depend on how the deferral's own kwargs are carried).
    """

    def __init__(
        self,
        *,
        items: list[dict[str, Any]] | None = None,
        drain: dict[str, Any] | None = None,
        router_conn_id: str,
        backend_conn_id: str,
        deadline: float,
        max_in_flight: int = 100,
        max_errors: int = 3,
        retry_backoff_s: float = 1.0,
        batch_size: int = 1,
        state: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if (items is None) == (drain is None):
            raise ValueError("items, drain: give exactly one of them")
        self.items = items
        self.drain = drain
        self.router_conn_id = router_conn_id
        self.backend_conn_id = backend_conn_id
        self.deadline = deadline
        self.max_in_flight = max_in_flight
        self.max_errors = max_errors
        self.retry_backoff_s = retry_backoff_s
        self.batch_size = batch_size
        self.state = state or {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "items": self.items,
                "drain": self.drain,
                "router_conn_id": self.router_conn_id,
                "backend_conn_id": self.backend_conn_id,
                "deadline": self.deadline,
                "max_in_flight": self.max_in_flight,
                "max_errors": self.max_errors,
                "retry_backoff_s": self.retry_backoff_s,
                "batch_size": self.batch_size,
                "state": self.state,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            payload = await (self._drain() if self.drain is not None else self._solve())
        except Exception as err:  # reported to the operator, which fails the task
            self.log.exception("solving failed")
            yield TriggerEvent({"status": "error", "error": f"{type(err).__name__}: {err}",
                                "state": self.state})
            return
        yield TriggerEvent({"status": "done", **payload, "state": self.state})

    def _options(self) -> SolveOptions:
        return SolveOptions(deadline=self.deadline, max_in_flight=self.max_in_flight,
                            max_errors=self.max_errors, backoff_s=self.retry_backoff_s,
                            batch_size=self.batch_size)

    @contextlib.asynccontextmanager
    async def _solver(self) -> AsyncIterator[Solver]:
        """The router client, the backend's HTTP pools and a solver, closed afterwards."""
        router = await RouterHook(self.router_conn_id).get_async_client()
        try:
            backend = await ModelsBackendHook(self.backend_conn_id).aget_config()
            async with await http_client(backend, self.max_in_flight) as http, \
                    solving(router, http, backend, self._options()) as solver:
                yield solver
        finally:
            await router.aclose()

    async def _solve(self) -> dict[str, Any]:
        assert self.items is not None
        items = [SolveItem.from_dict(doc) for doc in self.items]
        async with self._solver() as solver:
            results = await solve_items(solver, items)
        return {"results": [r.to_dict() for r in results]}

    async def _drain(self) -> dict[str, Any]:
        assert self.drain is not None
        spec = self.drain
        conn = await BaseHook.aget_connection(spec["postgres_conn_id"])
        store = TaskStore(TaskStore.dsn_from_connection(conn), schema=spec["schema"],
                          table=spec["table"])
        options = DrainOptions(worker_id=spec["worker_id"], claim_ttl_s=spec["claim_ttl_s"],
                               deadline=self.deadline, max_in_flight=self.max_in_flight,
                               claim_batch=int(spec.get("claim_batch", 100)),
                               max_output_tokens=spec.get("max_output_tokens"),
                               linger_s=float(spec.get("linger_s", 0.0)))
        state = DrainState(started=float(self.state.get("started", 0.0)) or time.time())
        try:
            async with self._solver() as solver:
                state = await drain_store(store, solver, options, state)
        finally:
            await asyncio.to_thread(store.close)
        return {"summary": state.summary()}
