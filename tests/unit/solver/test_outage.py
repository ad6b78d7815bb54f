"""Riding out an outage: retried within the budget and the deadline, raised past them; bugs
and refused passwords never retried."""

from __future__ import annotations

import time

import pytest
import redis.exceptions

from airflow_llm_router.exceptions import TaskStoreError, TaskStoreUnavailable
from airflow_llm_router.solver.outage import RedisOutage, StoreOutage


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


@pytest.mark.parametrize("error", [
    redis.exceptions.ResponseError("ERR bad script"),
    # redis-py raises it as a ConnectionError; retrying it only delays the error
    redis.exceptions.AuthenticationError("WRONGPASS"),
    redis.exceptions.AuthorizationError("NOPERM"),
])
async def test_other_errors_and_a_refused_password_are_not_retried(error: Exception) -> None:
    outage = RedisOutage(budget_s=30)
    call = Flaky(1, error)
    with pytest.raises(type(error)):
        await outage.call(call, 1, what="test")
    assert call.calls == 1 and outage.outages == 0


def test_a_negative_budget_names_the_setting() -> None:
    with pytest.raises(ValueError, match="redis_outage_s"):
        RedisOutage(-1)


async def test_past_the_deadline_the_error_surfaces_within_the_budget() -> None:
    outage = RedisOutage(budget_s=30, deadline=time.time() - 1)
    call = Flaky(10, redis.exceptions.ConnectionError("refused"))
    with pytest.raises(redis.exceptions.ConnectionError):
        await outage.call(call, 1, what="test")
    assert call.calls == 1


async def test_a_write_of_answers_goes_on_past_the_deadline() -> None:
    outage = StoreOutage(budget_s=30, deadline=time.time() - 1)
    call = Flaky(3, TaskStoreUnavailable("connection broke"))
    assert await outage.call(call, 21, what="test", past_deadline=True) == 42
    assert call.calls == 4


async def test_a_store_error_other_than_unreachable_is_not_retried() -> None:
    outage = StoreOutage(budget_s=30)
    call = Flaky(1, TaskStoreError("table missing"))
    with pytest.raises(TaskStoreError):
        await outage.call(call, 1, what="test")
    assert call.calls == 1


def test_a_negative_store_budget_names_the_setting() -> None:
    with pytest.raises(ValueError, match="store_outage_s"):
        StoreOutage(-1)
