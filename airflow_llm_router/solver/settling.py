"""Settling a lease: what a call's result tells the engine, and sending it so a lease never
stays held by a settlement that failed.

Apart from the Solver because it reads only the router and the Redis outage budget, and
because the HTTP API's governed calls (:mod:`airflow_llm_router.web.governed`) settle their
leases from a backend's result the same way.
"""

from __future__ import annotations

import logging

from airflow_llm_router.backend import CallResult
from airflow_llm_router.engine import AsyncRouterClient, Completion
from airflow_llm_router.engine.types import Outcome
from airflow_llm_router.solver.outage import REDIS_DOWN, RedisOutage

__all__ = ["outcome_of", "settle", "settlement"]

log = logging.getLogger(__name__)


async def settle(router: AsyncRouterClient, outage: RedisOutage, done: Completion) -> None:
    """Settle one lease; never raises (an answered call's settlement runs in the
    background, where an error would go unseen, and a failed call's must not fail the
    drain). Past the Redis outage budget it is dropped: its slot frees when the lease
    expires, its window usage stays as estimated (never less). Any other error (a bug,
    or a backend answer the engine cannot take) is logged with its traceback and the
    lease is settled again with nothing but its outcome (usage unknown: the estimate
    stays), so its slot frees now rather than at its expiry."""
    try:
        await outage.call(router.complete_many, [done], what="settlement")
        return
    except REDIS_DOWN:
        log.warning("lease %s not settled (Redis unreachable); it expires by itself",
                    done.lease_id)
        return
    except Exception as err:
        log.exception("lease %s: settlement failed (%r); settling it again with usage "
                      "unknown", done.lease_id, err)
    # only the outcome: a 429 still cools the model down (for the engine's default time)
    bare = Completion(done.lease_id, outcome=done.outcome)
    try:
        await outage.call(router.complete_many, [bare], what="settlement")
    except Exception as err:
        log.error("lease %s not settled (%r); it expires by itself", done.lease_id, err,
                  exc_info=not isinstance(err, REDIS_DOWN))


def outcome_of(result: CallResult) -> Outcome:
    """What a call's result tells the engine: ok, rate limited, the backend does not know
    the model, or an error (any other refusal counts as one)."""
    if result.status in ("ok", "rate_limited", "unknown_model"):
        return result.status
    return "error"


def settlement(lease_id: str, result: CallResult) -> Completion:
    """The settlement of a lease from its call's result: the outcome, the actual usage,
    and what the backend said of its limits and timing."""
    outcome = outcome_of(result)
    said = result.signals
    return Completion(lease_id, result.input_tokens, result.output_tokens, outcome,
                      result.retry_after_s, arrival_delay_s=result.arrival_delay_s,
                      hold_s=said.hold_s if said else None,
                      announced_rpm=said.limit_requests if said else None,
                      announced_tpm=said.limit_tokens if said else None,
                      latency_s=result.latency_s if outcome == "ok" else None,
                      received_at_s=said.received_at_s if said else None)
