"""The part of the task store every other part runs on: the table's identity, one
connection, short transactions and migrations.

One :class:`StoreConnection` is shared by the claim cycle, ingestion and backlog admin of a
:class:`~airflow_llm_router.store.TaskStore`, so a store holds one PostgreSQL session
whatever it is asked; reconnecting after a broken connection and turning database errors
into :class:`TaskStoreError` are written once, here.

The table is migrated on first use: a store's first transaction runs :meth:`migrate` (one
short read when nothing is missing), so a fresh database works without a separate step.
Errors say whether waiting can help: a lost connection is a :class:`TaskStoreUnavailable`
(the next call reconnects; a drain rides it out), a schema newer than the package or a
missing privilege is a :class:`TaskStoreSetupError`, which no retry fixes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from airflow_llm_router.exceptions import (
    TaskStoreError,
    TaskStoreSetupError,
    TaskStoreUnavailable,
)
from airflow_llm_router.pg import TableNames, migrate
from airflow_llm_router.store.queries import Queries
from airflow_llm_router.store.task_schema import MIGRATIONS
from airflow_llm_router.store.watch import BacklogWatch

__all__ = ["StoreConnection"]


class StoreConnection:
    """``<schema>.<table>`` on one connection (opened on first use, reopened if broken).

    :param dsn: a libpq connection string or ``postgresql://`` URI. Never logged.
    :param schema: schema holding the tasks table and ``schema_version``; lower-case
        identifier, created by :meth:`migrate`.
    :param table: name of the tasks table; lower-case identifier.
    :raises TaskValidationError: if ``schema`` or ``table`` is not a safe identifier.
    """

    def __init__(self, dsn: str, *, schema: str = "llm_router", table: str = "tasks") -> None:
        self.names = TableNames(schema=schema, table=table)
        #: The claim cycle's and ingestion's statements, composed once for this table.
        self.queries = Queries.build(self.names)
        self._dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None
        #: whether :meth:`migrate` ran on this store (the first transaction runs it)
        self._migrated = False

    @property
    def schema(self) -> str:
        return self.names.schema

    @property
    def table(self) -> str:
        return self.names.table

    @property
    def notify_channel(self) -> str:
        """The channel enqueues and returned claims notify (payload: how many tasks)."""
        return self.names.notify_channel

    def watch(self) -> BacklogWatch:
        """A :class:`BacklogWatch` of this table on a connection of its own (async code)."""
        return BacklogWatch(self._dsn, schema=self.schema, table=self.table)

    def close(self) -> None:
        """Close the connection; the store reconnects if used again."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.close()

    def connect(self) -> psycopg.Connection[Any]:
        """The open connection, opened or reopened now if there is none or it broke."""
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
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One short transaction, after migrating on first use; database errors come out as
        :class:`TaskStoreError` (:class:`TaskStoreSetupError` where retrying cannot help)."""
        if not self._migrated:
            self.migrate()
        conn = self.connect()
        try:
            with conn.transaction():
                yield conn
        except pg_errors.UndefinedTable as err:
            self._migrated = False  # dropped while in use: the next call creates it again
            raise TaskStoreError(
                f"table {self.schema}.{self.table} does not exist (dropped while in use?); "
                "the next call creates it again"
            ) from err
        except pg_errors.InsufficientPrivilege as err:
            raise self._refused(err) from err
        except psycopg.OperationalError as err:
            if conn.broken or conn.closed:
                self._conn = None
                raise TaskStoreUnavailable(f"task store connection failed: {err}") from err
            raise TaskStoreError(f"task store call failed: {err}") from err

    def announce(self, conn: psycopg.Connection[Any], count: int) -> None:
        """Notify on commit that ``count`` tasks became claimable (nothing if 0)."""
        if count:
            conn.execute(self.queries.notify, (self.notify_channel, str(count)))

    def migrate(self) -> int:
        """Create or upgrade the schema; idempotent and safe to run concurrently. The first
        transaction of a store runs it, so calling it is only needed to migrate up front.

        :return: the schema version now in place.
        :raises TaskStoreSetupError: the schema is newer than this package, or the user may
            not create or read what the store needs.
        """
        conn = self.connect()
        try:
            version = migrate(conn, self.names, MIGRATIONS)
        except pg_errors.InsufficientPrivilege as err:
            raise self._refused(err) from err
        except psycopg.OperationalError as err:
            if conn.broken or conn.closed:
                self._conn = None
                raise TaskStoreUnavailable(f"task store migration failed: {err}") from err
            raise TaskStoreError(f"task store migration failed: {err}") from err
        self._migrated = True
        return version

    def _refused(self, err: pg_errors.InsufficientPrivilege) -> TaskStoreSetupError:
        return TaskStoreSetupError(
            f"the task store's database user may not use {self.schema}.{self.table} "
            f"({str(err).strip()}); grant it the rights on the schema, or run "
            "TaskStore.migrate() once as the schema's owner")
