"""Put the quotas back into Redis from their durable source when Redis has lost them.

Redis restarted without persistence (or flushed) holds no quota, and the admit script
admits nothing without one (``no_models`` / ``unknown_model``). A client given a quota
source (a callable returning ``{model: ModelQuota}``, e.g. ``QuotaStore.quotas`` reading
PostgreSQL) answers such a rejection by checking that the quota hash really is empty (so a
model that simply has no quota is not "restored" over a live configuration), writing every
quota from the source, and asking again once. Concurrent restorers write the same values,
so restoring twice is harmless.

Like the rest of the engine's policy this is a step generator with no I/O: reading the
source is a :class:`LoadQuotas` step that each client runs its own way (the async client
in a thread, so a trigger's event loop never blocks on PostgreSQL).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from airflow_llm_router.engine.core import Command, Decision, RouterCore, Step
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.types import AdmitRequest, Rejection

__all__ = ["LOST_QUOTA_REASONS", "LoadQuotas", "QuotaSource", "admit_restoring", "with_quotas"]

T = TypeVar("T")

log = logging.getLogger(__name__)

QuotaSource = Callable[[], Mapping[str, ModelQuota]]

#: Rejections that a missing quota hash produces.
LOST_QUOTA_REASONS = ("no_models", "unknown_model")


@dataclass(frozen=True)
class LoadQuotas:
    """Step: read the client's quota source; the reply is ``{model: ModelQuota}``, or None
    if the source failed (the failure is logged by the client)."""


def admit_restoring(core: RouterCore, requests: Sequence[AdmitRequest]) -> Step[list[Decision]]:
    """``core.admit_many``, restoring the quotas and retrying the rejected requests once if
    Redis turns out to have lost every quota."""
    decisions = yield from core.admit_many(requests)
    lost = [i for i, d in enumerate(decisions)
            if isinstance(d, Rejection) and d.reason in LOST_QUOTA_REASONS]
    if not lost or not (yield from restore_quotas(core)):
        return decisions
    retried = yield from core.admit_many([requests[i] for i in lost])
    for i, decision in zip(lost, retried, strict=True):
        decisions[i] = decision
    return decisions


def with_quotas(core: RouterCore, step: Step[T]) -> Step[T]:
    """Run ``step`` after restoring the quotas if Redis holds none.

    For readers (stats, advice): after a loss they would see no model, and a caller that
    waits for an enabled model before starting solvers (the backpressure sensor) would
    wait for an admission that nothing starts. Costs one HLEN per read.
    """
    yield from restore_quotas(core)
    return (yield from step)


def restore_quotas(core: RouterCore) -> Step[bool]:
    """Write the source's quotas if Redis holds none; True if any were written."""
    held = yield Command(("HLEN", core.keys.router("K_QUOTAS")))
    if int(held) > 0:
        return False
    quotas = yield LoadQuotas()
    if not quotas:
        return False
    for model, quota in sorted(quotas.items()):
        yield from core.set_quota(model, quota)
    log.warning("Redis of router namespace %r held no quota: restored %d from the quota "
                "store", core.settings.namespace, len(quotas))
    return True
