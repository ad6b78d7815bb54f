"""Spend and budget gauges reach StatsD through Airflow's Stats (docs/budgets.md)."""

from __future__ import annotations

from airflow_llm_router import metrics
from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission
from tests.integration.test_metrics import StatsdListener, statsd  # noqa: F401 (fixture)


def test_spend_gauges(statsd: StatsdListener, router: RouterClient) -> None:  # noqa: F811
    router.set_quota("gpt/small", {"rpm": 10, "tpm": 1000, "max_concurrency": 5,
                                   "input_micro_usd_per_mtok": 1_000_000,
                                   "output_micro_usd_per_mtok": 2_000_000,
                                   "budget_micro_usd": 1_000})
    router.set_quota("free", {"rpm": 10, "tpm": 1000, "max_concurrency": 5})
    router.set_budget({"budget_micro_usd": 4_000})
    lease = router.admit(100, estimated_output_tokens=50, models=["gpt/small"])
    assert isinstance(lease, Admission)
    router.complete(lease.lease_id, 50, 25)  # 50 + 50 micro-dollars
    assert router.admit(100, models=["free"])
    metrics.usage(router.stats())
    assert statsd.wait_for("airflow.llm_router.spend_micro_usd.gpt_small:") == [
        "airflow.llm_router.spend_micro_usd.gpt_small:100|g"]
    assert statsd.wait_for("airflow.llm_router.budget_used_pct.gpt_small:") == [
        "airflow.llm_router.budget_used_pct.gpt_small:10.0|g"]
    assert statsd.wait_for("airflow.llm_router.total_budget_used_pct:") == [
        "airflow.llm_router.total_budget_used_pct:2.5|g"]
    assert not [line for line in statsd.collect() if "spend_micro_usd.free" in line]
