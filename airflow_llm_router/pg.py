"""PostgreSQL support shared by the task store and the quota store: DSNs from Airflow
connections, safe identifiers, and numbered migrations under an advisory lock.

Migrations are applied by :func:`migrate` in one transaction under an advisory lock, so two
processes that start at once (two DAG runs, a scheduler and a worker) serialise instead of
racing on ``CREATE TABLE``. A ``schema_version`` table in the same schema records, per
table, which migrations ran. Migrations are append-only: never edit a released one, add the
next number.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from airflow_llm_router.exceptions import TaskStoreSetupError, TaskValidationError

__all__ = [
    "ADVISORY_LOCK_CLASS",
    "Migration",
    "TableNames",
    "dsn_from_connection",
    "migrate",
    "validate_identifier",
]

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: libpq settings an Airflow connection may carry in its extras that ``get_uri()`` drops.
_LIBPQ_EXTRAS = (
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "connect_timeout",
    "options",
    "application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "target_session_attrs",
)


def dsn_from_connection(conn: Any) -> str:
    """A libpq DSN from an Airflow connection's fields (a socket directory as host is kept
    as is) and libpq options such as ``sslmode`` from its extra. Never logged."""
    extras = conn.extra_dejson or {}
    fields = {
        "host": conn.host or None,
        "port": str(conn.port) if conn.port else None,
        "user": conn.login or None,
        "password": conn.password or None,
        "dbname": conn.schema or None,
    }
    fields.update({key: str(extras[key]) for key in _LIBPQ_EXTRAS
                   if extras.get(key) is not None})
    return make_conninfo("", **{k: v for k, v in fields.items() if v is not None})


def validate_identifier(field_name: str, value: object) -> str:
    """Return ``value`` if it is a safe lower-case PostgreSQL identifier, else raise."""
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise TaskValidationError(
            field_name,
            f"{value!r} is not a valid name; use 1-63 characters of lower-case letters, "
            "digits and underscores, not starting with a digit (e.g. 'llm_router')",
        )
    return value


log = logging.getLogger(__name__)

#: First key of the two-int advisory lock ("LLMR"); the second is a hash of the schema name.
ADVISORY_LOCK_CLASS = 0x4C4C4D52

_PG_NAME_MAX = 63


@dataclass(frozen=True)
class TableNames:
    """Validated names of one task store's objects, ready to compose into SQL."""

    schema: str
    table: str

    def __post_init__(self) -> None:
        validate_identifier("schema", self.schema)
        validate_identifier("table", self.table)

    @property
    def tasks(self) -> sql.Identifier:
        """The schema-qualified tasks table."""
        return sql.Identifier(self.schema, self.table)

    @property
    def versions(self) -> sql.Identifier:
        return sql.Identifier(self.schema, "schema_version")

    @property
    def notify_channel(self) -> str:
        """``<schema>_tasks``, cut to fit PostgreSQL's 63-byte channel names."""
        return f"{self.schema[: _PG_NAME_MAX - len('_tasks')]}_tasks"

    def index(self, suffix: str) -> sql.Identifier:
        """An index name unique per table that PostgreSQL will not silently truncate."""
        name = f"{self.table}_{suffix}"
        if len(name) > _PG_NAME_MAX:
            digest = hashlib.sha1(self.table.encode()).hexdigest()[:8]
            name = f"{self.table[: _PG_NAME_MAX - len(suffix) - 10]}_{digest}_{suffix}"
        return sql.Identifier(name)


@dataclass(frozen=True)
class Migration:
    """One numbered step; ``statements`` builds its SQL for a given schema and table."""

    version: int
    description: str
    statements: Callable[[TableNames], list[sql.Composed | sql.SQL]]


def migrate(conn: psycopg.Connection[Any], names: TableNames,
            migrations: Sequence[Migration]) -> int:
    """Bring the schema up to the last of ``migrations``; return the version now in place.

    Safe to call on every start: when nothing is missing it only takes the lock and reads
    one row. Raises :class:`TaskStoreSetupError` if the database was migrated by a newer
    release.
    Each store passes its own ``migrations``, recorded in the schema's one
    ``schema_version`` table under its table name.
    """
    latest = migrations[-1].version
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            (ADVISORY_LOCK_CLASS, names.schema),
        )
        _ensure_schema(conn, names)
        current = _current_version(conn, names)
        if current > latest:
            raise TaskStoreSetupError(
                f"{names.schema}.{names.table} is at schema version {current} but this "
                f"airflow-llm-router only knows up to {latest}; upgrade the package"
            )
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.statements(names):
                conn.execute(statement)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {versions} (table_name, version, description) VALUES (%s, %s, %s)"
                ).format(versions=names.versions),
                (names.table, migration.version, migration.description),
            )
            log.info(
                "Applied migration %s (%s) to %s.%s",
                migration.version,
                migration.description,
                names.schema,
                names.table,
            )
            current = migration.version
    return current


def _ensure_schema(conn: psycopg.Connection, names: TableNames) -> None:
    """Create the schema and the version table only if missing (needs no CREATE right else)."""
    exists = conn.execute(
        "SELECT 1 FROM pg_namespace WHERE nspname = %s", (names.schema,)
    ).fetchone()
    if exists is None:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(names.schema)))
    found = conn.execute("SELECT to_regclass(%s)", (f'"{names.schema}".schema_version',)).fetchone()
    if found is not None and found[0] is not None:
        return
    conn.execute(
        sql.SQL(
            """
            CREATE TABLE {versions} (
                table_name  text        NOT NULL,
                version     integer     NOT NULL,
                description text        NOT NULL,
                applied_at  timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (table_name, version)
            )
            """
        ).format(versions=names.versions)
    )


def _current_version(conn: psycopg.Connection, names: TableNames) -> int:
    row = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {versions} WHERE table_name = %s").format(
            versions=names.versions
        ),
        (names.table,),
    ).fetchone()
    return int(row[0]) if row else 0
