"""What the HTTP routes talk to, built on first use in the serving event loop.

The app is created at import time (the Airflow plugin) or before the server's loop runs
(standalone), while the Redis client it needs is an asyncio client bound to that loop, and
its connection may not exist yet when the API server starts. So each is a :class:`Lazy`:
built by the first request that needs it, retried on the next request after a failure, and
until then the routes answer 503 naming what is missing. The routes take them as FastAPI
dependencies: :data:`Client` (the router) and :data:`Store` (the task store, whose
synchronous calls run in a worker thread, one at a time).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, HTTPException, Request, status

from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.exceptions import (
    TaskStoreError,
    TaskStoreSetupError,
    TaskValidationError,
)
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.store import TaskStore
from airflow_llm_router.web.errors import first_line

T = TypeVar("T")

__all__ = ["Client", "Lazy", "Store", "TaskCalls", "Unavailable", "router_source",
           "task_store_source"]


class Unavailable(RuntimeError):
    """A dependency of the API (the router's Redis, the task store) cannot be built."""


class Lazy(Generic[T]):
    """One ``T``, built once by ``factory`` on first :meth:`get`.

    :param factory: builds it (may look up Airflow connections); its error is raised as
        :class:`Unavailable`, with ``what`` and the error's first line (never a secret:
        connection errors name the connection, not its password).
    :param what: what it is, for that message (``"the router's Redis (connection 'x')"``).
    :param close: how to release it at shutdown.
    """

    def __init__(self, factory: Callable[[], Awaitable[T]], what: str,
                 close: Callable[[T], Awaitable[None]] | None = None) -> None:
        self._factory = factory
        self._close = close
        self.what = what
        self._value: T | None = None
        self._lock: asyncio.Lock | None = None

    async def get(self) -> T:
        if self._value is not None:
            return self._value
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._value is None:
                try:
                    self._value = await self._factory()
                except Exception as err:
                    raise Unavailable(f"{self.what} is unavailable: {type(err).__name__}: "
                                      f"{first_line(err)}") from err
            return self._value

    async def aclose(self) -> None:
        value, self._value = self._value, None
        if value is not None and self._close is not None:
            await self._close(value)


def router_source(conn_id: str, namespace: str | None = None) -> Lazy[AsyncRouterClient]:
    """The asyncio router client of connection ``conn_id``, built on first use."""
    hook = RouterHook(conn_id, namespace=namespace)

    async def close(client: AsyncRouterClient) -> None:
        await client.aclose()

    return Lazy(hook.get_async_client, f"the router's Redis (connection {conn_id!r})", close)


def task_store_source(conn_id: str, schema: str, table: str) -> Lazy[TaskStore]:
    """The task store on PostgreSQL connection ``conn_id``, built on first use (the store
    migrates its table on its first call; an error retrying cannot fix comes out of that
    call, answered by :meth:`TaskCalls.run` without ``Retry-After``)."""

    async def build() -> TaskStore:
        return await asyncio.to_thread(TaskStore.from_conn_id, conn_id, schema=schema,
                                       table=table)

    async def close(store: TaskStore) -> None:
        await asyncio.to_thread(store.close)

    return Lazy(build, f"the task store (connection {conn_id!r}, {schema}.{table})", close)


async def client(request: Request) -> AsyncRouterClient:
    """The app's router client (503 if its Redis connection cannot be built)."""
    source: Lazy[AsyncRouterClient] = request.app.state.router
    return await source.get()


Client = Annotated[AsyncRouterClient, Depends(client)]


class TaskCalls:
    """One :class:`TaskStore` for the event loop: each call in a worker thread, one at a
    time (the store has one connection; a request cancelled mid-call cannot let the next
    call start on that connection, since the lock is taken inside the thread)."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        def locked() -> T:
            with self._lock:
                return fn(*args)

        try:
            return await asyncio.to_thread(locked)
        except TaskValidationError:
            raise
        except TaskStoreSetupError as err:  # no retry fixes it: say so, and what to do
            raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR,
                                f"the task store cannot work as it is set up: {err}") from err
        except TaskStoreError as err:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"the task store is unavailable: {err}; retry",
                                headers={"Retry-After": "1"}) from err


async def task_store(request: Request) -> TaskCalls:
    """The app's task store (503 if it has none, or it cannot be built)."""
    source = request.app.state.task_store
    if source is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            "this API serves no task store (start it with one)")
    store: TaskStore = await source.get()
    state = request.app.state
    found: TaskCalls | None = getattr(state, "task_calls", None)
    if found is None or found.store is not store:  # no await since the read: no race
        found = state.task_calls = TaskCalls(store)
    return found


Store = Annotated[TaskCalls, Depends(task_store)]
