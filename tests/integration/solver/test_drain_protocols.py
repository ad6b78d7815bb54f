"""A drain through each backend protocol, against the simulator's face for it in its own
process: every task solved once, no 429 and no window over the provider's limits (counted
by the provider), call options passed through; and each protocol's rate-limit headers
teach the engine a provider limit below the quota."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from airflow_llm_router.tokens import count_input_tokens
from airflow_llm_router.triggers.solve import DrainTrigger
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.faces import FACE_CALLS, face_connection
from llm_router_devkit.simulator.profile import ModelProfile
from tests.integration.backends import serve_backend, set_quotas_from, small_profile

TASKS = 120
SYSTEM = "Answer as a support agent would, in one short paragraph."
PROTOCOLS = ("models_backend", "openai", "anthropic")


def point_backend(monkeypatch: pytest.MonkeyPatch, url: str, protocol: str,
                  **extra: object) -> None:
    """Point the default models_backend connection at the simulator's face for
    ``protocol`` (Anthropic's with a cap: its API requires one)."""
    cap = 400 if protocol == "anthropic" else None
    conn = face_connection(url, protocol, max_output_tokens=cap, timeout_s=30, **extra)
    monkeypatch.setenv("AIRFLOW_CONN_MODELS_BACKEND_DEFAULT",
                       json.dumps({**conn, "password": "sk-test"}))


async def drain(pg_schema: str, tasks: int) -> dict[str, Any]:
    """Drain ``tasks`` prompts through the real trigger, hedges off (so every call counts
    once at the provider)."""
    trigger = DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": pg_schema, "table": "tasks"},
        worker_id="drain-under-test",
        settings={"claim_ttl_s": 30, "claim_batch": tasks, "max_in_flight": 100,
                  "backoff_s": 0.05, "hedge_late_calls": False},
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + 90)
    payload: dict[str, Any] = (await asyncio.wait_for(anext(trigger.run()), 100)).payload
    return payload


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_drain_through_each_protocol_keeps_every_window(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient, protocol: str,
) -> None:
    """Quotas equal to the provider's limits (zero slack, four models of rpm 5 to 40 per
    one-second window); with openai and anthropic, half the tasks carry a system message,
    which the provider charges as input."""
    profile = small_profile(time_scale=60)  # one-second windows
    prompts = [f"ticket {i}: " + "word " * (i % 20) for i in range(TASKS)]
    options = {"llm_call": {"system": SYSTEM, "temperature": 0.1}}
    with_options = protocol != "models_backend"
    store.enqueue(prompts[: TASKS // 2])
    store.enqueue(prompts[TASKS // 2:], metadata=options if with_options else None)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        point_backend(monkeypatch, sim.url, protocol)
        set_quotas_from(router, profile)
        event = await drain(pg_schema, TASKS)
        stats = httpx.get(f"{sim.url}/stats").json()
    totals = stats["totals"]
    assert event["status"] == "done", event
    assert store.counts()["solved"] == TASKS, store.counts()
    assert totals["rejected_429"] == 0 and totals["violations"] == 0, totals
    # every task solved by exactly one call, through this protocol's endpoint
    assert totals["requests"] == totals["completed"] == TASKS, totals
    assert stats["calls"][FACE_CALLS[protocol]] == TASKS, stats["calls"]
    # the provider's input: the prompts, and the system message where it was sent
    expected = sum(count_input_tokens(p) for p in prompts)
    if with_options:
        expected += (TASKS - TASKS // 2) * count_input_tokens(SYSTEM)
    charged = sum(m["input_tokens_accepted"] for m in stats["models"].values())
    assert charged == expected
    # the store's usage is what the provider charged, read where the protocol puts it
    rows = [store.get(i) for i in range(1, TASKS + 1)]
    assert sum(r.input_tokens or 0 for r in rows if r) == expected


REAL_RPM = 3
QUOTA_RPM = 40


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_each_protocols_headers_set_the_effective_limit(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient, protocol: str,
) -> None:
    """The provider allows 3 calls a window and says so in its headers (x-ratelimit-* or
    anthropic-ratelimit-*); the quota says 40. The first burst is refused past the third
    call (sent before any answer); from the first answer on, admission keeps to the
    stated limit: the effective rpm is the provider's and (but for 2) no 429 follows the
    first burst."""
    model = ModelProfile(name="m", median_s=1.0, sigma=0.3, min_s=0.5, max_s=4.0,
                         output_tokens_mean=50, output_tokens_max=200, rpm=REAL_RPM)
    profile = SimulatorProfile(time_scale=120.0, seed=3, models=[model],
                               rate_limit_headers=True)
    store.enqueue([f"prompt {i}" for i in range(40)])
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        point_backend(monkeypatch, sim.url, protocol)
        router.set_quota("m", {"rpm": QUOTA_RPM, "tpm": 10**6, "max_concurrency": 100,
                               "window_s": profile.scaled_window_s,
                               "expected_output_tokens": 200})
        event = await drain(pg_schema, 40)
        timeline = httpx.get(f"{sim.url}/timeline").json()["models"]["m"]
    stats = router.stats().models["m"]
    assert event["status"] == "done", event
    assert store.counts()["solved"] == 40
    refused = timeline["rejected"]
    assert stats.effective is not None and stats.effective["rpm"] == REAL_RPM, stats
    # the first burst goes out before any answer (at most the quota's excess over the real
    # limit refused; on a loaded machine the burst may straddle two 0.5 s windows), and
    # after it at most 2 more: counted in all, not per window
    assert sum(refused) <= QUOTA_RPM - REAL_RPM + 2, refused


@pytest.mark.timeout(60)
async def test_models_backend_fails_a_task_whose_options_it_cannot_send(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """The task with a system message fails alone, with the option named, without a call;
    the others are solved."""
    profile = small_profile()
    store.enqueue(["plain 1", "plain 2"])
    (bad,) = store.enqueue(["with a system message"],
                           metadata={"llm_call": {"system": SYSTEM}})
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        set_quotas_from(router, profile)
        event = await drain(pg_schema, 3)
        totals = httpx.get(f"{sim.url}/stats").json()["totals"]
    row = store.get(bad)
    assert event["status"] == "done", event
    assert store.counts()["solved"] == 2 and totals["requests"] == 2, totals
    assert row is not None and row.status in ("failed", "dead"), row
    assert row.last_error is not None and "metadata.llm_call.system" in row.last_error
