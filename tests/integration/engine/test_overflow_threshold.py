"""Per-model overflow thresholds (``ModelQuota.overflow_threshold``, lib/capacity.lua and
admit.lua): for a request that lists its models in order, a later model takes it only
while every earlier one is at or over its threshold (a share of its window in use) or
cannot take it; a model below its threshold with room takes a request no later model
takes; with every model with room at or over its threshold, the first of them takes it."""

from __future__ import annotations

import pytest
import yaml

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.types import Admission, Wait
from airflow_llm_router.exceptions import QuotaValidationError
from airflow_llm_router.quotas.loader import parse_quota_document

ROOMY = {"tpm": 10**6, "max_concurrency": 100}
PAIR = ("first", "second")


def _models(router: RouterClient, n: int, tokens: int = 10,
            models: tuple[str, ...] = PAIR) -> list[str]:
    """The model each of ``n`` ordered admissions took ("wait" for a wait)."""
    out = []
    for _ in range(n):
        decision = router.admit(tokens, models=list(models))
        if isinstance(decision, Admission):
            out.append(decision.model)
        else:
            assert isinstance(decision, Wait), decision
            out.append("wait")
    return out


def test_a_later_model_takes_requests_once_the_first_is_over_its_threshold(
        router: RouterClient) -> None:
    router.set_quota("first", {**ROOMY, "rpm": 10, "overflow_threshold": 0.5})
    router.set_quota("second", {**ROOMY, "rpm": 10})
    # first takes while below half its window (0-4 of 10 calls in use); at 5 of 10 the
    # second (below its threshold of 1, with room) takes them; once the second is full the
    # first, over its threshold but with room, takes what it has left; then both are full
    assert _models(router, 21) == ["first"] * 5 + ["second"] * 10 + ["first"] * 5 + ["wait"]


def test_with_every_model_over_its_threshold_the_first_with_room_takes_the_request(
        router: RouterClient) -> None:
    router.set_quota("first", {**ROOMY, "rpm": 10, "overflow_threshold": 0.5})
    router.set_quota("second", {**ROOMY, "rpm": 10, "overflow_threshold": 0.5})
    assert _models(router, 21) == (["first"] * 5 + ["second"] * 5 + ["first"] * 5
                                   + ["second"] * 5 + ["wait"])


def test_without_a_threshold_the_list_overflows_only_when_the_first_is_full(
        router: RouterClient) -> None:
    router.set_quota("first", {**ROOMY, "rpm": 10})
    router.set_quota("second", {**ROOMY, "rpm": 10})
    assert _models(router, 12) == ["first"] * 10 + ["second"] * 2


def test_the_threshold_counts_the_most_used_dimension(router: RouterClient) -> None:
    # tokens: 300 of 1000 in use is under 0.5, 600 is over (calls: 2 of 100, far under)
    router.set_quota("first", {"rpm": 100, "tpm": 1000, "max_concurrency": 100,
                               "overflow_threshold": 0.5})
    router.set_quota("second", {**ROOMY, "rpm": 100})
    assert _models(router, 3, tokens=300) == ["first", "first", "second"]


def test_a_model_over_its_threshold_still_takes_what_only_it_may_take(
        router: RouterClient) -> None:
    router.set_quota("first", {**ROOMY, "rpm": 4, "overflow_threshold": 0.25})
    router.set_quota("second", {**ROOMY, "rpm": 4})
    assert _models(router, 5, models=("first",)) == ["first"] * 4 + ["wait"]


def test_a_model_below_its_threshold_but_full_lets_the_next_take_the_request(
        router: RouterClient) -> None:
    # a concurrency of 1: no room after one call, though its window is far from half used
    router.set_quota("first", {"rpm": 100, "tpm": 10**6, "max_concurrency": 1,
                               "overflow_threshold": 0.5})
    router.set_quota("second", {**ROOMY, "rpm": 100})
    assert _models(router, 3) == ["first", "second", "second"]


def test_the_threshold_is_a_quota_field_like_the_others(router: RouterClient) -> None:
    router.set_quota("first", {**ROOMY, "rpm": 10, "overflow_threshold": 0.8})
    router.set_quota("second", {**ROOMY, "rpm": 10})
    quotas = router.get_quotas()
    assert quotas["first"].overflow_threshold == 0.8
    assert quotas["second"].overflow_threshold == 1.0
    loaded = parse_quota_document(yaml.safe_load(
        "models:\n  first: {rpm: 10, tpm: 1000, max_concurrency: 4, overflow_threshold: 0.7}\n"))
    assert loaded["first"].overflow_threshold == 0.7
    assert "overflow_threshold" in ModelQuota.model_json_schema()["properties"]
    for bad in (0, 1.5, "0.5"):
        with pytest.raises(QuotaValidationError, match=r"overflow_threshold: .*share of the "
                                                      r"model's window in use"):
            ModelQuota.parse({**ROOMY, "rpm": 10, "overflow_threshold": bad})
