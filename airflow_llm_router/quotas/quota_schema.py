"""The quota table and its audit log: numbered migrations, applied like the task store's.

Both tables live in the task store's schema by default and share its ``schema_version``
table, under the quota table's name, so one advisory lock serialises every migration of
the package.
"""

from __future__ import annotations

from psycopg import sql

from airflow_llm_router.pg import Migration, TableNames


def quota_table(names: TableNames) -> sql.Identifier:
    """``<schema>.<table>``: one row per model, the quota as JSON."""
    return sql.Identifier(names.schema, names.table)


def audit_table(names: TableNames) -> sql.Identifier:
    """``<schema>.<table>_audit``: one row per change (who, when, old, new)."""
    return sql.Identifier(names.schema, f"{names.table}_audit")


def budget_table(names: TableNames) -> sql.Identifier:
    """``<schema>.<table>_budget``: at most one row, the router-wide spend budget."""
    return sql.Identifier(names.schema, f"{names.table}_budget")


def _initial(names: TableNames) -> list[sql.Composed | sql.SQL]:
    quotas = sql.SQL(
        """
        CREATE TABLE {quotas} (
            model      text        PRIMARY KEY,
            quota      jsonb       NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(),
            updated_by text        NOT NULL
        )
        """
    ).format(quotas=quota_table(names))
    audit = sql.SQL(
        """
        CREATE TABLE {audit} (
            id     bigserial   PRIMARY KEY,
            at     timestamptz NOT NULL DEFAULT now(),
            actor  text        NOT NULL,
            action text        NOT NULL CHECK (action IN ('create', 'replace', 'patch', 'delete')),
            source text        NOT NULL,
            model  text        NOT NULL,
            old    jsonb       NULL,
            new    jsonb       NULL
        )
        """
    ).format(audit=audit_table(names))
    by_model = sql.SQL("CREATE INDEX {name} ON {audit} (model, id)").format(
        name=names.index("audit_model_idx"), audit=audit_table(names))
    return [quotas, audit, by_model]


def _router_budget(names: TableNames) -> list[sql.Composed | sql.SQL]:
    """The router-wide spend budget, kept like a quota (changes audited in the quota audit
    log). One row at most: the primary key can only be true."""
    budget = sql.SQL(
        """
        CREATE TABLE {budget} (
            singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
            budget     jsonb       NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(),
            updated_by text        NOT NULL
        )
        """
    ).format(budget=budget_table(names))
    return [budget]


QUOTA_MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create quota and quota audit tables", _initial),
    Migration(2, "router-wide spend budget table", _router_budget),
)
