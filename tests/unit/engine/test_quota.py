"""Quota validation: bad values are refused with the field named and a fix."""

from __future__ import annotations

import pytest

from airflow_llm_router.engine.quota import ModelQuota, validate_model_name
from airflow_llm_router.exceptions import QuotaValidationError

GOOD = {"rpm": 60, "tpm": 10_000, "max_concurrency": 4}


def test_defaults_and_round_trip() -> None:
    quota = ModelQuota.parse({**GOOD, "input_tpm": 8000})
    assert (quota.weight, quota.enabled, quota.window_s) == (1.0, True, 60.0)
    assert ModelQuota.from_redis(quota.to_redis()) == quota


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"rpm": -1}, "rpm"),
        ({"rpm": 0}, "rpm"),
        ({"tpm": "lots"}, "tpm"),
        ({"tpm": "100"}, "tpm"),
        ({"max_concurrency": 2.5}, "max_concurrency"),
        ({"weight": 0}, "weight"),
        ({"window_s": 0}, "window_s"),
        ({"enabled": "yes"}, "enabled"),
        ({"output_tpm": 0}, "output_tpm"),
        ({"rpm": True}, "rpm"),
        ({"burst": 3}, "burst"),
        ({"rpm": 10**40}, "rpm"),  # absurd: a typo, never a limit
        ({"tpm": 1e40}, "tpm"),
        ({"max_concurrency": float("nan")}, "max_concurrency"),
        ({"window_s": float("inf")}, "window_s"),
    ],
)
def test_bad_values_name_the_field(change: dict, field: str) -> None:
    with pytest.raises(QuotaValidationError) as err:
        ModelQuota.parse({**GOOD, **change})
    assert str(err.value).startswith(f"invalid quota: {field}:")


def test_missing_field_is_named() -> None:
    with pytest.raises(QuotaValidationError, match="max_concurrency: Field required"):
        ModelQuota.parse({"rpm": 1, "tpm": 1})


def test_json_input() -> None:
    assert ModelQuota.parse('{"rpm": 1, "tpm": 2, "max_concurrency": 3}').tpm == 2


@pytest.mark.parametrize("name", ["gpt-4o", "claude/3.5:sonnet", "m_1@v2+fast"])
def test_good_model_names(name: str) -> None:
    assert validate_model_name(name) == name


@pytest.mark.parametrize("name", ["", "a b", "{tag}", "a#1", "a|b", "-lead", "x" * 129])
def test_bad_model_names(name: str) -> None:
    with pytest.raises(QuotaValidationError, match="model:"):
        validate_model_name(name)


def test_an_absurd_count_names_the_largest_allowed() -> None:
    with pytest.raises(QuotaValidationError, match=r"rpm: .*at most 10\^15"):
        ModelQuota.parse({**GOOD, "rpm": 10**40})
    assert ModelQuota.parse({**GOOD, "tpm": 10**15}).tpm == 10**15  # the cap itself is fine
