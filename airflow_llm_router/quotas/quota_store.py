"""The durable quotas: PostgreSQL is the source of truth, Redis the copy the engine reads.

Every change is one transaction that writes the quota row and an audit row (who, when,
old, new) and, before committing, pushes the new value to the router's Redis. If the push
fails the transaction rolls back; if the commit fails after a push, the old value is pushed
back. So PostgreSQL and Redis never disagree because of a half-applied change. One
advisory lock per quota table serialises changes, so Redis sees them in commit order.

Each call opens its own short-lived connection: the store is used from the API server's
thread pool and from the CLI, where calls are rare and must not share a connection.

The router-wide spend budget (``RouterBudget``) is kept the same way, in a one-row table
beside the quotas, audited in the same log and restored with the quotas
(:meth:`QuotaStore.durable` is the restore source); its rows' SQL is in
:mod:`airflow_llm_router.quotas.router_budget` and the records the store returns in
:mod:`airflow_llm_router.quotas.records`, while the transaction, lock and push to Redis
that make the one promise above stay here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.quota import ModelQuota, RouterBudget, validate_model_name
from airflow_llm_router.engine.restore import Durable
from airflow_llm_router.exceptions import QuotaNotFoundError, QuotaStoreError
from airflow_llm_router.pg import ADVISORY_LOCK_CLASS, TableNames, migrate
from airflow_llm_router.quotas.quota_schema import QUOTA_MIGRATIONS, audit_table, quota_table
from airflow_llm_router.quotas.records import AuditEntry, QuotaChange, QuotaRecord
from airflow_llm_router.quotas.router_budget import (
    Action,
    BudgetChange,
    BudgetRecord,
    budget_if_migrated,
    insert_audit,
    stored_budget,
    write_budget,
)

log = logging.getLogger(__name__)

#: Second advisory-lock class (the first, ``ADVISORY_LOCK_CLASS``, guards migrations).
_CHANGE_LOCK_CLASS = ADVISORY_LOCK_CLASS + 1


class QuotaStore:
    """Quotas in ``<schema>.<table>`` and their audit log in ``<schema>.<table>_audit``.

    :param dsn: a libpq connection string or URI. Never logged.
    :param router: the router client changes are pushed to; None for a read-only store
        (e.g. the engine's restore source).
    :param schema: the schema (created by :meth:`migrate`); lower-case identifier.
    :param table: the quota table's name; lower-case identifier.
    """

    def __init__(self, dsn: str, router: RouterClient | None = None, *,
                 schema: str = "llm_router", table: str = "quotas") -> None:
        self._names = TableNames(schema=schema, table=table)
        self._dsn = dsn
        self.router = router

    def __repr__(self) -> str:
        return f"QuotaStore(schema={self._names.schema!r}, table={self._names.table!r})"

    # --- connections ------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        params = conninfo_to_dict(self._dsn)
        params.setdefault("application_name", "airflow-llm-router-quotas")
        params.setdefault("connect_timeout", 10)
        try:
            with psycopg.connect(make_conninfo("", **params), autocommit=False) as conn, \
                    conn.transaction():
                yield conn
        except pg_errors.UndefinedTable as err:
            raise QuotaStoreError(
                f"table {self._names.schema}.{self._names.table} does not exist; run "
                "QuotaStore.migrate() (or the quota CLI's 'migrate') once"
            ) from err
        except psycopg.Error as err:
            raise QuotaStoreError(f"quota store: {err}") from err

    def migrate(self) -> int:
        """Create or upgrade the quota tables; idempotent, safe to run concurrently."""
        params = conninfo_to_dict(self._dsn)
        try:
            with psycopg.connect(make_conninfo("", **params), autocommit=False) as conn:
                return migrate(conn, self._names, QUOTA_MIGRATIONS)
        except psycopg.Error as err:
            raise QuotaStoreError(f"quota store migration failed: {err}") from err

    # --- reads ------------------------------------------------------------------------------

    def quotas(self) -> dict[str, ModelQuota]:
        """Every stored quota by model: the source the router restores Redis from."""
        return {r.model: r.quota for r in self.records()}

    def durable(self) -> Durable:
        """Every stored quota and the router-wide budget: what a router client restores
        into a Redis that lost its data (its ``quota_source``)."""
        with self._transaction() as conn:
            quotas = self._stored_quotas(conn)
            budget = budget_if_migrated(conn, self._names)
        return Durable(quotas, None if budget is None else budget.budget)

    def _stored_quotas(self, conn: psycopg.Connection[Any]) -> dict[str, ModelQuota]:
        return {m: ModelQuota.model_validate(q) for m, q in conn.execute(
            sql.SQL("SELECT model, quota FROM {}").format(quota_table(self._names)))}

    def budget_record(self) -> BudgetRecord | None:
        """The stored router-wide budget, or None if none is set."""
        with self._transaction() as conn:
            return stored_budget(conn, self._names)

    def records(self) -> list[QuotaRecord]:
        with self._transaction() as conn:
            rows = conn.execute(
                sql.SQL("SELECT model, quota, updated_at, updated_by FROM {} ORDER BY model")
                .format(quota_table(self._names))).fetchall()
        return [QuotaRecord(m, ModelQuota.model_validate(q), at, by) for m, q, at, by in rows]

    def get(self, model: str) -> QuotaRecord | None:
        with self._transaction() as conn:
            row = conn.execute(
                sql.SQL("SELECT model, quota, updated_at, updated_by FROM {} WHERE model = %s")
                .format(quota_table(self._names)), (model,)).fetchone()
        return None if row is None else QuotaRecord(row[0], ModelQuota.model_validate(row[1]),
                                                    row[2], row[3])

    def audit(self, model: str | None = None, limit: int = 50) -> list[AuditEntry]:
        """The most recent changes first, of one model or of all."""
        where = sql.SQL("WHERE model = %(model)s") if model is not None else sql.SQL("")
        query = sql.SQL(
            "SELECT id, at, actor, action, source, model, old, new FROM {audit} {where} "
            "ORDER BY id DESC LIMIT %(limit)s"
        ).format(audit=audit_table(self._names), where=where)
        with self._transaction() as conn:
            rows = conn.execute(query, {"model": model, "limit": max(1, limit)}).fetchall()
        return [AuditEntry(*row) for row in rows]

    # --- changes ----------------------------------------------------------------------------

    def put(self, model: str, quota: ModelQuota | Mapping[str, Any], *, actor: str,
            source: str = "python") -> QuotaChange:
        """Create or replace ``model``'s quota.

        :raises QuotaValidationError: naming the bad field (nothing is changed).
        :raises QuotaStoreError: PostgreSQL or Redis failed (nothing is changed).
        """
        new = _checked(model, quota)
        return self._change({model: new}, actor=actor, source=source)[0]

    def patch(self, model: str, fields: Mapping[str, Any], *, actor: str,
              source: str = "python") -> QuotaChange:
        """Change some fields of an existing quota; the result is validated as a whole.

        :raises QuotaNotFoundError: ``model`` has no quota.
        """
        validate_model_name(model)
        return self._change({model: dict(fields)}, actor=actor, source=source, patch=True)[0]

    def delete(self, model: str, *, actor: str, source: str = "python") -> QuotaChange:
        """Remove ``model``'s quota (the router stops admitting it).

        :raises QuotaNotFoundError: ``model`` has no quota.
        """
        validate_model_name(model)
        return self._change({model: None}, actor=actor, source=source)[0]

    def load(self, quotas: Mapping[str, ModelQuota | Mapping[str, Any]], *, actor: str,
             source: str = "file", prune: bool = False) -> list[QuotaChange]:
        """Put many quotas in one transaction: all apply or none.

        :param prune: also delete stored models that ``quotas`` does not name.
        :return: the changes, models whose quota was already equal left out.
        """
        wanted: dict[str, ModelQuota | dict[str, Any] | None] = {
            model: _checked(model, quota) for model, quota in quotas.items()}
        if prune:
            for model in self.quotas():
                wanted.setdefault(model, None)
        return [c for c in self._change(wanted, actor=actor, source=source, missing_ok=prune)
                if c.audit_id is not None]

    def set_budget(self, budget: RouterBudget | Mapping[str, Any] | None, *, actor: str,
                   source: str = "python") -> BudgetChange:
        """Set (or with None, remove) the router-wide spend budget: stored, audited and
        pushed to the router's Redis in one transaction, like a quota change.

        :raises QuotaValidationError: naming the bad field (nothing is changed).
        :raises QuotaStoreError: PostgreSQL or Redis failed (nothing is changed).
        """
        new = budget if budget is None or isinstance(budget, RouterBudget) \
            else RouterBudget.parse(dict(budget))
        pushed: BudgetChange | None = None
        try:
            with self._transaction() as conn:
                self._lock_changes(conn)
                self._resync(conn, created=set())  # first what a Redis that lost it lacks
                change = write_budget(conn, self._names, new, actor, source)
                self._push_budget(change.new)
                pushed = change
        except BaseException:
            if pushed is not None:  # the commit failed after the push: undo it
                try:
                    self._push_budget(pushed.old)
                except QuotaStoreError:
                    log.exception("could not restore the previous router-wide budget in "
                                  "Redis after a failed commit")
            raise
        return change

    def _lock_changes(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                     (_CHANGE_LOCK_CLASS, f"{self._names.schema}.{self._names.table}"))

    def _change(self, wanted: Mapping[str, ModelQuota | dict[str, Any] | None], *, actor: str,
                source: str, patch: bool = False, missing_ok: bool = False
                ) -> list[QuotaChange]:
        pushed: list[QuotaChange] = []
        try:
            with self._transaction() as conn:
                self._lock_changes(conn)
                changes = [self._write(conn, model, value, actor, source, patch, missing_ok)
                           for model, value in sorted(wanted.items())]
                self._resync(conn, created={c.model for c in changes if c.old is None})
                for change in changes:
                    # an unchanged value is pushed too: it repairs a Redis that drifted
                    if change.audit_id is not None or change.new is not None:
                        self._push(change.model, change.new)
                        pushed.append(change)
        except BaseException:
            for change in reversed(pushed):  # the commit failed after the push: undo it
                self._undo(change)
            raise
        return changes

    def _write(self, conn: psycopg.Connection[Any], model: str,
               value: ModelQuota | dict[str, Any] | None, actor: str, source: str,
               patch: bool, missing_ok: bool) -> QuotaChange:
        row = conn.execute(
            sql.SQL("SELECT quota FROM {} WHERE model = %s FOR UPDATE")
            .format(quota_table(self._names)), (model,)).fetchone()
        old = None if row is None else ModelQuota.model_validate(row[0])
        if old is None and (patch or value is None):
            if missing_ok:
                return QuotaChange(model, "delete", None, None, None)
            raise QuotaNotFoundError(f"model {model!r} has no quota; create it first (PUT)")
        if isinstance(value, dict):  # a patch: merge, then validate the whole quota
            assert old is not None
            value = _checked(model, {**old.model_dump(), **value})
        action: Action = ("delete" if value is None else "create" if old is None
                          else "patch" if patch else "replace")
        if value == old:
            return QuotaChange(model, action, old, value, None)
        table = quota_table(self._names)
        if value is None:
            conn.execute(sql.SQL("DELETE FROM {} WHERE model = %s").format(table), (model,))
        else:
            conn.execute(
                sql.SQL("INSERT INTO {} (model, quota, updated_at, updated_by) "
                        "VALUES (%s, %s, now(), %s) ON CONFLICT (model) DO UPDATE SET "
                        "quota = EXCLUDED.quota, updated_at = now(), "
                        "updated_by = EXCLUDED.updated_by").format(table),
                (model, Jsonb(value.model_dump()), actor))
        audit_id = insert_audit(conn, self._names, actor, action, source, model, old, value)
        return QuotaChange(model, action, old, value, audit_id)

    def _resync(self, conn: psycopg.Connection[Any], created: set[str]) -> None:
        """Before pushing a change to a Redis that lost its data (no epoch marker), write
        back every stored quota it lacks: otherwise the one model just edited would be the
        only one Redis knows, and the others' work would be refused as "unknown model".
        Redis lost its data (rather than being new) if it lacks a quota stored before this
        change (``created``: the models this change creates); then the recovery hold
        starts too."""
        if self.router is None:
            return
        try:
            if self.router.quotas_synced():
                return
            stored = self._stored_quotas(conn)
            budget = budget_if_migrated(conn, self._names)
            lost = any(m not in created for m in stored)
            restored = self.router.sync_quotas(
                stored, budget=None if budget is None else budget.budget, after_loss=lost)
        except Exception as err:
            raise QuotaStoreError(
                f"cannot restore the stored quotas to the router's Redis ({err}); nothing "
                "was changed, retry when Redis is reachable") from err
        if restored and lost:
            log.warning("the router's Redis had lost %d stored value(s) (quotas and the "
                        "router-wide budget): restored them", restored)
        elif restored:  # a new namespace (or a new schema): nothing was lost
            log.info("wrote %d quota(s) to the router's new Redis namespace", restored)

    def _push(self, model: str, quota: ModelQuota | None) -> None:
        if self.router is None:
            return
        try:
            if quota is None:
                self.router.delete_quota(model)
            else:
                self.router.set_quota(model, quota)
        except Exception as err:
            raise QuotaStoreError(
                f"cannot push the quota of {model!r} to the router's Redis ({err}); "
                "nothing was changed, retry when Redis is reachable"
            ) from err

    def _push_budget(self, budget: RouterBudget | None) -> None:
        if self.router is None:
            return
        try:
            self.router.set_budget(budget)
        except Exception as err:
            raise QuotaStoreError(
                f"cannot push the router-wide budget to the router's Redis ({err}); nothing "
                "was changed, retry when Redis is reachable") from err

    def _undo(self, change: QuotaChange) -> None:
        try:
            self._push(change.model, change.old)
        except QuotaStoreError:
            log.exception("could not restore the previous quota of %r in Redis after a "
                          "failed commit; the router restores it from PostgreSQL only "
                          "after Redis loses every quota", change.model)


def _checked(model: str, quota: ModelQuota | Mapping[str, Any]) -> ModelQuota:
    validate_model_name(model)
    return quota if isinstance(quota, ModelQuota) else ModelQuota.parse(dict(quota))
