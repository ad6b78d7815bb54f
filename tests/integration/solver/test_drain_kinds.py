"""A drain passes each task's kind to the engine, which learns output tokens per (model,
kind) from the provider's answers (the simulator writes short summaries, long essays)."""

from __future__ import annotations

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile
from tests.integration.backends import serve_backend
from tests.integration.solver.test_drain_feedback import drain


@pytest.mark.timeout(120)
async def test_the_drain_learns_estimates_per_task_kind(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, router: RouterClient,
) -> None:
    model = ModelProfile(name="m", median_s=1.0, sigma=0.3, min_s=0.2, max_s=3.0,
                         output_tokens_mean=400, output_tokens_sigma=0.3,
                         output_tokens_max=4000)
    sim_profile = SimulatorProfile(time_scale=60.0, seed=7, models=[model],
                                   output_scale_by_prefix={"summary:": 0.05, "essay:": 2.0})
    store.enqueue([f"summary: text {i}" for i in range(30)], kind="summary")
    store.enqueue([f"essay: topic {i}" for i in range(30)], kind="essay")
    store.enqueue([f"plain {i}" for i in range(10)])  # the default kind: no kind of its own
    with serve_backend(sim_profile, monkeypatch, namespace, pg_dsn) as sim:
        router.set_quota("m", {"rpm": 10**5, "tpm": 10**8, "max_concurrency": 100,
                               "window_s": sim_profile.scaled_window_s,
                               "expected_output_tokens": 400})
        event = await drain(pg_schema, 70)
        served = httpx.get(f"{sim.url}/stats").json()["models"]["m"]
    assert event["status"] == "done", event
    assert store.counts()["solved"] == 70
    stats = router.stats().models["m"]
    assert set(stats.kinds) == {"summary", "essay"}, stats.kinds
    summary, essay = stats.kinds["summary"], stats.kinds["essay"]
    assert summary.observed == 30 and essay.observed == 30
    assert summary.output_estimate is not None and essay.output_estimate is not None
    # the provider wrote ~20-token summaries and ~800-token essays; each kind's percentile
    # is its own, and the model's mix sits with the long answers
    assert summary.output_estimate < 60 < 500 < essay.output_estimate, stats.kinds
    assert stats.output_estimate >= essay.output_estimate * 0.8
    assert served["output_tokens_accepted"] > 30 * 500
