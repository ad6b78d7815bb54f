"""Riding out a Redis outage: retried within the budget, raised past it, bugs never retried."""

from __future__ import annotations

import pytest
import redis.exceptions

from airflow_llm_router.solver.outage import RedisOutage


class Flaky:
    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    async def __call__(self, value: int) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return value * 2


async def test_connection_errors_are_retried_until_redis_answers() -> None:
    outage = RedisOutage(budget_s=30)
    call = Flaky(3, redis.exceptions.ConnectionError("refused"))
    assert await outage.call(call, 21, what="test") == 42
    assert call.calls == 4 and outage.outages == 1 and not outage.down


async def test_past_the_budget_the_error_surfaces() -> None:
    outage = RedisOutage(budget_s=0)
    call = Flaky(10, redis.exceptions.ConnectionError("refused"))
    with pytest.raises(redis.exceptions.ConnectionError):
        await outage.call(call, 1, what="test")
    assert call.calls == 1


async def test_other_errors_are_not_retried() -> None:
    outage = RedisOutage(budget_s=30)
    call = Flaky(1, redis.exceptions.ResponseError("ERR bad script"))
    with pytest.raises(redis.exceptions.ResponseError):
        await outage.call(call, 1, what="test")
    assert call.calls == 1 and outage.outages == 0


def test_a_negative_budget_names_the_setting() -> None:
    with pytest.raises(ValueError, match="redis_outage_s"):
        RedisOutage(-1)
