"""Shared set-up for tests that solve prompts: a simulator, router quotas from its limits,
and Airflow connections (as environment variables) pointing at both."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from airflow_llm_router.engine import RouterClient
from llm_router_devkit.simulator import SimulatorProcess, SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile

if TYPE_CHECKING:
    from airflow_llm_router.triggers.solve import DrainTrigger

BIG_RPM, BIG_TPM, BIG_CONC = 10**6, 10**9, 10**4


def drain_of(pg_schema: str, settings: dict[str, Any], deadline_s: float, *,
             worker_id: str = "drain-under-test") -> DrainTrigger:
    """A drain of the test's store (``pg_schema.tasks``) through the default connections
    (see :func:`serve_backend`), ending ``deadline_s`` from now."""
    from airflow_llm_router.triggers.solve import DrainTrigger

    return DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": pg_schema, "table": "tasks"},
        worker_id=worker_id, settings=settings,
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + deadline_s)


def small_profile(time_scale: float = 120.0, **overrides: object) -> SimulatorProfile:
    """Four fast models whose limits bind at different rates (rpm 5..40 per window)."""
    models = [
        ModelProfile(name=f"m{i}", median_s=1.0, sigma=0.3, min_s=0.5, max_s=4.0,
                     output_tokens_mean=100, output_tokens_max=400, rpm=rpm, tpm=10**6,
                     max_concurrency=conc)
        for i, (rpm, conc) in enumerate([(5, 4), (10, 8), (20, 16), (40, 32)])
    ]
    return SimulatorProfile(time_scale=time_scale, seed=7, models=models, **overrides)


def quotas_from(profile: SimulatorProfile) -> dict[str, dict[str, object]]:
    """Router targets equal to the provider's limits: the tightest setting, zero slack."""
    window_s = profile.window_s / profile.time_scale
    return {m.name: {"rpm": m.rpm or BIG_RPM, "tpm": m.tpm or BIG_TPM,
                     "max_concurrency": m.max_concurrency or BIG_CONC, "window_s": window_s,
                     "expected_output_tokens": m.output_tokens_max}
            for m in profile.models}


def set_quotas_from(router: RouterClient, profile: SimulatorProfile) -> None:
    """Set :func:`quotas_from` in the router."""
    for model, quota in quotas_from(profile).items():
        router.set_quota(model, quota)


@contextmanager
def serve_backend(profile: SimulatorProfile, monkeypatch: pytest.MonkeyPatch,
                  namespace: str, pg_dsn: str) -> Iterator[SimulatorProcess]:
    """Start the simulator (in its own process, like a real backend: in this one, a burst
    of calls would make its clock lag) and point the default connections at it, Redis and
    PostgreSQL."""
    with SimulatorProcess(profile) as sim:
        monkeypatch.setenv("AIRFLOW_CONN_MODELS_BACKEND_DEFAULT", json.dumps(
            {"conn_type": "models_backend", "host": sim.url, "extra": {"timeout_s": 30}}))
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
             "extra": {"namespace": namespace, "lease_ttl_s": 10, "guard_ms": 50}}))
        monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_DEFAULT", pg_dsn)
        yield sim
