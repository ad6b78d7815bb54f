"""The public operations of a router client, written once for the sync and async clients.

Each operation is a step generator (see :class:`~airflow_llm_router.engine.core.RouterCore`)
wrapped in :class:`~airflow_llm_router.engine.operation.operation`, the descriptor that
hands the generator to the client's ``_drive`` (blocking on the sync client, awaited on
the async one), so each operation is written and typed once and the clients only do I/O.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from airflow_llm_router.engine.advice import Advice
from airflow_llm_router.engine.core import RouterCore
from airflow_llm_router.engine.decoding import Decision
from airflow_llm_router.engine.encoding import Completion
from airflow_llm_router.engine.history import RouterHistory
from airflow_llm_router.engine.operation import AsyncDriver, SyncDriver, operation
from airflow_llm_router.engine.quota import ModelQuota, RouterBudget
from airflow_llm_router.engine.restore import (
    Durable,
    QuotaSource,
    Steps,
    admit_restoring,
    quotas_synced,
    sync_quotas,
    with_quotas,
)
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.engine.types import (
    Admission,
    AdmitRequest,
    OnBudget,
    Outcome,
    Priority,
    Rejection,
    RouterSettings,
    Wait,
)
from airflow_llm_router.exceptions import ImpossibleRequestError, LeaseNotFoundError

__all__ = ["AsyncDriver", "RouterAPI", "SyncDriver", "operation", "single_decision"]

log = logging.getLogger(__name__)

#: How often a client repeats that its quota source cannot be read.
SOURCE_WARNING_EVERY_S = 60.0

R = TypeVar("R")


def single_decision(decision: Decision) -> Admission | Wait:
    if isinstance(decision, Rejection):
        raise ImpossibleRequestError(decision.reason, decision.message())
    return decision


class RouterAPI:
    """The public operations of both clients (each an :class:`operation`)."""

    core: RouterCore
    #: Where lost quotas are restored from (see :mod:`~airflow_llm_router.engine.restore`).
    quota_source: QuotaSource | None = None
    _source_warned_at: float = -math.inf

    @property
    def settings(self) -> RouterSettings:
        return self.core.settings

    @operation
    def set_quota(self, model: str, quota: ModelQuota | dict[str, Any]) -> Steps[bool]:
        """Create or replace ``model``'s quota (validated); returns True if it was new.

        The change applies at the next admission of every caller, no restart needed.
        """
        return self.core.set_quota(model, quota)

    @operation
    def get_quotas(self) -> Steps[dict[str, ModelQuota]]:
        """Every model's quota, by model name."""
        return self.core.get_quotas()

    @operation
    def get_quota(self, model: str) -> Steps[ModelQuota | None]:
        return self.core.get_quota(model)

    @operation
    def delete_quota(self, model: str) -> Steps[bool]:
        """Remove ``model``'s quota; returns False if it had none."""
        return self.core.delete_quota(model)

    @operation
    def set_budget(self, budget: RouterBudget | dict[str, Any] | None) -> Steps[None]:
        """Set (or with None, remove) the router-wide spend budget: what every priced model
        spends together per period (validated; docs/budgets.md). Applies at the next
        admission; waiters are told to look again."""
        return self.core.set_budget(budget)

    @operation
    def budget(self) -> Steps[RouterBudget | None]:
        """The router-wide spend budget, or None (its spend is in ``stats().total``)."""
        return self.core.get_budget()

    @operation
    def quotas_synced(self) -> Steps[bool]:
        """Whether Redis holds what the last sync from the durable quota store wrote
        (False after Redis lost its data; see :mod:`~airflow_llm_router.engine.restore`)."""
        return quotas_synced(self.core)

    @operation
    def sync_quotas(self, quotas: Mapping[str, ModelQuota], *,
                    budget: RouterBudget | None = None, after_loss: bool = False
                    ) -> Steps[int]:
        """Write each of ``quotas`` that Redis lacks (and ``budget``, the router-wide one,
        if Redis has none) and mark Redis as synced with the durable store; returns how
        many values were written. ``after_loss``: Redis lost its data (not a new
        namespace): admit at the recovery share for one window."""
        return sync_quotas(self.core, quotas, budget=budget, after_loss=after_loss)

    @operation
    def admit_many(self, requests: Sequence[AdmitRequest]) -> Steps[list[Decision]]:
        """Decide many requests in one round trip per 256: each gets an
        :class:`Admission`, a :class:`Wait` or a :class:`Rejection` (never raises for one)."""
        return self._admit(requests)

    def _admit(self, requests: Sequence[AdmitRequest]) -> Steps[list[Decision]]:
        if self.quota_source is None:
            return self.core.admit_many(requests)
        return admit_restoring(self.core, requests)

    def _reading(self, step: Steps[R]) -> Steps[R]:
        """Readers of the stats first restore lost quotas (see ``with_quotas``)."""
        return step if self.quota_source is None else with_quotas(self.core, step)

    def _load_quotas(self) -> Durable | None:
        """Read the quota source; a failure is logged, not raised (the caller then gets the
        rejection it would have had without a source)."""
        assert self.quota_source is not None
        try:
            found = self.quota_source()
            return found if isinstance(found, Durable) else Durable(dict(found))
        except Exception as err:
            now = time.monotonic()
            if now - self._source_warned_at >= SOURCE_WARNING_EVERY_S:  # not once per read
                self._source_warned_at = now
                log.warning("Redis holds no record of a quota sync and the quota source "
                            "could not be read to restore missing quotas: %s: %s",
                            type(err).__name__, err)
            return None

    @operation
    def admit(
        self,
        estimated_tokens: int | None = None,
        *,
        input_tokens: int | None = None,
        models: Sequence[str] | None = None,
        ordered: bool = True,
        priority: Priority = "bulk",
        request_id: str | None = None,
        estimated_output_tokens: int | None = None,
        kind: str | None = None,
        on_budget: OnBudget = "overflow",
    ) -> Steps[Admission | Wait]:
        """Reserve capacity for one call, or learn how long to wait.

        Give ``estimated_tokens`` (input + output), or ``input_tokens`` and let the engine
        add the chosen model's learned output per call (per ``kind``, if given: see
        :class:`AdmitRequest`). ``on_budget``: over a model's spend budget, go on to a later
        model (``"overflow"``) or wait for the period to reset (``"wait"``; docs/budgets.md).

        :raises ImpossibleRequestError: no allowed model could ever admit it.
        """
        named: dict[str, Any] = {"request_id": request_id} if request_id else {}
        request = AdmitRequest(
            estimated_tokens=estimated_tokens,
            estimated_output_tokens=estimated_output_tokens,
            input_tokens=input_tokens,
            models=tuple(models) if models is not None else None,
            ordered=ordered,
            priority=priority,
            kind=kind,
            on_budget=on_budget,
            **named,
        )
        decisions = yield from self._admit([request])
        return single_decision(decisions[0])

    @operation
    def heartbeat_many(self, lease_ids: Sequence[str]) -> Steps[list[float | None]]:
        """Extend leases; each entry is the new TTL in seconds or None if the lease is gone."""
        return self.core.heartbeat_many(lease_ids)

    @operation
    def heartbeat(self, lease_id: str) -> Steps[float]:
        """Extend one lease by the lease TTL.

        :raises LeaseNotFoundError: the lease expired (its slot was freed) or was completed.
        """
        ttls = yield from self.core.heartbeat_many([lease_id])
        if ttls[0] is None:
            raise LeaseNotFoundError(f"lease {lease_id!r} expired or was completed")
        return ttls[0]

    @operation
    def complete_many(self, completions: Sequence[Completion]) -> Steps[list[str]]:
        """Settle many leases; statuses ``released``, ``settled`` or ``unknown``."""
        return self.core.complete_many(completions)

    @operation
    def complete(
        self,
        lease_id: str,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        outcome: Outcome = "ok",
        retry_after_s: float | None = None,
        latency_s: float | None = None,
    ) -> Steps[str]:
        """Free the lease's slot, settle actual tokens, and report how the call went
        (``latency_s``: an ``ok`` call's, from its send to its answer; see
        :class:`Completion`)."""
        done = Completion(lease_id, input_tokens, output_tokens, outcome, retry_after_s,
                          latency_s=latency_s)
        statuses = yield from self.core.complete_many([done])
        return statuses[0]

    @operation
    def mark_sent(self, lease_ids: Sequence[str],
                  ago_s: Sequence[float] | None = None) -> Steps[int]:
        """Tell the engine these leases' calls have been sent to the backend.

        Their window entries restart from when each was sent: now, or ``ago_s`` (one per
        lease, by the caller's own clock, measured just before this call) before the
        script runs in Redis, which is no earlier than the send itself. So a call that
        waited (in a connection pool, say) before reaching the backend still counts for a
        full window from when the backend saw it, and a stamp that waited behind a burst
        of calls costs no more than its wait. It only ever makes the window stricter
        (an entry never moves earlier than its admission).
        """
        return self.core.mark_sent(lease_ids, ago_s)

    @operation
    def cancel(self, request_ids: Sequence[str]) -> Steps[int]:
        """Withdraw waiting requests whose caller gave up."""
        return self.core.cancel(request_ids)

    @operation
    def report_backlog(self, source: str, tasks: int, ttl_s: float = 5.0) -> Steps[int]:
        """Report ``tasks`` waiting in ``source`` (a task store's queue), not yet claimed,
        for ``ttl_s`` seconds. Admission then sees the whole backlog, not only the
        requests waiting in the engine: a slower model takes a request while its call would
        end before the backlog could drain (docs/engine.md, "Finish-time choice"). Every
        drain of one source reports under the same name; a report that is not renewed
        lapses. Returns how many sources report now."""
        return self.core.report_backlog(source, tasks, ttl_s)

    @operation
    def late_after_s(self, model: str) -> Steps[float | None]:
        """When a call on ``model`` is late, in seconds after its admission (the figure
        an admission on it returns now as ``Admission.late_after_s``); None while nothing
        is known of its latency. One read, no script: a caller whose call was admitted
        before the model's latency was known learns it here (solver/hedging.py)."""
        return self.core.late_after_s(model)

    @operation
    def stats(self, models: Sequence[str] | None = None) -> Steps[RouterStats]:
        """Current window usage, in-flight calls, health and counters per model."""
        return self._reading(self.core.stats(models))

    @operation
    def sharded_pubsub(self) -> Steps[bool]:
        """Whether release events go out sharded (SSUBSCRIBE to them) or plain."""
        return self.core.sharded_pubsub()

    @operation
    def history(self, models: Sequence[str] | None = None,
                minutes: int = 60) -> Steps[RouterHistory]:
        """Traffic over the last ``minutes`` (1-60) per model, as the engine recorded it in
        buckets (:mod:`~airflow_llm_router.engine.history`); every model with a quota if
        ``models`` is None.

        :raises ValueError: naming ``minutes`` or a model name that is not valid.
        """
        return self.core.history(models, minutes)

    @operation
    def advice(
        self,
        backlog: int,
        per_solver_in_flight: int = 100,
        max_solvers: int = 16,
        input_tokens_per_call: float = 0,
        backlog_kinds: Mapping[str, int] | None = None,
    ) -> Steps[Advice]:
        """How many solvers saturate the quotas for ``backlog`` waiting tasks (each model's
        window quota sent at once, or Little's law on its rate limit and latency when that
        is the larger; see :mod:`airflow_llm_router.engine.advice`).

        :param input_tokens_per_call: input tokens assumed per call for a model with no
            request in its current window (or with ``backlog_kinds``).
        :param backlog_kinds: the waiting tasks per kind: each model's load is then the
            backlog's mix of what it learned per kind (output tokens, latency).
        """
        return self._reading(self.core.advice(
            backlog, per_solver_in_flight, max_solvers, input_tokens_per_call, backlog_kinds))
