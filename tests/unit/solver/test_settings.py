"""A drain's settings refuse a store outage budget its claims would not outlive."""

from __future__ import annotations

import pytest

from airflow_llm_router.solver.settings import DrainSettings, parse_settings


def test_a_store_outage_budget_past_two_thirds_of_the_claim_ttl_names_both_fields() -> None:
    with pytest.raises(ValueError) as refused:
        parse_settings(DrainSettings, {"claim_ttl_s": 30, "store_outage_s": 20})
    message = str(refused.value)
    assert message.startswith("settings: store_outage_s (20 s) must be below two thirds "
                              "of claim_ttl_s (30 s, so below 20 s)")
    assert "lower store_outage_s or raise claim_ttl_s" in message


def test_the_rule_holds_for_an_object_built_directly() -> None:
    with pytest.raises(ValueError, match=r"store_outage_s .* claim_ttl_s"):
        DrainSettings(claim_ttl_s=60, store_outage_s=45)


def test_a_budget_below_the_limit_is_kept() -> None:
    settings = parse_settings(DrainSettings, {"claim_ttl_s": 30, "store_outage_s": 19.5})
    assert settings.store_outage_s == 19.5


@pytest.mark.parametrize(("given", "outage"), [
    ({}, 60.0), ({"claim_ttl_s": 30}, 15.0), ({"claim_ttl_s": "12"}, 6.0),
    ({"claim_ttl_s": 30, "store_outage_s": None}, 15.0)])
def test_without_a_budget_a_drain_rides_out_half_its_claim_ttl(
        given: dict[str, object], outage: float) -> None:
    assert parse_settings(DrainSettings, given).store_outage_s == outage


def test_the_trigger_round_trip_keeps_the_budget() -> None:
    """The operator hands ``model_dump()`` to the trigger, which validates it again."""
    settings = DrainSettings(claim_ttl_s=30)
    assert DrainSettings.model_validate(settings.model_dump()) == settings


def test_a_wrong_ttl_gets_its_own_error_not_the_rule() -> None:
    with pytest.raises(ValueError) as refused:
        parse_settings(DrainSettings, {"claim_ttl_s": "soon"})
    assert str(refused.value).startswith("settings.claim_ttl_s: 'soon' is wrong")
