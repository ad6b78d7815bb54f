"""The triggers that solve in the triggerer, with no worker slot held: given prompts
(:class:`SolveTrigger`) or the task store's backlog (:class:`DrainTrigger`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import BaseHook
from airflow.triggers.base import TriggerEvent

from airflow_llm_router.backend import http_client
from airflow_llm_router.exceptions import ConnectionConfigError
from airflow_llm_router.hooks.models_backend import ModelsBackendHook
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.solver.drain import DrainState, drain_store
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.solver.outage import NOT_AN_OUTAGE
from airflow_llm_router.solver.runner import Solver
from airflow_llm_router.solver.session import solve_items, solving
from airflow_llm_router.solver.settings import DrainSettings, SolveSettings, parse_settings
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.base import RouterTrigger

__all__ = ["DrainTrigger", "SolveTrigger"]


class _SolvingTrigger(RouterTrigger):
    """What both triggers share: the connections, the deadline, the caller's state, one
    event (``done`` with the payload, or ``error``), and the solver's set-up.

    Safe to run twice (a triggerer can fail over): a second run admits its calls afresh
    (the first may have sent them; its leases count until they expire), a restarted drain
    takes back its own claims at once, two drains claim different tasks (SKIP LOCKED), and
    a late writer is refused by the claim token.
    """

    settings_class: type[SolveSettings] = SolveSettings

    def __init__(self, *, settings: dict[str, Any], router_conn_id: str,
                 backend_conn_id: str, deadline: float, state: dict[str, Any] | None) -> None:
        super().__init__()
        self.settings = parse_settings(self.settings_class, settings).model_dump()
        self.router_conn_id = router_conn_id
        self.backend_conn_id = backend_conn_id
        self.deadline = deadline
        self.state = state or {}
        #: until when late calls in flight may be hedged (None: the deadline)
        self.hedge_deadline: float | None = None

    def _settings(self) -> SolveSettings:
        return self.settings_class.model_validate(self.settings)

    async def _payload(self) -> dict[str, Any]:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            payload = await self._payload()
        except Exception as err:  # reported to the operator, which fails the task
            self.log.exception("solving failed")
            yield TriggerEvent({"status": "error", "error": f"{type(err).__name__}: {err}",
                                "state": self.state})
            return
        yield TriggerEvent({"status": "done", **payload, "state": self.state})

    @contextlib.asynccontextmanager
    async def _solver(self) -> AsyncIterator[Solver]:
        """The router client, the backend's HTTP pools and a solver, closed afterwards.

        :raises ConnectionConfigError: Redis refused the connection's password or user (not
            an outage: no retry mends it), naming the connection."""
        settings = self._settings()
        router = await RouterHook(self.router_conn_id).get_async_client()
        try:
            backend = await ModelsBackendHook(self.backend_conn_id).aget_config()
            async with await http_client(backend, settings.max_in_flight) as http, \
                    solving(router, http, backend, settings, self.deadline,
                            self.hedge_deadline) as solver:
                yield solver
        except NOT_AN_OUTAGE as err:
            raise ConnectionConfigError(
                self.router_conn_id, "login/password",
                f"Redis refused them ({type(err).__name__}: {err}); set the connection's "
                "login and password to a user the server accepts") from err
        finally:
            await router.aclose()


class SolveTrigger(_SolvingTrigger):
    """Solve the given prompts under the router's admission; the event carries every
    result, in the items' order.

    :param items: :class:`SolveItem` dicts.
    :param settings: :class:`SolveSettings` fields (``model_dump()``).
    :param router_conn_id: the ``llm_router`` connection.
    :param backend_conn_id: the ``models_backend`` connection.
    :param deadline: epoch seconds; prompts not admitted by then come back ``unfinished``.
    :param state: the caller's bookkeeping, returned unchanged in the event (so resuming
        does not depend on how the deferral's own kwargs are carried).
    """

    def __init__(self, *, items: list[dict[str, Any]], settings: dict[str, Any],
                 router_conn_id: str, backend_conn_id: str, deadline: float,
                 state: dict[str, Any] | None = None) -> None:
        super().__init__(settings=settings, router_conn_id=router_conn_id,
                         backend_conn_id=backend_conn_id, deadline=deadline, state=state)
        self.items = items

    async def _payload(self) -> dict[str, Any]:
        items = [SolveItem.from_dict(doc) for doc in self.items]
        async with self._solver() as solver:
            results = await solve_items(solver, items)
        return {"results": [r.to_dict() for r in results]}


class DrainTrigger(_SolvingTrigger):
    """Drain the task store: claim tasks as slots free, keep ``max_in_flight`` of them
    going, write each answer fenced by its claim token; the event carries the totals.

    :param store: ``{"postgres_conn_id", "schema", "table"}`` of the task store.
    :param worker_id: recorded on each claim.
    :param settings: :class:`DrainSettings` fields (``model_dump()``).
    :param router_conn_id: the ``llm_router`` connection.
    :param backend_conn_id: the ``models_backend`` connection.
    :param deadline: epoch seconds; no task is claimed after it.
    :param state: the caller's bookkeeping, returned unchanged in the event.
    :param earlier_workers: worker ids of the task's earlier tries, whose live claims the
        drain takes back first.
    :param until_empty: end as soon as the backlog is empty and nothing is in progress:
        no waiting for others' claims, no lingering (the operator's start in the worker,
        which hands the rest to a trigger).
    :param hedge_deadline: epoch seconds until which a late call already in flight may
        still be hedged, past ``deadline`` (None: ``deadline``): a start in the worker
        stops claiming at its own deadline but rescues its stragglers until the task's.
    """

    settings_class = DrainSettings

    def __init__(self, *, store: dict[str, str], worker_id: str, settings: dict[str, Any],
                 router_conn_id: str, backend_conn_id: str, deadline: float,
                 state: dict[str, Any] | None = None,
                 earlier_workers: list[str] | None = None, until_empty: bool = False,
                 hedge_deadline: float | None = None) -> None:
        super().__init__(settings=settings, router_conn_id=router_conn_id,
                         backend_conn_id=backend_conn_id, deadline=deadline, state=state)
        missing = {"postgres_conn_id", "schema", "table"} - set(store)
        if missing:
            raise ValueError(f"store: {sorted(missing)} missing; give postgres_conn_id, "
                             "schema and table")
        self.store = store
        self.worker_id = worker_id
        self.earlier_workers = list(earlier_workers or [])
        self.until_empty = until_empty
        self.hedge_deadline = hedge_deadline

    def _settings(self) -> DrainSettings:
        return DrainSettings.model_validate(self.settings)

    async def _payload(self) -> dict[str, Any]:
        conn = await BaseHook.aget_connection(self.store["postgres_conn_id"])
        store = TaskStore(TaskStore.dsn_from_connection(conn), schema=self.store["schema"],
                          table=self.store["table"])
        state = DrainState(started=float(self.state.get("started", 0.0)) or time.time())
        try:
            async with self._solver() as solver:
                state = await drain_store(store, solver, self._settings(), self.worker_id,
                                          state, self.earlier_workers,
                                          until_empty=self.until_empty)
        finally:
            await asyncio.to_thread(store.close)
        return {"summary": state.summary()}
