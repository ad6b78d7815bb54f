"""The example drain DAG sizes its fan-out from the router's advice: raising a quota
between two runs changes how many solvers are mapped, with no edit to the DAG.

``dag.test()`` runs one task at a time, so the lead solver (started beside the sensor)
would drain the whole backlog before the sensor looks; the runs here are of the advice and
the mapped solvers alone, which the lead adds one solver to."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile
from tests.integration.backends import serve_backend

WINDOW_S = 1.0


def _run(schema: str) -> tuple[str, int]:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag().get_dag("llm_router_drain")
    assert dag is not None
    assert dag.get_task("advise").lead_solvers == 1
    dag = dag.partial_subset(["advise", "solve"], include_upstream=False)
    run = dag.test(run_conf={"store_schema": schema, "max_in_flight": 1, "max_solvers": 16,
                              "linger_s": 0})
    solvers = [ti for ti in run.get_task_instances() if ti.task_id == "solve"]
    return str(run.state), len(solvers)


@pytest.mark.slow
def test_raising_a_quota_widens_the_fan_out(
    airflow_db: None, monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
    pg_schema: str, redis_url: str,
) -> None:
    # one roomy model: rpm x latency is far above its concurrency, so the concurrency
    # limit alone sets the calls in flight that saturate it (Little's law, capped)
    profile = SimulatorProfile(time_scale=60, seed=3, models=[
        ModelProfile(name="m", median_s=1.0, sigma=0.2, min_s=0.5, max_s=2.0, rpm=10**5,
                     tpm=10**9, max_concurrency=100)])
    quota: dict[str, Any] = {"rpm": 10**5, "tpm": 10**9, "window_s": WINDOW_S,
                             "expected_latency_s": 1.0}
    router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    with TaskStore(pg_dsn, schema=pg_schema) as store, \
            serve_backend(profile, monkeypatch, namespace, pg_dsn):
        store.migrate()
        router.set_quota("m", {**quota, "max_concurrency": 2})
        store.enqueue([f"first run {i}" for i in range(20)])
        first = _run(pg_schema)
        router.set_quota("m", {**quota, "max_concurrency": 5})
        store.enqueue([f"second run {i}" for i in range(20)])
        second = _run(pg_schema)
        assert store.counts()["solved"] == 40
    router.close()
    # 2 calls in flight needed, 1 per solver: the lead and 1 more; then the lead and 4
    assert first == ("success", 1)
    assert second == ("success", 4)
