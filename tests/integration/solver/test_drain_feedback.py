"""A drain against a provider whose real limit is below the quota: the router learns the
effective limit from the 429s and stops flooding (the quota-fidelity promise, measured by
the backend's own counters)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.solve import DrainTrigger
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile
from tests.integration.backends import serve_backend

TIME_SCALE = 120.0  # the provider's 60 s window lasts 0.5 s
REAL_RPM = 3
QUOTA_RPM = 40
TASKS = 60


def profile() -> SimulatorProfile:
    model = ModelProfile(name="m", median_s=1.0, sigma=0.3, min_s=0.5, max_s=4.0,
                         output_tokens_mean=50, output_tokens_max=200, rpm=REAL_RPM)
    return SimulatorProfile(time_scale=TIME_SCALE, seed=3, models=[model])


def point_backend(monkeypatch: pytest.MonkeyPatch, sim_url: str, **extra: object) -> None:
    """Point the default models_backend connection at ``sim_url`` with these extras."""
    monkeypatch.setenv("AIRFLOW_CONN_MODELS_BACKEND_DEFAULT", json.dumps(
        {"conn_type": "models_backend", "host": sim_url, "extra": {"timeout_s": 30, **extra}}))


async def drain(pg_schema: str, tasks: int) -> dict[str, Any]:
    """Drain ``tasks`` prompts through the real trigger, on the default connections."""
    trigger = DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": pg_schema, "table": "tasks"},
        worker_id="drain-under-test",
        settings={"claim_ttl_s": 30, "claim_batch": tasks, "max_in_flight": 100,
                  "backoff_s": 0.05},
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + 90)
    payload: dict[str, Any] = (await asyncio.wait_for(anext(trigger.run()), 100)).payload
    return payload


@pytest.mark.timeout(120)
async def test_a_real_limit_below_the_quota_is_learned_and_429s_stay_bounded(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    sim_profile = profile()
    window_s = sim_profile.scaled_window_s
    store.enqueue([f"prompt {i}" for i in range(TASKS)])
    with serve_backend(sim_profile, monkeypatch, namespace, pg_dsn) as sim:
        router.set_quota("m", {"rpm": QUOTA_RPM, "tpm": 10**6, "max_concurrency": 100,
                               "window_s": window_s, "expected_output_tokens": 200})
        event = await drain(pg_schema, TASKS)
        totals = httpx.get(f"{sim.url}/stats").json()["totals"]
        timeline = httpx.get(f"{sim.url}/timeline").json()["models"]["m"]
    stats = router.stats().models["m"]
    assert event["status"] == "done", event
    assert store.counts()["solved"] == TASKS
    refused = timeline["rejected"]
    print(f"accepted per window: {timeline['requests']}")
    print(f"429s per window: {refused}; share {stats.limit_share:.3f}, "
          f"cuts {stats.counters['limit_cuts']}")
    # the effective limit came down near the provider's (3 of a quota of 40: a share of
    # 0.075; probing up from there by a call every few windows)...
    assert stats.limit_share <= 0.25 and stats.counters["limit_cuts"] >= 2, stats
    # ...so after the first windows of learning (the first full-quota burst has 37 refused;
    # the share halves per window at most: 20, 10, 5, then what the provider took), a window
    # is refused at most a probe's last step (one call, then two, four...) and, on average,
    # well under one call
    # (windows counted from the first with traffic: on a loaded machine the drain can start
    # a window or two after the simulator's timeline does)
    first = next((i for i, (a, r) in enumerate(zip(timeline["requests"], refused, strict=True))
                  if a or r), 0)
    learning = 5
    after = refused[first + learning:]
    assert max(after, default=0) <= 4, refused
    assert sum(after) <= 0.5 * len(after), refused
    assert sum(refused) <= 2 * QUOTA_RPM, (refused, totals)


@pytest.mark.timeout(120)
async def test_with_an_output_cap_the_reservation_is_exact_and_tpm_holds(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """A token-bound model whose answers run far past the router's prior (10 tokens; the
    provider writes ~150, up to the cap of 300): the backend connection's
    ``max_output_tokens`` goes with every call and admission reserves input + cap, so the
    provider, which charges actual tokens, never refuses one."""
    model = ModelProfile(name="t", median_s=1.0, sigma=0.3, min_s=0.5, max_s=4.0,
                         output_tokens_mean=150, output_tokens_sigma=1.0,
                         output_tokens_max=2000, tpm=3000)
    sim_profile = SimulatorProfile(time_scale=TIME_SCALE, seed=5, models=[model])
    cap = 300
    store.enqueue([f"prompt {i}: " + "word " * (i % 30) for i in range(80)])
    with serve_backend(sim_profile, monkeypatch, namespace, pg_dsn) as sim:
        point_backend(monkeypatch, sim.url, max_output_tokens=cap)
        router.set_quota("t", {"rpm": 10**6, "tpm": 3000, "max_concurrency": 100,
                               "window_s": sim_profile.scaled_window_s,
                               "expected_output_tokens": 10})
        event = await drain(pg_schema, 80)
        stats = httpx.get(f"{sim.url}/stats").json()
    totals, served = stats["totals"], stats["models"]["t"]
    assert event["status"] == "done", event
    assert store.counts()["solved"] == 80, (event, store.counts())
    assert totals["rejected_429"] == 0 and totals["violations"] == 0, totals
    # the answers ran far past the prior (10 per call), within the cap
    assert 80 * 50 < served["output_tokens_accepted"] <= 80 * cap, served
    assert served["peak_accepted_tokens_in_window"] <= 3000, served


@pytest.mark.timeout(120)
async def test_stated_limits_stop_the_429s_after_the_first_burst(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """The provider states its limit in rate-limit headers (real rpm 3, quota 40): the first
    window's burst is refused past the third call (sent at once, before any answer), and
    from the first answer on admission keeps to the stated limit: no 429 after it."""
    sim_profile = profile().with_overrides(rate_limit_headers=True)
    store.enqueue([f"prompt {i}" for i in range(TASKS)])
    with serve_backend(sim_profile, monkeypatch, namespace, pg_dsn) as sim:
        router.set_quota("m", {"rpm": QUOTA_RPM, "tpm": 10**6, "max_concurrency": 100,
                               "window_s": sim_profile.scaled_window_s,
                               "expected_output_tokens": 200})
        point_backend(monkeypatch, sim.url, rate_limit_headers=True)
        event = await drain(pg_schema, TASKS)
        timeline = httpx.get(f"{sim.url}/timeline").json()["models"]["m"]
    stats = router.stats().models["m"]
    assert event["status"] == "done", event
    assert store.counts()["solved"] == TASKS
    refused = timeline["rejected"]
    print(f"429s per window: {refused}; share {stats.limit_share:.3f}")
    assert stats.effective is not None and stats.effective["rpm"] == REAL_RPM, stats
    first = next(k for k, n in enumerate(refused) if n)
    assert refused[first] <= QUOTA_RPM - REAL_RPM, refused
    assert sum(refused[first + 1:]) <= 2, refused


async def drain_late(monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
                     pg_schema: str, store: TaskStore, router: RouterClient, tasks: int,
                     jitter_s: float, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Drain ``tasks`` prompts through a provider of 10 calls per 1 s window that counts
    each call up to ``jitter_s`` after it reaches it (the delay drawn anew every quarter
    window), at a quota equal to that limit; the drain's event and the provider's /stats."""
    model = ModelProfile(name="m", median_s=1.0, sigma=0.3, min_s=0.5, max_s=4.0,
                         output_tokens_mean=50, output_tokens_max=200, rpm=10)
    sim_profile = SimulatorProfile(time_scale=60.0, seed=seed, models=[model],
                                   arrival_jitter_s=jitter_s)
    store.enqueue([f"prompt {i}" for i in range(tasks)])
    with serve_backend(sim_profile, monkeypatch, namespace, pg_dsn) as sim:
        router.set_quota("m", {"rpm": 10, "tpm": 10**6, "max_concurrency": 100,
                               "window_s": sim_profile.scaled_window_s,
                               "expected_output_tokens": 200})
        point_backend(monkeypatch, sim.url, rate_limit_headers=True)
        event = await drain(pg_schema, tasks)
        stats_doc: dict[str, Any] = httpx.get(f"{sim.url}/stats").json()
    return event, stats_doc


