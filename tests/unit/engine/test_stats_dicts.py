"""The stats and the advice as JSON: what ``/stats``, the quota page and ``/advice`` send,
field for field as ``dataclasses.asdict`` gave it, without its deep copy of every value
(most of those routes' time over 1,000 models: ``python -m bench.surfaces``)."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from airflow_llm_router.engine.advice import ModelLoad, advise
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.stats import KindStats, ModelStats, RouterStats, SpendStats

QUOTA = ModelQuota.parse({"rpm": 10, "tpm": 10**6, "max_concurrency": 20, "window_s": 10.0})
SPEND = SpendStats(budget_micro_usd=None, settled_micro_usd=5, reserved_micro_usd=2,
                   period_s=86400.0, period_start_ms=1)


def _stats(models: int) -> RouterStats:
    return RouterStats(now_ms=7, waiting=1, total_spend=SPEND, models={
        f"m{k}": ModelStats(
            model=f"m{k}", quota=QUOTA if k % 2 else None, requests=k, tokens=2 * k,
            input_tokens=k, output_tokens=k, in_flight=1, output_estimate=256, cooldown_ms=0,
            breaker="closed", counters={"admitted": k, "errors": 0}, latency_ms=1.5,
            effective={"rpm": 5} if k % 3 == 0 else None,
            kinds={"short": KindStats(output_estimate=40, latency_ms=None, observed=3,
                                      seen_ms_ago=9)},
            spend=SPEND if k % 2 else None)
        for k in range(models)})


def _asdict_stats(stats: RouterStats) -> dict[str, Any]:
    """The documents as they were built with ``dataclasses.asdict``."""
    models = {}
    for name, m in stats.models.items():
        doc = dataclasses.asdict(m)
        doc["quota"] = m.quota.model_dump() if m.quota else None
        models[name] = doc
    return {"now_ms": stats.now_ms, "waiting": stats.waiting, "models": models,
            "total_spend": dataclasses.asdict(stats.total_spend) if stats.total_spend
            else None}


@pytest.fixture
def deep_copies(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every ``copy.deepcopy`` made while the test runs (``asdict`` makes one per value)."""
    made: list[object] = []
    real = copy.deepcopy

    def counting(value: Any, memo: Any = None) -> Any:
        made.append(value)
        return real(value, memo)

    monkeypatch.setattr(copy, "deepcopy", counting)
    return made


def test_stats_dict_is_asdicts_document_without_deep_copies(deep_copies: list[object]
                                                            ) -> None:
    stats = _stats(50)
    expected = _asdict_stats(stats)
    assert deep_copies  # the counter sees asdict's copies
    deep_copies.clear()
    doc = stats.to_dict()
    assert deep_copies == []
    assert doc == expected
    json.dumps(doc)  # JSON-safe
    doc["models"]["m1"]["counters"]["admitted"] = -1  # a copy: the stats stay as read
    assert stats.models["m1"].counters["admitted"] == 1


def test_advice_dict_is_asdicts_document_without_deep_copies(deep_copies: list[object]
                                                             ) -> None:
    advice = advise({f"m{k}": ModelLoad(QUOTA, 10.0 if k % 2 else None, 100.0)
                     for k in range(50)}, backlog=500)
    expected = dataclasses.asdict(advice)
    assert deep_copies  # the counter sees asdict's copies
    deep_copies.clear()
    doc = advice.to_dict()
    assert deep_copies == []
    assert doc == expected
    json.dumps(doc)
