"""Prices and budgets are part of the durable quota: stored in PostgreSQL, restored into a
Redis that lost them, and enforced again from there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission, RouterSettings, Wait
from airflow_llm_router.exceptions import QuotaValidationError
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.quotas.loader import read_quota_file

PRICED = {"rpm": 100, "tpm": 10**6, "max_concurrency": 10,
          "input_micro_usd_per_mtok": 2_000_000, "output_micro_usd_per_mtok": 8_000_000,
          "budget_micro_usd": 1_000, "budget_period_s": 366 * 86400}


def test_prices_are_stored_restored_and_enforced(quota_store: QuotaStore, namespace: str,
                                                 redis_url: str,
                                                 lose_redis: Callable[[], int]) -> None:
    quota_store.put("m", PRICED, actor="a")
    stored = quota_store.get("m")
    assert stored is not None and stored.quota.budget_micro_usd == 1_000
    assert stored.quota.output_micro_usd_per_mtok == 8_000_000
    assert lose_redis() > 0
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace,
                                                             recovery_share=1.0),
                                   quota_source=quota_store.quotas)
    try:
        # 50 in + 50 out = 100 + 400 micro-dollars: two calls fit the 1,000 budget
        got = [client.admit(100, estimated_output_tokens=50, models=["m"]) for _ in range(3)]
        assert [type(d) for d in got] == [Admission, Admission, Wait]
        assert isinstance(got[2], Wait) and got[2].reason == "budget"
        assert client.get_quota("m") == quota_store.quotas()["m"]
        spend = client.stats().models["m"].spend
        assert spend is not None and spend.reserved_micro_usd == 1_000
    finally:
        client.close()


def test_a_patch_of_the_budget_keeps_the_prices(quota_store: QuotaStore,
                                                router: RouterClient) -> None:
    quota_store.put("m", PRICED, actor="a")
    quota_store.patch("m", {"budget_micro_usd": 5_000}, actor="a")
    quota = router.get_quota("m")
    assert quota is not None
    assert (quota.budget_micro_usd, quota.input_micro_usd_per_mtok) == (5_000, 2_000_000)


def test_a_quota_file_carries_prices_and_names_a_bad_one(tmp_path: Path) -> None:
    good = tmp_path / "quotas.yaml"
    good.write_text("models:\n"
                    "  gpt-large: {rpm: 60, tpm: 90000, max_concurrency: 8,\n"
                    "              input_micro_usd_per_mtok: 2500000,\n"
                    "              output_micro_usd_per_mtok: 10000000,\n"
                    "              budget_micro_usd: 50000000, budget_period_s: 86400}\n")
    quota = read_quota_file(good)["gpt-large"]
    assert (quota.input_micro_usd_per_mtok, quota.budget_micro_usd) == (2_500_000, 50_000_000)
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpt-large: {rpm: 60, tpm: 90000, max_concurrency: 8,\n"
                   "            output_micro_usd_per_mtok: -1}\n")
    with pytest.raises(QuotaValidationError, match="gpt-large: output_micro_usd_per_mtok: "):
        read_quota_file(bad)
