"""The router-wide spend budget's rows: read, write and audit, inside a caller's transaction.

Split from :mod:`airflow_llm_router.quotas.quota_store` (which owns the transaction, the
change lock and the push to Redis) so that module stays one promise in one file: this one
only holds the budget's SQL on a connection the store opened, and the one audit INSERT that
quota and budget changes share.

The budget lives in a one-row table beside the quotas (``<table>_budget``) and is audited in
the quota audit log under the name :data:`ROUTER_BUDGET_AUDIT_NAME` (no model can have it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_llm_router.engine.quota import ModelQuota, RouterBudget
from airflow_llm_router.pg import TableNames
from airflow_llm_router.quotas.quota_schema import audit_table, budget_table

Action = Literal["create", "replace", "patch", "delete"]

#: The audit log's ``model`` for changes of the router-wide budget: not a valid model name,
#: so it never names a model's quota.
ROUTER_BUDGET_AUDIT_NAME = "*"


@dataclass(frozen=True)
class BudgetRecord:
    """The stored router-wide budget and its last change."""

    budget: RouterBudget
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True)
class BudgetChange:
    """What :meth:`QuotaStore.set_budget` changed (``audit_id`` None: already in place)."""

    action: Action
    old: RouterBudget | None
    new: RouterBudget | None
    audit_id: int | None


def stored_budget(conn: psycopg.Connection[Any], names: TableNames, lock: bool = False
                  ) -> BudgetRecord | None:
    """The stored budget (``lock``: row-locked until the transaction ends), or None."""
    row = conn.execute(
        sql.SQL("SELECT budget, updated_at, updated_by FROM {}" + (
            " FOR UPDATE" if lock else "")).format(budget_table(names))).fetchone()
    return None if row is None else BudgetRecord(RouterBudget.model_validate(row[0]),
                                                 row[1], row[2])


def budget_if_migrated(conn: psycopg.Connection[Any], names: TableNames
                       ) -> BudgetRecord | None:
    """The stored budget; None also on tables not yet migrated to hold one (restoring
    the quotas must not fail on a store an upgrade has not migrated yet)."""
    try:
        with conn.transaction():  # a savepoint: the failed read leaves the rest usable
            return stored_budget(conn, names)
    except pg_errors.UndefinedTable:
        return None


def write_budget(conn: psycopg.Connection[Any], names: TableNames, new: RouterBudget | None,
                 actor: str, source: str) -> BudgetChange:
    """Store (or with None, remove) the budget and audit the change; nothing when equal."""
    stored = stored_budget(conn, names, lock=True)
    old = None if stored is None else stored.budget
    action: Action = ("delete" if new is None else "create" if old is None
                      else "replace")
    if new == old:
        return BudgetChange(action, old, new, None)
    table = budget_table(names)
    if new is None:
        conn.execute(sql.SQL("DELETE FROM {}").format(table))
    else:
        conn.execute(
            sql.SQL("INSERT INTO {} (budget, updated_at, updated_by) VALUES (%s, now(), %s) "
                    "ON CONFLICT (singleton) DO UPDATE SET budget = EXCLUDED.budget, "
                    "updated_at = now(), updated_by = EXCLUDED.updated_by").format(table),
            (Jsonb(new.model_dump()), actor))
    audit_id = insert_audit(conn, names, actor, action, source, ROUTER_BUDGET_AUDIT_NAME,
                            old, new)
    return BudgetChange(action, old, new, audit_id)


def insert_audit(conn: psycopg.Connection[Any], names: TableNames, actor: str,
                 action: Action, source: str, model: str,
                 old: ModelQuota | RouterBudget | None,
                 new: ModelQuota | RouterBudget | None) -> int:
    """Append one change to the audit log (quota or budget alike); returns its id."""
    row = conn.execute(
        sql.SQL("INSERT INTO {} (actor, action, source, model, old, new) "
                "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id").format(audit_table(names)),
        (actor, action, source, model, _json(old), _json(new))).fetchone()
    assert row is not None
    return int(row[0])


def _json(value: ModelQuota | RouterBudget | None) -> Jsonb | None:
    return None if value is None else Jsonb(value.model_dump())
