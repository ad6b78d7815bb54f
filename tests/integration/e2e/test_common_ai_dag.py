"""Airflow's common.ai operators under the router's quotas: the example DAG's 20 mapped
``LLMOperator`` tasks, run by ``dag.test()``, call the governed OpenAI-compatible endpoint
(the standalone server, its own process) through their connection's ``host``; the
simulator behind it, which refuses whatever goes over its limit, never has to."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import httpx
import pytest

pytest.importorskip("airflow.providers.common.ai.operators.llm",
                    reason="apache-airflow-providers-common-ai is not installed")

from airflow_llm_router.engine import RouterClient
from llm_router_devkit.api_server import standalone_api
from llm_router_devkit.simulator import SimulatorProcess, SimulatorProfile
from llm_router_devkit.simulator.faces import face_connection
from llm_router_devkit.simulator.profile import ModelProfile
from tests.integration.web.standalone import ROUTER_CONN, TOKEN_CONN, server_env

pytestmark = [pytest.mark.timeout(600)]

TOKEN = secrets.token_urlsafe(24)
MODEL = "summary-model"
#: a few calls per window, at the backend's own limit
RPM = 3


@pytest.mark.slow
def test_twenty_mapped_llm_operators_stay_within_the_quota(
        airflow_db: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, namespace: str,
        router: RouterClient) -> None:
    from airflow.dag_processing.dagbag import DagBag

    model = ModelProfile(name=MODEL, median_s=3, min_s=1.5, max_s=6, rpm=RPM,
                         output_tokens_mean=40, output_tokens_max=120)
    profile = SimulatorProfile(time_scale=60, seed=3, models=[model])  # 1 s windows
    with SimulatorProcess(profile) as sim:
        router.set_quota(MODEL, {"rpm": RPM, "tpm": 100_000, "max_concurrency": RPM,
                                 "window_s": profile.scaled_window_s})
        env = server_env(tmp_path, namespace, TOKEN)
        env["AIRFLOW_CONN_LLMR_OPENAI_BACKEND"] = json.dumps(
            face_connection(sim.url, "openai", timeout_s=30))
        with standalone_api(env, ["--token-conn-id", TOKEN_CONN, "--conn-id", ROUTER_CONN,
                                  "--backend-conn-id", "llmr_openai_backend",
                                  "--max-wait-s", "60"], tmp_path / "api.log") as url:
            monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_OPENAI", json.dumps(
                {"conn_type": "pydanticai", "host": f"{url}/v1", "password": TOKEN,
                 "extra": {"model": f"openai-chat:{MODEL}"}}))
            dag = DagBag().get_dag("llm_router_common_ai")
            assert dag is not None
            run = dag.test()
            states = {ti.map_index: ti.state for ti in run.get_task_instances()}
        stats = httpx.get(sim.url + "/stats", timeout=10).json()
    assert str(run.state) == "success", states
    assert len(states) == 20 and stats["calls"]["chat_completions"] == 20
    backend = stats["models"][MODEL]
    assert backend["accepted"] == 20 and backend["rejected_429"] == 0
    assert backend["violations"]["total"] == 0
    assert backend["peak_accepted_requests_in_window"] <= RPM
    engine = router.stats().models[MODEL]
    assert engine.in_flight == 0
