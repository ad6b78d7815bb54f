"""Put the quotas back into Redis from their durable source when Redis has lost them.

Redis restarted without persistence (or flushed) has lost its quotas, and the admit script
admits nothing without one (``no_models`` / ``unknown_model``). Redis may also hold *some*
quotas again (one edited on the quota page since) while others are still missing.

The epoch marker (``K_EPOCH``) tells the two cases apart: it is written whenever the quotas
are synced from their durable source (a restore, or a quota store change) and is gone only
when Redis lost its data. A client given a quota source (a callable returning
``{model: ModelQuota}``, e.g. ``QuotaStore.quotas`` reading PostgreSQL) answers such a
rejection, when the marker is missing, by writing every stored quota that Redis lacks, setting
the marker, and asking again once. With the marker present Redis is whole: a model it does
not know was deleted (or never stored), and is not "restored" over a live configuration.
Concurrent restorers write the same values, so restoring twice is harmless.

The router-wide spend budget is restored the same way: a source may answer a
:class:`Durable` (the quotas and the budget, as ``QuotaStore.durable`` does) instead of the
quotas alone, and a budget Redis lacks is written back with the quotas.

Like the rest of the engine's policy this is a step generator with no I/O: reading the
source is a :class:`LoadQuotas` step that each client runs its own way (the async client
in a thread, so a trigger's event loop never blocks on PostgreSQL).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_llm_router.engine.core import RouterCore
from airflow_llm_router.engine.decoding import Decision
from airflow_llm_router.engine.quota import ModelQuota, RouterBudget
from airflow_llm_router.engine.steps import Command, Script, Step
from airflow_llm_router.engine.types import AdmitRequest, Rejection

__all__ = [
    "LOST_QUOTA_REASONS",
    "Durable",
    "LoadQuotas",
    "QuotaSource",
    "Steps",
    "admit_restoring",
    "quotas_synced",
    "sync_quotas",
    "with_quotas",
]

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Durable:
    """What the durable store holds: every model's quota and the router-wide budget (None:
    none is set)."""

    quotas: Mapping[str, ModelQuota]
    budget: RouterBudget | None = None


#: Reads the durable store: the quotas alone, or the quotas and the budget.
QuotaSource = Callable[[], Mapping[str, ModelQuota] | Durable]

#: Rejections that a missing quota hash produces.
LOST_QUOTA_REASONS = ("no_models", "unknown_model")


@dataclass(frozen=True)
class LoadQuotas:
    """Step: read the client's quota source; the reply is a :class:`Durable`, or None if
    the source failed (the failure is logged by the client)."""


#: A step that may also read the quota source: what a client drives.
Steps = Generator[Script | Command | LoadQuotas, Any, T]


def admit_restoring(core: RouterCore, requests: Sequence[AdmitRequest]) -> Steps[list[Decision]]:
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


def with_quotas(core: RouterCore, step: Steps[T]) -> Steps[T]:
    """Run ``step`` after restoring the quotas if Redis holds none.

    For readers (stats, advice): after a loss they would see no model, and a caller that
    waits for an enabled model before starting solvers (the backpressure sensor) would
    wait for an admission that nothing starts. Costs one GET per read.
    """
    yield from restore_quotas(core)
    return (yield from step)


def quotas_synced(core: RouterCore) -> Step[bool]:
    """Whether Redis still holds what the last sync from the durable source wrote (the
    epoch marker is present)."""
    marker = yield Command(("GET", core.keys.router("K_EPOCH")))
    return marker is not None


def sync_quotas(core: RouterCore, quotas: Mapping[str, ModelQuota], *,
                budget: RouterBudget | None = None, after_loss: bool = False) -> Step[int]:
    """Write each of ``quotas`` that Redis lacks (those it holds stay: they were written
    since the loss, by someone who knew better), and ``budget`` (the router-wide one) if
    Redis has none, and set the epoch marker; returns how many values were written.

    ``after_loss``: Redis lost its data (the epoch marker is gone and quotas were wanted):
    also start the recovery hold (``K_RECOVER``), during which each model is admitted at
    ``RouterSettings.recovery_share`` of its quota until one of its windows has passed,
    because the calls sent just before the loss are unknown to this Redis. A first sync of
    a new namespace is not a loss.
    """
    if after_loss and quotas:
        longest_ms = max(q.window_s for q in quotas.values()) * 1000
        yield Script("start_recovery", (str(math.ceil(longest_ms)),))
    present = yield Command(("HKEYS", core.keys.router("K_QUOTAS")))
    held = {x.decode() if isinstance(x, bytes) else str(x) for x in present or ()}
    written = 0
    for model, quota in sorted(quotas.items()):
        if model not in held:
            yield from core.set_quota(model, quota)
            written += 1
    if budget is not None and (yield from core.get_budget()) is None:
        yield from core.set_budget(budget)
        written += 1
    yield Command(("SET", core.keys.router("K_EPOCH"), str(int(time.time() * 1000))))
    return written


def restore_quotas(core: RouterCore) -> Steps[bool]:
    """Write the source's missing quotas if Redis lost its data (no epoch marker); True if
    any were written."""
    if (yield from quotas_synced(core)):
        return False
    stored: Durable | None = yield LoadQuotas()
    if stored is None:
        return False
    written = yield from sync_quotas(core, stored.quotas, budget=stored.budget,
                                     after_loss=True)
    if written:
        log.warning("Redis of router namespace %r had lost %d stored value(s) (quotas and "
                    "the router-wide budget): restored them from the quota store; admitting "
                    "at %.0f %% of each quota for one window",
                    core.settings.namespace, written, 100 * core.settings.recovery_share)
    return written > 0
