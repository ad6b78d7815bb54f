"""A drain whose ``max_in_flight`` is more than one claim's ``claim_batch`` fills its slots
claim after claim at once, not one claim per answer or flush: the lead solver claims the
first burst in small claims, so its first calls are admitted while the rest is claimed."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from llm_router_devkit.simulator import ModelProfile, SimulatorProfile
from tests.integration.backends import drain_of, serve_backend, set_quotas_from

IN_FLIGHT, BATCH = 60, 20


def slow_profile() -> SimulatorProfile:
    """One model with room for every call, each taking 20-40 s: no call ends during the
    test, so nothing but the drain's own loop can start a second claim."""
    model = ModelProfile(name="slow", median_s=30.0, sigma=0.1, min_s=20.0, max_s=40.0,
                         output_tokens_mean=10, output_tokens_max=20, rpm=10_000,
                         tpm=10**8, max_concurrency=200)
    return SimulatorProfile(time_scale=1.0, seed=3, models=[model])


@pytest.mark.timeout(90)
async def test_a_drain_fills_its_slots_in_successive_claims_at_once(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    store.enqueue([f"prompt {i}" for i in range(IN_FLIGHT * 2)])
    # answers are written every 30 s: a flush cannot start the next claim either
    trigger = drain_of(pg_schema, {"claim_ttl_s": 60, "claim_batch": BATCH,
                                   "max_in_flight": IN_FLIGHT, "flush_every_s": 30.0}, 60)
    profile = slow_profile()
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        drain = asyncio.create_task(anext(trigger.run()))
        try:
            counts = await asyncio.to_thread(store.counts)
            deadline = time.monotonic() + 15  # the calls take 20 s at least
            while counts["claimed"] < IN_FLIGHT and time.monotonic() < deadline:
                assert not drain.done(), "the drain ended early"
                await asyncio.sleep(0.05)
                counts = await asyncio.to_thread(store.counts)
        finally:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
    assert counts["claimed"] == IN_FLIGHT, counts  # not BATCH: one claim, then a wait
    assert counts["solved"] == 0  # no answer made room for the later claims
