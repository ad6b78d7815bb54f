"""The tasks table's schema: its numbered migrations (applied by ``pg.migrate``)."""

from __future__ import annotations

from psycopg import sql

from airflow_llm_router.pg import Migration, TableNames
from airflow_llm_router.store.backlog_queries import requeue_log_table

__all__ = ["LATEST_VERSION", "MIGRATIONS"]


def _initial(names: TableNames) -> list[sql.Composed | sql.SQL]:
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


def _idempotency_keys(names: TableNames) -> list[sql.Composed | sql.SQL]:
    """A producer's own key per task, so a retried enqueue (an HTTP POST whose answer was
    lost) finds the task it already made instead of adding it twice. NULL (no key) never
    conflicts; the partial unique index is what ``INSERT ... ON CONFLICT`` infers."""
    column = sql.SQL("ALTER TABLE {tasks} ADD COLUMN idempotency_key text NULL").format(
        tasks=names.tasks)
    unique = sql.SQL(
        "CREATE UNIQUE INDEX {name} ON {tasks} (idempotency_key) "
        "WHERE idempotency_key IS NOT NULL"
    ).format(name=names.index("idempotency_key_idx"), tasks=names.tasks)
    return [column, unique]


def _backlog_views(names: TableNames) -> list[sql.Composed | sql.SQL]:
    """What the backlog panel reads without scanning history: tasks solved recently (a range
    of ``solved_at``) and dead tasks newest first, each from a partial index that holds only
    its status (with the lane, so counts per priority read the index alone); and the log of
    requeues (who moved which dead tasks back to pending). Building the indexes locks writes
    to the table once, for as long as it takes to read the solved and dead rows."""
    solved = sql.SQL(
        "CREATE INDEX {name} ON {tasks} (solved_at, priority_rank) WHERE status = 'solved'"
    ).format(name=names.index("solved_at_idx"), tasks=names.tasks)
    dead = sql.SQL(
        "CREATE INDEX {name} ON {tasks} (updated_at, id) INCLUDE (priority_rank) "
        "WHERE status = 'dead'"
    ).format(name=names.index("dead_idx"), tasks=names.tasks)
    log = sql.SQL(
        """
        CREATE TABLE {log} (
            id        bigserial   PRIMARY KEY,
            at        timestamptz NOT NULL DEFAULT now(),
            actor     text        NOT NULL,
            source    text        NOT NULL,
            request   jsonb       NOT NULL,
            requeued  integer     NOT NULL,
            skipped   integer     NOT NULL,
            remaining integer     NOT NULL
        )
        """
    ).format(log=requeue_log_table(names))
    return [solved, dead, log]


def _on_budget(names: TableNames) -> list[sql.Composed | sql.SQL]:
    """Each task's choice when its preferred model is over its spend budget: go on to the
    next allowed model (``overflow``, what every task did before) or hold until the budget
    allows it (``wait``). Existing rows take the default; with a constant default, adding
    the column rewrites nothing (PostgreSQL 11+)."""
    column = sql.SQL(
        "ALTER TABLE {tasks} ADD COLUMN on_budget text NOT NULL DEFAULT 'overflow' "
        "CHECK (on_budget IN ('overflow', 'wait'))").format(tasks=names.tasks)
    return [column]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create tasks table and claim indexes", _initial),
    Migration(2, "add idempotency_key with a unique partial index", _idempotency_keys),
    Migration(3, "backlog panel: solved and dead indexes, requeue log", _backlog_views),
    Migration(4, "add on_budget (overflow or wait) per task", _on_budget),
)

LATEST_VERSION = MIGRATIONS[-1].version


