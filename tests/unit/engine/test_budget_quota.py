"""Prices and budgets in a quota: fixed point, validated with errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_llm_router.engine.quota import ModelQuota, RouterBudget
from airflow_llm_router.exceptions import QuotaValidationError

BASE = {"rpm": 10, "tpm": 1000, "max_concurrency": 2}


@pytest.mark.parametrize("fields,field", [
    ({"input_micro_usd_per_mtok": -1}, "input_micro_usd_per_mtok"),
    ({"output_micro_usd_per_mtok": -5}, "output_micro_usd_per_mtok"),
    ({"output_micro_usd_per_mtok": 0.5}, "output_micro_usd_per_mtok"),  # integers only
    ({"input_micro_usd_per_mtok": 10**9 + 1}, "input_micro_usd_per_mtok"),
    ({"input_micro_usd_per_mtok": 1, "budget_micro_usd": -1}, "budget_micro_usd"),
    ({"budget_micro_usd": 100}, "budget_micro_usd"),  # a budget needs a price
    ({"input_micro_usd_per_mtok": 1, "budget_period_s": 0}, "budget_period_s"),
])
def test_bad_prices_and_budgets_name_the_field_and_the_fix(fields: dict[str, Any],
                                                           field: str) -> None:
    with pytest.raises(QuotaValidationError) as err:
        ModelQuota.parse({**BASE, **fields})
    [problem] = err.value.problems
    assert problem.startswith(f"{field}: ")
    assert "(expected " in problem


def test_prices_round_trip_through_redis() -> None:
    quota = ModelQuota.parse({**BASE, "input_micro_usd_per_mtok": 150_000,
                              "budget_micro_usd": 25_000_000, "budget_period_s": 3600})
    assert quota.priced and quota.output_micro_usd_per_mtok is None
    assert ModelQuota.from_redis(quota.to_redis()) == quota
    unpriced = ModelQuota.parse(BASE)
    assert not unpriced.priced
    assert "pi" not in unpriced.to_redis() and "bud" not in unpriced.to_redis()
    assert ModelQuota.from_redis(unpriced.to_redis()) == unpriced


def test_the_router_budget_validates_and_round_trips() -> None:
    budget = RouterBudget.parse({"budget_micro_usd": 5_000_000, "budget_period_s": 60})
    assert RouterBudget.from_redis(budget.to_redis()) == budget
    with pytest.raises(QuotaValidationError, match="budget_micro_usd: "):
        RouterBudget.parse({"budget_micro_usd": -3})
