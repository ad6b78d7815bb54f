"""The asyncio client: same decisions, and waits that end on a release, not a timer."""

from __future__ import annotations

import asyncio

import pytest

from airflow_llm_router.engine import AsyncRouterClient, Completion
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings, Wait
from airflow_llm_router.exceptions import ImpossibleRequestError


@pytest.fixture
async def client(namespace: str, redis_url: str):
    settings = RouterSettings(namespace=namespace, max_wait_ms=30_000)
    client = AsyncRouterClient.from_url(redis_url, settings)
    yield client
    await client.aclose()


async def test_admit_and_complete(client: AsyncRouterClient) -> None:
    await client.set_quota("a", {"rpm": 10, "tpm": 1000, "max_concurrency": 2})
    decisions = await client.admit_many([AdmitRequest(10) for _ in range(3)])
    assert [type(d) for d in decisions] == [Admission, Admission, Wait]
    statuses = await client.complete_many(
        [Completion(d.lease_id, 5, 5) for d in decisions if isinstance(d, Admission)])
    assert statuses == ["released", "released"]
    stats = await client.stats()
    assert stats.models["a"].in_flight == 0 and stats.models["a"].tokens == 20


async def test_waiter_wakes_on_release_not_on_its_timer(client: AsyncRouterClient) -> None:
    await client.set_quota("a", {"rpm": 100, "tpm": 10**6, "max_concurrency": 1})
    holder = await client.admit(1)
    assert isinstance(holder, Admission)
    wait = await client.admit(1)
    assert isinstance(wait, Wait) and wait.retry_after_ms >= 25_000  # only a release helps

    waiter = asyncio.create_task(client.wait_for_admission(AdmitRequest(1), timeout_s=20))
    while (await client.stats()).waiting < 2:  # the waiter has asked and is queued
        await asyncio.sleep(0)
    assert not waiter.done()
    loop = asyncio.get_running_loop()
    released_at = loop.time()
    await client.complete(holder.lease_id, 1, 0)
    admitted = await asyncio.wait_for(waiter, timeout=5)
    assert admitted is not None and admitted.model == "a"
    assert loop.time() - released_at < 1.0  # woken by the release, far before its 25 s timer


async def test_impossible_request_raises(client: AsyncRouterClient) -> None:
    await client.set_quota("a", {"rpm": 1, "tpm": 10, "max_concurrency": 1})
    with pytest.raises(ImpossibleRequestError, match="split the prompt"):
        await client.admit(11)


async def test_timeout_withdraws_the_waiter(client: AsyncRouterClient) -> None:
    await client.set_quota("a", {"rpm": 1, "tpm": 1000, "max_concurrency": 5})
    assert isinstance(await client.admit(1), Admission)
    assert await client.wait_for_admission(AdmitRequest(1), timeout_s=0.05) is None
    assert (await client.stats()).waiting == 0


async def test_rpm_waiter_sleeps_through_releases_but_not_quota_changes(
    client: AsyncRouterClient,
) -> None:
    await client.set_quota("a", {"rpm": 2, "tpm": 10**6, "max_concurrency": 10,
                                 "window_s": 60})
    first, second = await client.admit_many([AdmitRequest(1), AdmitRequest(1)])
    assert isinstance(first, Admission) and isinstance(second, Admission)
    listener = client.releases
    await listener.start()
    seen = listener.mark()
    await client.complete(first.lease_id, 1, 0)  # a release: frees a slot, not the window
    assert await listener.wait(seen, 5.0)  # it reached the listener...
    # ...but a waiter that only the window or a quota change can help does not wake on it
    assert not await listener.wait(seen, 0.3, releases=False)

    blocked = await client.admit(1)
    assert isinstance(blocked, Wait) and blocked.reason == "rpm"
    waiter = asyncio.create_task(client.wait_for_admission(AdmitRequest(1), timeout_s=50))
    while (await client.stats()).waiting < 2:  # asked and queued, its timer ~60 s away
        await asyncio.sleep(0)
    await client.set_quota("a", {"rpm": 10, "tpm": 10**6, "max_concurrency": 10,
                                 "window_s": 60})
    admitted = await asyncio.wait_for(waiter, timeout=5)  # woken by the quota change
    assert admitted is not None and admitted.model == "a"
