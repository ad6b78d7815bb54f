"""Airflow's common.ai operators under the router's quotas, beside a drain on the same
model: the example DAG's 20 mapped ``LLMOperator`` tasks, run by ``dag.test()``, call the
governed OpenAI-compatible endpoint (the standalone server, its own process) through their
connection's ``host``, while a ``DrainTrigger`` in this process (its own thread and event
loop) solves task-store tasks on that model. Both take their room from the one quota in
Redis; the simulator behind them, which refuses whatever goes over its limit and counts
every window, never has to."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("airflow.providers.common.ai.operators.llm",
                    reason="apache-airflow-providers-common-ai is not installed")

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from llm_router_devkit.api_server import standalone_api
from llm_router_devkit.simulator import SimulatorProcess, SimulatorProfile
from llm_router_devkit.simulator.faces import FACE_CALLS, face_connection
from llm_router_devkit.simulator.profile import ModelProfile
from tests.integration.backends import drain_of
from tests.integration.solver.drain_across import solved_at
from tests.integration.web.standalone import ROUTER_CONN, TOKEN_CONN, server_env

pytestmark = [pytest.mark.timeout(600)]

TOKEN = secrets.token_urlsafe(24)
MODEL = "summary-model"
#: a few calls per window, at the backend's own limit
RPM = 3
#: drain tasks: at RPM calls a window, more windows than the DAG's 20 calls need alone
DRAINED = 30
CHAT = FACE_CALLS["openai"]


async def drain_from_the_first_dag_call(sim_url: str, pg_schema: str) -> dict[str, Any]:
    """Wait for the DAG's first call to reach the simulator, then drain the store: from
    then on both call the model, whose quota lets the DAG's 19 others through in 6 windows
    at the least, so the drain is under way while they are."""
    async with httpx.AsyncClient(timeout=10) as client:
        while (await client.get(f"{sim_url}/stats")).json()["calls"].get(CHAT, 0) == 0:
            await asyncio.sleep(0.05)  # a poll of the backend's counter: nothing to await
    # no hedges: every task is one call at the backend
    trigger = drain_of(pg_schema, {"claim_ttl_s": 60, "claim_batch": DRAINED,
                                   "max_in_flight": DRAINED, "backoff_s": 0.05,
                                   "hedge_late_calls": False}, 240)
    payload: dict[str, Any] = (await asyncio.wait_for(anext(trigger.run()), 250)).payload
    return payload


@pytest.mark.slow
def test_twenty_mapped_llm_operators_and_a_drain_share_the_quota(
        airflow_db: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, namespace: str,
        pg_dsn: str, pg_schema: str, store: TaskStore, router: RouterClient) -> None:
    from airflow.dag_processing.dagbag import DagBag

    model = ModelProfile(name=MODEL, median_s=3, min_s=1.5, max_s=6, rpm=RPM,
                         output_tokens_mean=40, output_tokens_max=120)
    profile = SimulatorProfile(time_scale=60, seed=3, models=[model])  # 1 s windows
    store.enqueue([f"Ticket {i}: the login page hangs." for i in range(DRAINED)],
                  allowed_models=[MODEL])
    with SimulatorProcess(profile) as sim, ThreadPoolExecutor(1) as pool:
        router.set_quota(MODEL, {"rpm": RPM, "tpm": 100_000, "max_concurrency": RPM,
                                 "window_s": profile.scaled_window_s,
                                 "expected_output_tokens": 128})
        env = server_env(tmp_path, namespace, TOKEN)
        env["AIRFLOW_CONN_LLMR_OPENAI_BACKEND"] = json.dumps(
            face_connection(sim.url, "openai", timeout_s=30))
        # the drain's connections: the same Redis namespace, the same simulator
        monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
             "extra": {"namespace": namespace}}))
        monkeypatch.setenv("AIRFLOW_CONN_MODELS_BACKEND_DEFAULT", json.dumps(
            face_connection(sim.url, "models_backend", timeout_s=30)))
        monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_DEFAULT", pg_dsn)
        with standalone_api(env, ["--token-conn-id", TOKEN_CONN, "--conn-id", ROUTER_CONN,
                                  "--backend-conn-id", "llmr_openai_backend",
                                  "--max-wait-s", "60"], tmp_path / "api.log") as url:
            monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_OPENAI", json.dumps(
                {"conn_type": "pydanticai", "host": f"{url}/v1", "password": TOKEN,
                 "extra": {"model": f"openai-chat:{MODEL}"}}))
            dag = DagBag().get_dag("llm_router_common_ai")
            assert dag is not None
            drain = pool.submit(asyncio.run, drain_from_the_first_dag_call(sim.url, pg_schema))
            run = dag.test()
            dag_ended = time.time()
            event = drain.result(timeout=300)
            tis = run.get_task_instances()
            states = {ti.map_index: ti.state for ti in tis}
        stats = httpx.get(sim.url + "/stats", timeout=10).json()
    assert str(run.state) == "success", states
    assert len(states) == 20
    # every drain task solved once, one call each
    assert event["status"] == "done", event
    counts = store.counts()
    assert counts["solved"] == DRAINED and counts["claimed"] == counts["pending"] == 0, counts
    assert stats["calls"][CHAT] == 20, stats["calls"]
    # the two ran at once: drain answers came while the DAG's tasks were still calling
    answers = solved_at(pg_dsn, pg_schema)
    first_call = min(ti.start_date.timestamp() for ti in tis)
    assert any(first_call < t < dag_ended for t in answers), (first_call, dag_ended, answers)
    backend = stats["models"][MODEL]
    assert backend["accepted"] == 20 + DRAINED and backend["rejected_429"] == 0, backend
    assert backend["violations"]["total"] == 0, backend
    assert backend["peak_accepted_requests_in_window"] <= RPM, backend
    assert router.stats().models[MODEL].in_flight == 0
