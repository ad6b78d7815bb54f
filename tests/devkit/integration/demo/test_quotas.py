"""Router quotas equal to the simulator's limits, on the scaled window."""

from __future__ import annotations

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from llm_router_devkit.demo.router_quotas import UNLIMITED, router_quotas
from llm_router_devkit.simulator import SimulatorProfile


def test_quotas_mirror_the_profile() -> None:
    profile = SimulatorProfile.default(time_scale=10)
    quotas = router_quotas(profile)
    assert set(quotas) == {m.name for m in profile.models}
    assert quotas["coder"] == {"rpm": 90, "tpm": 40_000, "max_concurrency": 16,
                               "window_s": 6.0, "expected_output_tokens": 1600,
                               "expected_latency_s": 1.0}  # its median, 10 s, scaled
    assert quotas["flash-mini"]["max_concurrency"] == UNLIMITED  # null at the provider


def test_the_router_accepts_them(redis_url: str, namespace: str) -> None:
    quotas = router_quotas(SimulatorProfile.default(time_scale=60))
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    try:
        for model, quota in quotas.items():
            client.set_quota(model, quota)
        stored = client.get_quotas()
    finally:
        client.close()
    assert stored["flash"].rpm == 300 and stored["flash"].window_s == 1.0
