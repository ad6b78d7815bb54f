"""Redis loses its data while quotas exist: the next admission restores them from
PostgreSQL and obeys them."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from airflow_llm_router.engine import AsyncRouterClient, RouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings, Wait
from airflow_llm_router.exceptions import ImpossibleRequestError
from airflow_llm_router.quotas import QuotaStore

QUOTA = {"rpm": 3, "tpm": 10**6, "max_concurrency": 10, "window_s": 30}


def test_sync_client_restores_then_obeys(quota_store: QuotaStore, namespace: str,
                                         redis_url: str, lose_redis: Callable[[], int]) -> None:
    quota_store.put("m", QUOTA, actor="a")
    quota_store.put("other", {**QUOTA, "enabled": False}, actor="a")
    assert lose_redis() > 0
    # recovery_share 1: no hold after the loss (test_the_recovery_hold covers it)
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace,
                                                             recovery_share=1.0))
    client.quota_source = quota_store.quotas
    try:
        decisions = [client.admit(10) for _ in range(4)]
        assert [type(d) for d in decisions] == [Admission] * 3 + [Wait]
        assert {d.model for d in decisions if isinstance(d, Admission)} == {"m"}
        assert client.get_quotas() == quota_store.quotas()
    finally:
        client.close()


def test_readers_restore_too(quota_store: QuotaStore, namespace: str, redis_url: str,
                             lose_redis: Callable[[], int]) -> None:
    """The backpressure sensor reads advice before any solver admits: it must see the
    stored quotas after a loss, not wait for an enabled model forever."""
    quota_store.put("m", QUOTA, actor="a")
    lose_redis()
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace),
                                   quota_source=quota_store.quotas)
    try:
        assert client.advice(backlog=10).any_enabled
        lose_redis()
        assert list(client.stats().models) == ["m"]
    finally:
        client.close()


def test_without_source_the_loss_is_an_error(quota_store: QuotaStore, router: RouterClient,
                                             lose_redis: Callable[[], int]) -> None:
    quota_store.put("m", QUOTA, actor="a")
    lose_redis()
    with pytest.raises(ImpossibleRequestError, match="no model has a quota"):
        router.admit(10)


def test_an_unknown_model_is_not_restored_over_live_quotas(
        quota_store: QuotaStore, router: RouterClient) -> None:
    quota_store.put("m", QUOTA, actor="a")
    router.quota_source = lambda: {"ghost": quota_store.quotas()["m"]}
    with pytest.raises(ImpossibleRequestError) as err:
        router.admit(10, models=["ghost"])
    assert err.value.reason == "unknown_model"
    assert sorted(router.get_quotas()) == ["m"]  # Redis held quotas: nothing was written


def test_a_failing_source_leaves_the_rejection(router: RouterClient) -> None:
    def broken() -> dict:
        raise RuntimeError("PostgreSQL is down")

    router.quota_source = broken
    with pytest.raises(ImpossibleRequestError, match="no model has a quota"):
        router.admit(10)


def test_a_failing_source_is_reported_once_not_per_read(
    router: RouterClient, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []

    def broken() -> dict:
        calls.append(1)
        raise RuntimeError("PostgreSQL is down")

    router.quota_source = broken
    with caplog.at_level("WARNING", logger="airflow_llm_router.engine.api"):
        for _ in range(5):
            router.stats()
    assert len(calls) == 5  # every read still tries to restore
    warnings = [r for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(warnings) == 1 and "PostgreSQL is down" in warnings[0].getMessage()


def test_a_synced_redis_is_not_restored_on_reads(router: RouterClient) -> None:
    """Quotas written as a sync (the demo's, a quota store's) mark Redis whole: readers do
    not go to the source at all."""
    calls = []
    router.sync_quotas({})
    router.quota_source = lambda: calls.append(1) or {}
    router.stats()
    router.advice(10)
    assert calls == []


async def test_async_client_restores_for_a_batch(quota_store: QuotaStore, namespace: str,
                                                 redis_url: str,
                                                 lose_redis: Callable[[], int]) -> None:
    quota_store.put("m", QUOTA, actor="a")
    lose_redis()
    client = AsyncRouterClient(aioredis.Redis.from_url(redis_url),
                               RouterSettings(namespace=namespace, recovery_share=1.0),
                               quota_source=quota_store.quotas)
    try:
        decisions = await client.admit_many([AdmitRequest(estimated_tokens=10)
                                             for _ in range(5)])
        assert [type(d) for d in decisions] == [Admission] * 3 + [Wait] * 2
        assert (await client.get_quota("m")) == quota_store.quotas()["m"]
    finally:
        await client.aclose()


def test_a_change_after_a_loss_brings_back_the_other_quotas(
        quota_store: QuotaStore, router: RouterClient, lose_redis: Callable[[], int]) -> None:
    """PUT keep1 and keep2, lose Redis, PATCH keep1: keep2 must not be forgotten (its tasks
    would be dead-lettered as "unknown model")."""
    quota_store.put("keep1", QUOTA, actor="a")
    quota_store.put("keep2", QUOTA, actor="a")
    lose_redis()
    quota_store.patch("keep1", {"rpm": 5}, actor="a")
    assert sorted(router.get_quotas()) == ["keep1", "keep2"]
    assert router.get_quota("keep1").rpm == 5  # the change itself, not the old value
    # keep2 is known (not "unknown model"): it waits out the recovery hold like keep1
    decision = router.admit(10, models=["keep2"])
    assert isinstance(decision, Wait) and decision.reason == "recovery", decision


def test_admission_restores_a_model_missing_after_a_loss(
        quota_store: QuotaStore, namespace: str, redis_url: str,
        lose_redis: Callable[[], int]) -> None:
    """Redis holds some quotas again (written straight to the engine after the loss), yet
    lacks others that PostgreSQL knows: the admission of a missing one restores it."""
    quota_store.put("keep1", QUOTA, actor="a")
    quota_store.put("keep2", QUOTA, actor="a")
    lose_redis()
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace,
                                                             recovery_share=1.0),
                                   quota_source=quota_store.quotas)
    try:
        client.set_quota("keep1", QUOTA)
        decision = client.admit(10, models=["keep2"])
        assert isinstance(decision, Admission) and decision.model == "keep2"
        assert client.quotas_synced()
    finally:
        client.close()


def test_a_deleted_model_stays_deleted(quota_store: QuotaStore, namespace: str,
                                       redis_url: str) -> None:
    quota_store.put("m", QUOTA, actor="a")
    quota_store.put("gone", QUOTA, actor="a")
    quota_store.delete("gone", actor="a")
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace),
                                   quota_source=quota_store.quotas)
    try:
        with pytest.raises(ImpossibleRequestError) as err:
            client.admit(10, models=["gone"])
        assert err.value.reason == "unknown_model"
        assert sorted(client.get_quotas()) == ["m"]
    finally:
        client.close()


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_the_recovery_hold(quota_store: QuotaStore, namespace: str, redis_url: str,
                           lose_redis: Callable[[], int], share: float) -> None:
    """After a loss the calls sent just before it are unknown to Redis: for one window +
    guard each model is admitted at the recovery share of its quota (0: not at all), then
    at its whole quota again. A new namespace's first quota starts no hold."""
    window = {"rpm": 10, "tpm": 10**6, "max_concurrency": 100, "window_s": 0.5}
    quota_store.put("m", window, actor="a")
    client = RouterClient.from_url(
        redis_url, RouterSettings(namespace=namespace, recovery_share=share, guard_ms=50),
        quota_source=quota_store.quotas)
    try:
        first = client.admit(1)
        assert isinstance(first, Admission)  # a first quota is no loss: no hold
        lose_redis()
        lost_at = time.monotonic()
        held = [client.admit(1) for _ in range(10)]
        admitted = [d for d in held if isinstance(d, Admission)]
        assert len(admitted) == int(10 * share), held
        waits = [d for d in held if isinstance(d, Wait)]
        assert waits and all(w.reason == ("recovery" if share == 0 else "rpm")
                             for w in waits), waits
        # the hold ends one window + guard after the loss was found
        got = client.wait_for_admission(AdmitRequest(1), timeout_s=5)
        assert got is not None and time.monotonic() - lost_at >= 0.5
        lost_after = time.monotonic() - lost_at
        more = [client.admit(1) for _ in range(10)]
        assert sum(isinstance(d, Admission) for d in more) >= 4, (lost_after, more)
    finally:
        client.close()
