"""The descriptor that makes one step generator a method of both router clients.

:class:`operation` hands the generator an operation builds to the client's ``_drive``: the
sync client (a :class:`SyncDriver`) runs it with blocking calls and returns the result, the
async client (an :class:`AsyncDriver`) runs it with awaited calls and returns an awaitable.
The descriptor's overloads tell a type checker which of the two a method returns on which
client. Apart from the operations themselves (``api.py``) because it knows nothing of any
of them: only how a client runs steps.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from airflow_llm_router.engine.restore import Steps

__all__ = ["AsyncDriver", "SyncDriver", "operation"]

P = ParamSpec("P")
R = TypeVar("R")


class SyncDriver:
    """A client that runs steps with blocking calls."""

    def _drive(self, step: Steps[R]) -> R:
        raise NotImplementedError


class AsyncDriver:
    """A client that runs steps with awaited calls."""

    async def _drive(self, step: Steps[R]) -> R:
        raise NotImplementedError


class operation(Generic[P, R]):
    """Makes ``def op(self, ...) -> Steps[R]`` a client method that returns ``R`` on a
    :class:`SyncDriver` and ``Awaitable[R]`` on an :class:`AsyncDriver`.

    The method is built on a client's first use of it and kept in the client's own
    attributes, which Python looks in first from then on: a solver calls a few of these
    per answer, and building one (``functools.wraps``) costs several microseconds."""

    def __init__(self, build: Callable[Concatenate[Any, P], Steps[R]]) -> None:
        self._build = build
        self.__doc__ = build.__doc__
        self.__name__ = build.__name__
        self._attr = build.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = name

    @overload
    def __get__(self, client: None, owner: type) -> operation[P, R]: ...
    @overload
    def __get__(self, client: SyncDriver, owner: type) -> Callable[P, R]: ...
    @overload
    def __get__(self, client: AsyncDriver, owner: type) -> Callable[P, Awaitable[R]]: ...

    def __get__(self, client: Any, owner: type) -> Any:
        if client is None:
            return self
        build = self._build

        @functools.wraps(build)
        def run(*args: Any, **kwargs: Any) -> Any:
            return client._drive(build(client, *args, **kwargs))

        vars(client)[self._attr] = run
        return run
