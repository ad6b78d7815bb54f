"""The PostgreSQL task store: enqueue prompts, claim small chunks, write results back.

A :class:`TaskStore` is the parts it holds, each a plain object with one job, all on one
:class:`~.connection.StoreConnection`:

- ``store.connection``: the table's identity, one connection, short transactions, migrations;
- ``store.ingestion``: enqueue, with idempotency keys (:class:`~.ingest.Ingestion`);
- ``store.claims``: the claim cycle, fenced by claim tokens (:class:`~.claims.ClaimCycle`);
- ``store.admin``: the backlog as operators see it: summary, dead letters, requeue
  (:class:`~.admin.BacklogAdmin`).

The calls producers and workers make all day (enqueue, claim, write back, heartbeat) stay on
the store as one-line delegations, so the common path reads ``store.claim(...)``; what only
an operator asks goes through its part (``store.admin.requeue(...)``).

A store owns one connection (opened on first use) and runs every call in its own short
transaction, so it is cheap to keep for a whole operator run. It is meant for one thread;
threads that claim in parallel each make their own store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from airflow_llm_router.names import DEFAULT_KIND
from airflow_llm_router.pg import dsn_from_connection
from airflow_llm_router.store.admin import BacklogAdmin
from airflow_llm_router.store.claims import ClaimCycle
from airflow_llm_router.store.connection import StoreConnection
from airflow_llm_router.store.ingest import Ingestion
from airflow_llm_router.store.records import (
    ClaimedTask,
    ClaimsInProgress,
    Enqueued,
    NewTask,
    TaskFailure,
    TaskResult,
    TaskRow,
)
from airflow_llm_router.store.task_checks import DEFAULT_MAX_PROMPT_CHARS
from airflow_llm_router.store.watch import BacklogWatch

__all__ = ["TaskStore"]

Self = TypeVar("Self", bound="TaskStore")

#: Claims given as ``{task_id: claim_token}``, ``(id, token)`` pairs or ClaimedTasks.
Claims = Mapping[int, str] | Iterable[tuple[int, str] | ClaimedTask]


class TaskStore:
    """The backlog of LLM tasks in ``<schema>.<table>`` (see the module docstring).

    :param dsn: a libpq connection string or ``postgresql://`` URI. Never logged.
    :param schema: schema holding the tasks table and ``schema_version``; lower-case
        identifier, created by :meth:`migrate`.
    :param table: name of the tasks table; lower-case identifier.
    :param max_prompt_chars: longest prompt ``enqueue`` accepts, in characters.
    :raises TaskValidationError: if ``schema`` or ``table`` is not a safe identifier, or
        ``max_prompt_chars`` is not a positive integer.
    """

    def __init__(self, dsn: str, *, schema: str = "llm_router", table: str = "tasks",
                 max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> None:
        self.connection = StoreConnection(dsn, schema=schema, table=table)
        self.ingestion = Ingestion(self.connection, max_prompt_chars=max_prompt_chars)
        self.claims = ClaimCycle(self.connection)
        self.admin = BacklogAdmin(self.connection)

    @classmethod
    def from_conn_id(cls: type[Self], postgres_conn_id: str = "postgres_default",
                     **kw: Any) -> Self:
        """Build a store from an Airflow Postgres connection.

        :param postgres_conn_id: the Airflow connection id.
        :param kw: ``schema``, ``table`` and ``max_prompt_chars``, passed to the constructor.
        """
        from airflow.sdk import BaseHook

        return cls(cls.dsn_from_connection(BaseHook.get_connection(postgres_conn_id)), **kw)

    #: A libpq DSN from an Airflow connection (see ``pg.dsn_from_connection``).
    dsn_from_connection = staticmethod(dsn_from_connection)

    # --- identity, connection, schema ------------------------------------------------------

    @property
    def schema(self) -> str:
        return self.connection.schema

    @property
    def table(self) -> str:
        return self.connection.table

    @property
    def notify_channel(self) -> str:
        """The channel :meth:`enqueue` notifies (payload: number of new tasks); LISTEN on it."""
        return self.connection.notify_channel

    @property
    def max_prompt_chars(self) -> int:
        """The longest prompt :meth:`enqueue` accepts, in characters."""
        return self.ingestion.max_prompt_chars

    def watch(self) -> BacklogWatch:
        """A :class:`BacklogWatch` of this store (``async with store.watch() as w``): its
        backlog and the arrival of new tasks, for async code, on a connection of its own."""
        return self.connection.watch()

    def migrate(self) -> int:
        """Create or upgrade the schema; idempotent and safe to run concurrently.

        :return: the schema version now in place.
        """
        return self.connection.migrate()

    def close(self) -> None:
        """Close the connection; the store reconnects if used again."""
        self.connection.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(schema={self.schema!r}, table={self.table!r})"

    def __enter__(self: Self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- producers: :class:`~.ingest.Ingestion` ----------------------------------------------

    def enqueue(self, prompts: Sequence[str], *, priority: str = "bulk",
                allowed_models: Sequence[str] | None = None, kind: str = DEFAULT_KIND,
                max_attempts: int = 5,
                metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
                idempotency_keys: Sequence[str | None] | None = None,
                on_budget: str = "overflow") -> list[int]:
        """Add tasks, one per prompt; see :meth:`.Ingestion.enqueue`."""
        return self.ingestion.enqueue(
            prompts, priority=priority, allowed_models=allowed_models, kind=kind,
            max_attempts=max_attempts, metadata=metadata, idempotency_keys=idempotency_keys,
            on_budget=on_budget)

    def enqueue_tasks(self, tasks: Sequence[NewTask]) -> Enqueued:
        """Add tasks with settings of their own; see :meth:`.Ingestion.enqueue_tasks`."""
        return self.ingestion.enqueue_tasks(tasks)

    # --- workers: :class:`~.claims.ClaimCycle` -----------------------------------------------

    def claim(self, n: int, *, worker_id: str, claim_ttl_s: float) -> list[ClaimedTask]:
        """Claim up to ``n`` tasks, hot first; see :meth:`.ClaimCycle.claim`."""
        return self.claims.claim(n, worker_id=worker_id, claim_ttl_s=claim_ttl_s)

    def adopt(self, *, worker_id: str, claim_ttl_s: float) -> list[ClaimedTask]:
        """Take back ``worker_id``'s live claims; see :meth:`.ClaimCycle.adopt`."""
        return self.claims.adopt(worker_id=worker_id, claim_ttl_s=claim_ttl_s)

    def complete(self, task_id: int, claim_token: str, *, answer: str, model: str,
                 input_tokens: int | None = None, output_tokens: int | None = None) -> bool:
        """Store one answer, fenced; see :meth:`.ClaimCycle.complete`."""
        return self.claims.complete(task_id, claim_token, answer=answer, model=model,
                                    input_tokens=input_tokens, output_tokens=output_tokens)

    def complete_many(self, results: Iterable[TaskResult | Mapping[str, Any]]
                      ) -> dict[int, bool]:
        """Store a chunk of answers, fenced; see :meth:`.ClaimCycle.complete_many`."""
        return self.claims.complete_many(results)

    def fail(self, task_id: int, claim_token: str, *, error: str,
             retryable: bool = True, model: str | None = None) -> str | None:
        """Record one failed attempt, fenced; see :meth:`.ClaimCycle.fail`."""
        return self.claims.fail(task_id, claim_token, error=error, retryable=retryable,
                                model=model)

    def fail_many(self, failures: Iterable[TaskFailure | Mapping[str, Any]]
                  ) -> dict[int, str | None]:
        """Record a chunk of failed attempts, fenced; see :meth:`.ClaimCycle.fail_many`."""
        return self.claims.fail_many(failures)

    def release(self, task_id: int, claim_token: str) -> bool:
        """Give one claimed task back untried; see :meth:`.ClaimCycle.release`."""
        return self.claims.release(task_id, claim_token)

    def release_many(self, claims: Claims) -> dict[int, bool]:
        """Give claimed tasks back untried; see :meth:`.ClaimCycle.release_many`."""
        return self.claims.release_many(claims)

    def extend_claims(self, claims: Claims, *, claim_ttl_s: float) -> int:
        """Heartbeat: extend still-current claims; see :meth:`.ClaimCycle.extend_claims`."""
        return self.claims.extend_claims(claims, claim_ttl_s=claim_ttl_s)

    def backlog_size(self, *, cap: int | None = None) -> int:
        """Tasks a claim could take now (pending ones up to ``cap``); see
        :meth:`.ClaimCycle.backlog_size`."""
        return self.claims.backlog_size(cap=cap)

    def claims_in_progress(self) -> ClaimsInProgress:
        """Others' live claims; see :meth:`.ClaimCycle.claims_in_progress`."""
        return self.claims.claims_in_progress()

    # --- reads: :class:`~.admin.BacklogAdmin` ------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Tasks per status; see :meth:`.BacklogAdmin.counts`."""
        return self.admin.counts()

    def get(self, task_id: int) -> TaskRow | None:
        """The full row of one task, or None; see :meth:`.BacklogAdmin.get`."""
        return self.admin.get(task_id)
