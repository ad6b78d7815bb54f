"""The trigger that solves a chunk of prompts in the triggerer, with no worker slot held."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_llm_router.hooks.models_backend import ModelsBackendHook, http_client
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.solver.runner import SolveOptions, solve_items

__all__ = ["SolveTrigger"]


class SolveTrigger(BaseTrigger):
    """Solve ``items`` under the router's admission and yield one event with every result.

    Safe to run twice (a triggerer can fail over): admissions are keyed by each item's
    ``request_id``, so a second run gets live leases back instead of reserving again, and
    results are written by the operator, fenced by claim token.

    :param items: :class:`SolveItem` dicts.
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
        items: list[dict[str, Any]],
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
        self.items = items
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
            results = await self._solve()
        except Exception as err:  # reported to the operator, which returns the claims
            self.log.exception("solving a chunk of %d prompts failed", len(self.items))
            yield TriggerEvent({"status": "error", "error": f"{type(err).__name__}: {err}",
                                "state": self.state})
            return
        yield TriggerEvent({"status": "done", "results": results, "state": self.state})

    async def _solve(self) -> list[dict[str, Any]]:
        items = [SolveItem.from_dict(doc) for doc in self.items]
        router = await RouterHook(self.router_conn_id).get_async_client()
        try:
            backend = await ModelsBackendHook(self.backend_conn_id).aget_config()
            options = SolveOptions(deadline=self.deadline, max_in_flight=self.max_in_flight,
                                   max_errors=self.max_errors,
                                   backoff_s=self.retry_backoff_s,
                                   batch_size=self.batch_size)
            async with http_client(backend, self.max_in_flight) as http:
                results = await solve_items(items, router, http, backend, options)
        finally:
            await router.aclose()
        return [r.to_dict() for r in results]