@pytest.mark.timeout(150)
async def test_a_varying_arrival_delay_is_measured_and_the_guard_covers_it(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    """The provider counts calls up to 180 ms after they were sent, a delay that changes
    every quarter window (a queue filling and draining), so two calls sent a window apart
    can be counted less than a window apart. The router's least guard is 50 ms; told when
    each call arrived (``x-received-ms``), it widens the model's guard to cover the delay
    and the provider refuses (almost) nothing, at the quota equal to its real limit."""
    tasks = 120
    jitter_s = 0.18
    event, stats_doc = await drain_late(monkeypatch, namespace, pg_dsn, pg_schema, store,
                                        router, tasks, jitter_s, seed=3)
    totals = stats_doc["totals"]
    stats = router.stats().models["m"]
    print(f"{totals['rejected_429']} 429s, guard {stats.guard_ms} ms, "
          f"widened {stats.counters['guard_widened']} times")
    assert event["status"] == "done", event
    assert store.counts()["solved"] == tasks
    assert stats.guard_ms >= 1000 * jitter_s * 0.5, stats  # it measured the delays
    # the answered calls counted from their receipts, the guard only for those in flight
    assert stats.counters.get("receipts", 0) >= tasks // 2, stats
    assert totals["rejected_429"] <= 2, totals


@pytest.mark.timeout(150)
@pytest.mark.parametrize("jitter_s", [0.6, 1.6])
async def test_calls_reaching_the_provider_past_the_guards_cap_never_overfill_a_window(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient, jitter_s: float,
) -> None:
    """A loaded machine, made deterministic: the provider counts calls up to ``jitter_s``
    after they were sent, past the guard's cap (a quarter of the 1 s window), and at 1.6 s
    past the window + guard: a call is still on its way when its send's entry would end.
    A call in flight keeps its place in the window, and an answered one counts a window
    from when the provider says it counted it: not one 429, at the quota equal to the
    provider's real limit."""
    tasks = 60
    event, stats_doc = await drain_late(monkeypatch, namespace, pg_dsn, pg_schema, store,
                                        router, tasks, jitter_s, seed=5)
    totals, peak = stats_doc["totals"], stats_doc["models"]["m"]
    stats = router.stats().models["m"]
    print(f"{totals['rejected_429']} 429s, peak {peak['peak_accepted_requests_in_window']}"
          f", guard {stats.guard_ms} ms, counters {stats.counters}")
    assert event["status"] == "done", event
    assert store.counts()["solved"] == tasks
    assert totals["rejected_429"] == 0, totals
    assert peak["peak_accepted_requests_in_window"] <= 10, peak
    assert stats.counters["late_receipts"] > 0, stats  # calls did arrive past the guard
