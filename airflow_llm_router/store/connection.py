"""The connection side of the task store: its identity, one connection, short transactions
and migrations. :class:`~airflow_llm_router.store.task_store.TaskStore` adds the operations.

Kept apart so the store's operations read as the claim cycle alone; the connection handling
(reconnect after a broken connection, errors as :class:`TaskStoreError`) is written once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from airflow_llm_router.exceptions import TaskStoreError, TaskStoreUnavailable
from airflow_llm_router.pg import TableNames, dsn_from_connection, migrate
from airflow_llm_router.store.queries import Queries
from airflow_llm_router.store.task_schema import MIGRATIONS
from airflow_llm_router.store.validation import (
    DEFAULT_MAX_PROMPT_CHARS,
    validate_max_prompt_chars,
)
from airflow_llm_router.store.watch import BacklogWatch

__all__ = ["StoreConnection"]

Self = TypeVar("Self", bound="StoreConnection")


class StoreConnection:
    """``<schema>.<table>`` on one connection (opened on first use, reopened if broken).

    :param dsn: a libpq connection string or ``postgresql://`` URI. Never logged.
    :param schema: schema holding the tasks table and ``schema_version``; lower-case
        identifier, created by :meth:`migrate`.
    :param table: name of the tasks table; lower-case identifier.
    :param max_prompt_chars: longest prompt ``enqueue`` accepts, in characters.
    :raises TaskValidationError: if ``schema`` or ``table`` is not a safe identifier.
    """

    def __init__(self, dsn: str, *, schema: str = "llm_router", table: str = "tasks",
                 max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> None:
        self._names = TableNames(schema=schema, table=table)
        self.max_prompt_chars = validate_max_prompt_chars(max_prompt_chars)
        self._queries = Queries.build(self._names)
        self._dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None

    @classmethod
    def from_conn_id(cls: type[Self], postgres_conn_id: str = "postgres_default",
                     **kw: Any) -> Self:
        """Build a store from an Airflow Postgres connection.

        :param postgres_conn_id: the Airflow connection id.
        :param kw: ``schema`` and ``table``, passed to the constructor.
        """
        from airflow.sdk import BaseHook

        return cls(cls.dsn_from_connection(BaseHook.get_connection(postgres_conn_id)), **kw)

    #: A libpq DSN from an Airflow connection (see ``pg.dsn_from_connection``).
    dsn_from_connection = staticmethod(dsn_from_connection)

    # --- identity and connection ----------------------------------------------------------

    @property
    def schema(self) -> str:
        return self._names.schema

    @property
    def table(self) -> str:
        return self._names.table

    @property
    def notify_channel(self) -> str:
        """The channel :meth:`enqueue` notifies (payload: number of new tasks); LISTEN on it."""
        return self._names.notify_channel

    def watch(self) -> BacklogWatch:
        """A :class:`BacklogWatch` of this store (``async with store.watch() as w``): its
        backlog and the arrival of new tasks, for async code, on a connection of its own."""
        return BacklogWatch(self._dsn, schema=self.schema, table=self.table)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(schema={self.schema!r}, table={self.table!r})"

    def __enter__(self: Self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection; the store reconnects if used again."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            params = conninfo_to_dict(self._dsn)
            params.setdefault("application_name", "airflow-llm-router")
            params.setdefault("connect_timeout", 10)
            try:
                self._conn = psycopg.connect(make_conninfo("", **params), autocommit=False)
            except psycopg.OperationalError as err:
                raise TaskStoreUnavailable(f"cannot connect to the task store: {err}") from err
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One short transaction; database errors come out as :class:`TaskStoreError`."""
        conn = self._connection()
        try:
            with conn.transaction():
                yield conn
        except pg_errors.UndefinedTable as err:
            raise TaskStoreError(
                f"table {self.schema}.{self.table} does not exist; "
                "call TaskStore.migrate() once before using the store"
            ) from err
        except psycopg.OperationalError as err:
            if conn.broken or conn.closed:
                self._conn = None
                raise TaskStoreUnavailable(f"task store connection failed: {err}") from err
            raise TaskStoreError(f"task store call failed: {err}") from err

    def _announce(self, conn: psycopg.Connection[Any], count: int) -> None:
        """Notify on commit that ``count`` tasks became claimable (nothing if 0)."""
        if count:
            conn.execute(self._queries.notify, (self.notify_channel, str(count)))

    # --- schema ---------------------------------------------------------------------------

    def migrate(self) -> int:
        """Create or upgrade the schema; idempotent and safe to run concurrently.

        :return: the schema version now in place.
        """
        try:
            return migrate(self._connection(), self._names, MIGRATIONS)
        except psycopg.OperationalError as err:
            raise TaskStoreError(f"task store migration failed: {err}") from err
