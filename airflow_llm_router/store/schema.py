"""The tasks table's schema and its numbered migrations.

Migrations are applied by :func:`migrate` in one transaction under an advisory lock, so two
processes that start at once (two DAG runs, a scheduler and a worker) serialise instead of
racing on ``CREATE TABLE``. A ``schema_version`` table in the same schema records, per
tasks table, which migrations ran. Migrations are append-only: never edit a released one,
add the next number.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from airflow_llm_router.exceptions import TaskStoreError
from airflow_llm_router.store.models import validate_identifier

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
    statements: Callable[[TableNames], list[sql.Composable]]


def _initial(names: TableNames) -> list[sql.Composable]:
    create = sql.SQL(
        """
        CREATE TABLE {tasks} (
            id               bigserial PRIMARY KEY,
            prompt           text        NOT NULL,
            kind             text        NOT NULL DEFAULT 'default',
            priority         text        NOT NULL DEFAULT 'bulk'
                             CHECK (priority IN ('hot', 'bulk')),
            priority_rank    smallint    NOT NULL
                             GENERATED ALWAYS AS
                             (CASE WHEN priority = 'hot' THEN 0 ELSE 1 END) STORED,
            allowed_models   text[]      NULL
                             CHECK (allowed_models IS NULL OR cardinality(allowed_models) > 0),
            status           text        NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'claimed', 'solved', 'dead')),
            attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
            claim_token      uuid        NULL,
            claimed_by       text        NULL,
            claim_expires_at timestamptz NULL,
            answer           text        NULL,
            model            text        NULL,
            input_tokens     integer     NULL,
            output_tokens    integer     NULL,
            last_error       text        NULL,
            created_at       timestamptz NOT NULL DEFAULT now(),
            updated_at       timestamptz NOT NULL DEFAULT now(),
            solved_at        timestamptz NULL,
            metadata         jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
            CHECK ((status = 'claimed')
                   = (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))
        )
        """
    ).format(tasks=names.tasks)
    # Claiming walks this index in order and stops after n rows: hot lane first, then FIFO.
    pending = sql.SQL(
        "CREATE INDEX {name} ON {tasks} (priority_rank, id) WHERE status = 'pending'"
    ).format(name=names.index("pending_idx"), tasks=names.tasks)
    # Expired claims are found by a range scan on this one, never by scanning claimed rows.
    claimed = sql.SQL(
        "CREATE INDEX {name} ON {tasks} (claim_expires_at) WHERE status = 'claimed'"
    ).format(name=names.index("claimed_exp_idx"), tasks=names.tasks)
    return [create, pending, claimed]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create tasks table and claim indexes", _initial),
)

LATEST_VERSION = MIGRATIONS[-1].version


def migrate(conn: psycopg.Connection, names: TableNames,
            migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the schema up to the last of ``migrations``; return the version now in place.

    Safe to call on every start: when nothing is missing it only takes the lock and reads
    one row. Raises :class:`TaskStoreError` if the database was migrated by a newer release.
    ``migrations`` defaults to the tasks table's; other tables of the package (the quota
    store) pass their own, recorded in the same ``schema_version`` under their table name.
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
            raise TaskStoreError(
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
