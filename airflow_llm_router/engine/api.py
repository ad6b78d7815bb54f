"""The public operations of a router client, written once for the sync and async clients.

Each operation runs a :class:`~airflow_llm_router.engine.core.RouterCore` step generator
through ``_drive``, which the sync client implements with blocking calls and the async
client with awaited ones (its methods return awaitables). The clients only do I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_llm_router.engine.advice import Advice
from airflow_llm_router.engine.core import Completion, Decision, RouterCore, Step
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.restore import (
    QuotaSource,
    admit_restoring,
    quotas_synced,
    sync_quotas,
    with_quotas,
)
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.engine.types import (
    Admission,
    AdmitRequest,
    Outcome,
    Priority,
    Rejection,
    RouterSettings,
    Wait,
)
from airflow_llm_router.exceptions import ImpossibleRequestError, LeaseNotFoundError

__all__ = ["RouterAPI", "single_decision"]

log = logging.getLogger(__name__)


def single_decision(decision: Decision) -> Admission | Wait:
    if isinstance(decision, Rejection):
        raise ImpossibleRequestError(decision.reason, decision.message())
    return decision


class RouterAPI:
    """The public operations; ``_drive`` runs a core step generator to its result."""

    core: RouterCore
    #: Where lost quotas are restored from (see :mod:`~airflow_llm_router.engine.restore`).
    quota_source: QuotaSource | None = None

    def _drive(self, step: Step[Any]) -> Any:
        raise NotImplementedError

    def _then(self, result: Any, fn: Any) -> Any:
        raise NotImplementedError

    @property
    def settings(self) -> RouterSettings:
        return self.core.settings

    def set_quota(self, model: str, quota: ModelQuota | dict[str, Any]) -> bool:
        """Create or replace ``model``'s quota (validated); returns True if it was new.

        The change applies at the next admission of every caller, no restart needed.
        """
        return self._drive(self.core.set_quota(model, quota))

    def get_quotas(self) -> dict[str, ModelQuota]:
        """Every model's quota, by model name."""
        return self._drive(self.core.get_quotas())

    def get_quota(self, model: str) -> ModelQuota | None:
        return self._drive(self.core.get_quota(model))

    def delete_quota(self, model: str) -> bool:
        """Remove ``model``'s quota; returns False if it had none."""
        return self._drive(self.core.delete_quota(model))

    def quotas_synced(self) -> bool:
        """Whether Redis holds what the last sync from the durable quota store wrote
        (False after Redis lost its data; see :mod:`~airflow_llm_router.engine.restore`)."""
        return self._drive(quotas_synced(self.core))

    def sync_quotas(self, quotas: Mapping[str, ModelQuota]) -> int:
        """Write each of ``quotas`` that Redis lacks and mark Redis as synced with the
        durable store; returns how many were written."""
        return self._drive(sync_quotas(self.core, quotas))

    def admit_many(self, requests: Sequence[AdmitRequest]) -> list[Decision]:
        """Decide many requests in one round trip per 256: each gets an
        :class:`Admission`, a :class:`Wait` or a :class:`Rejection` (never raises for one)."""
        return self._drive(self._admit(requests))

    def _admit(self, requests: Sequence[AdmitRequest]) -> Step[list[Decision]]:
        if self.quota_source is None:
            return self.core.admit_many(requests)
        return admit_restoring(self.core, requests)

    def _reading(self, step: Step[Any]) -> Step[Any]:
        """Readers of the stats first restore lost quotas (see ``with_quotas``)."""
        return step if self.quota_source is None else with_quotas(self.core, step)

    def _load_quotas(self) -> dict[str, ModelQuota] | None:
        """Read the quota source; a failure is logged, not raised (the caller then gets the
        rejection it would have had without a source)."""
        assert self.quota_source is not None
        try:
            return dict(self.quota_source())
        except Exception as err:
            log.warning("Redis lost its quotas and the quota source could not be read to "
                        "restore them: %s: %s", type(err).__name__, err)
            return None

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
    ) -> Admission | Wait:
        """Reserve capacity for one call, or learn how long to wait.

        Give ``estimated_tokens`` (input + output), or ``input_tokens`` and let the engine
        add the chosen model's learned output per call.

        :raises ImpossibleRequestError: no allowed model could ever admit it.
        """
        request = AdmitRequest(
            estimated_tokens=estimated_tokens,
            estimated_output_tokens=estimated_output_tokens,
            input_tokens=input_tokens,
            models=tuple(models) if models is not None else None,
            ordered=ordered,
            priority=priority,
            **({"request_id": request_id} if request_id else {}),
        )
        return self._then(self._drive(self._admit([request])), lambda d: single_decision(d[0]))

    def heartbeat_many(self, lease_ids: Sequence[str]) -> list[float | None]:
        """Extend leases; each entry is the new TTL in seconds or None if the lease is gone."""
        return self._drive(self.core.heartbeat_many(lease_ids))

    def heartbeat(self, lease_id: str) -> float:
        """Extend one lease by the lease TTL.

        :raises LeaseNotFoundError: the lease expired (its slot was freed) or was completed.
        """
        return self._then(self._drive(self.core.heartbeat_many([lease_id])),
                          lambda ttls: _alive(lease_id, ttls[0]))

    def complete_many(self, completions: Sequence[Completion]) -> list[str]:
        """Settle many leases; statuses ``released``, ``settled`` or ``unknown``."""
        return self._drive(self.core.complete_many(completions))

    def complete(
        self,
        lease_id: str,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        outcome: Outcome = "ok",
        retry_after_s: float | None = None,
    ) -> str:
        """Free the lease's slot, settle actual tokens, and report how the call went."""
        done = Completion(lease_id, input_tokens, output_tokens, outcome, retry_after_s)
        return self._then(self._drive(self.core.complete_many([done])), lambda s: s[0])

    def mark_sent(self, lease_ids: Sequence[str]) -> int:
        """Tell the engine these leases' calls have just been sent to the backend.

        Their window entries restart from now, so a call that waited (in a connection
        pool, say) before reaching the backend still counts for a full window from when the
        backend saw it. Call it right after sending; it only ever makes the window stricter.
        """
        return self._drive(self.core.mark_sent(lease_ids))

    def cancel(self, request_ids: Sequence[str]) -> int:
        """Withdraw waiting requests whose caller gave up."""
        return self._drive(self.core.cancel(request_ids))

    def stats(self, models: Sequence[str] | None = None) -> RouterStats:
        """Current window usage, in-flight calls, health and counters per model."""
        return self._drive(self._reading(self.core.stats(models)))

    def advice(
        self,
        backlog: int,
        per_solver_in_flight: int = 100,
        max_solvers: int = 16,
        input_tokens_per_call: float = 0,
    ) -> Advice:
        """How many solvers saturate the quotas for ``backlog`` waiting tasks (Little's law
        on each model's rate limit and latency; see :mod:`airflow_llm_router.engine.advice`).

        :param input_tokens_per_call: input tokens assumed per call for a model with no
            request in its current window.
        """
        return self._drive(self._reading(self.core.advice(
            backlog, per_solver_in_flight, max_solvers, input_tokens_per_call)))


def _alive(lease_id: str, ttl: float | None) -> float:
    if ttl is None:
        raise LeaseNotFoundError(f"lease {lease_id!r} expired or was completed")
    return ttl
