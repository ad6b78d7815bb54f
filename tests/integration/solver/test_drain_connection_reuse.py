"""A drain keeps its connections to the backend alive and sends call after call on them:
a new connection costs a connect on both sides (and a TLS handshake before a real
backend), so a client that opened one per call would spend its CPU on that. Counted on
the simulator's side (the distinct client addresses of the calls it served)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from llm_router_devkit.simulator import ModelProfile, SimulatorProfile
from tests.integration.backends import drain_of, serve_backend, set_quotas_from

TASKS = 400
IN_FLIGHT = 16


def fast_profile() -> SimulatorProfile:
    """Two models answering in ~5-10 ms with room for every call: the drain sends calls
    back to back, as a busy triggerer does."""
    return SimulatorProfile(time_scale=200.0, seed=5, models=[
        ModelProfile(name=f"m{i}", median_s=1.0, sigma=0.2, min_s=0.5, max_s=2.0,
                     tail_rate=0.0, output_tokens_mean=50, rpm=100_000, tpm=10**9,
                     max_concurrency=1_000)
        for i in range(2)])


@pytest.mark.timeout(120)
async def test_a_drain_reuses_its_backend_connections(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    store.enqueue([f"prompt {i}" for i in range(TASKS)])
    trigger = drain_of(pg_schema, {"claim_batch": IN_FLIGHT, "max_in_flight": IN_FLIGHT,
                                   "backoff_s": 0.05}, 90)
    profile = fast_profile()
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        httpx.post(sim.url + "/stats/reset", timeout=10).raise_for_status()
        event: dict[str, Any] = dict((await anext(trigger.run())).payload)
        stats = (await asyncio.to_thread(httpx.get, sim.url + "/stats", timeout=10)).json()
    assert event["status"] == "done", event
    assert event["summary"]["solved"] == TASKS, event
    seen = stats["connections"]
    calls = seen["requests"] - 1  # the /stats request itself
    assert calls >= TASKS, seen
    # a connection per slot, and one more per hedge whose loser was cancelled mid-call
    # (its connection cannot carry another request); the /stats request's own. A client
    # opening a connection per call would make it 1 a call; the bound leaves room for
    # idle connections a stalled machine lets expire (4 s) and opens again.
    assert seen["connections"] <= IN_FLIGHT + event["summary"]["hedged"] + 1 + TASKS // 10, (
        seen, event["summary"])
