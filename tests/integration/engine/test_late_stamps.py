"""A send stamp that comes later than its window entry lasts.

An admission trims window entries a window + guard after their admission. A call can go out
that late (its caller's event loop stalled) or its stamp reach Redis that late (refused while
the router's slot migrated, while admissions went on: tests/integration/solver/
test_drain_resharding.py). The backend counts the call for a whole window from its arrival,
so the router must too: the stamp restores a trimmed entry of a lease still held
(``sent.lua``), and the asyncio client sends no admission while its own stamps are on their
way (``AsyncRouterClient._stamp``).

A call sent and not answered yet can reach the backend later than its send + guard (a
loaded client or provider): the trim keeps its entry while its lease is live
(lib/model_state.lua).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_llm_router.engine import AsyncRouterClient, RouterClient
from airflow_llm_router.engine.types import Admission, RouterSettings, Wait
from tests.integration.engine.admitting import admit_at_once, redis_ms, until_redis_ms

#: rpm 2 in one-second windows. A trim holds a flying call's entry for another guard, then
#: holds it again (and counts it again): a guard of a second, not the least 50 ms, keeps a
#: loaded machine's pause between two steps of a test from adding a hold it did not make
QUOTA = {"rpm": 2, "tpm": 10**6, "max_concurrency": 10, "window_s": 1}
WINDOW_MS, GUARD_MS = 1000, 1000


def wait_past_its_window(router: RouterClient, window: str, lease_id: str) -> None:
    """Until the entry of ``lease_id`` is a window + guard old, by Redis's clock: the next
    admission on its model trims it."""
    admitted_at = router.redis.zscore(window, lease_id)
    assert admitted_at is not None
    until_redis_ms(router, admitted_at + WINDOW_MS + GUARD_MS + 1)


@pytest.fixture
def sync_router(namespace: str, redis_url: str) -> Iterator[RouterClient]:
    router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace,
                                                             guard_ms=GUARD_MS))
    yield router
    router.close()


def test_a_stamp_after_the_trim_restores_the_entry_at_the_send(
    sync_router: RouterClient,
) -> None:
    router = sync_router
    router.set_quota("a", QUOTA)
    learned = router.admit(1)
    assert isinstance(learned, Admission)
    router.complete(learned.lease_id, 10, 40)  # the model has an output estimate
    late = router.admit(1)
    assert isinstance(late, Admission)
    window = router.core.keys.model("K_WIN", "a")
    tokens = router.core.keys.model("K_WTOK", "a")
    wait_past_its_window(router, window, late.lease_id)
    other = router.admit(1)  # trims the late call's entry
    assert isinstance(other, Admission)
    assert router.redis.zscore(window, late.lease_id) is None  # the case under test

    sent_at = redis_ms(router)
    assert router.mark_sent([late.lease_id]) == 1  # its call goes out only now
    assert router.redis.zscore(window, late.lease_id) >= sent_at
    # held at the model's output estimate until it settles (its input is not known)
    est = int(router.redis.hget(router.core.keys.router("K_EST"), "a"))
    assert est > 0
    assert router.redis.hget(tokens, late.lease_id) == f"{est}:0:{est}".encode()
    # the backend's window holds both calls now: at rpm 2 a third must wait
    third = router.admit(1)
    assert isinstance(third, Wait) and third.reason == "rpm", third
    assert router.complete(late.lease_id, 5, 7) == "released"
    assert router.redis.hget(tokens, late.lease_id) == b"12:5:7"
    assert router.mark_sent(["a#404"]) == 0  # an unknown lease is not made up


def test_a_call_in_flight_keeps_its_entry_past_its_window_until_it_is_answered(
    sync_router: RouterClient,
) -> None:
    router = sync_router
    router.set_quota("a", QUOTA)
    # rpm 2: both places, in one admission call (admitted one by one, a stall of a
    # window between them on a loaded machine would let a trim hold the first already)
    answered, flying = admit_at_once(router, 3)
    assert router.mark_sent([answered.lease_id, flying.lease_id]) == 2
    router.complete(answered.lease_id, 10, 40)  # answered, without a receipt
    window = router.core.keys.model("K_WIN", "a")
    wait_past_its_window(router, window, flying.lease_id)
    trimmed_at = redis_ms(router)
    other = router.admit(1)  # trims the answered call's entry, holds the flying one's
    assert isinstance(other, Admission)
    assert router.redis.zscore(window, answered.lease_id) is None
    held = router.redis.zscore(window, flying.lease_id)
    assert held is not None and held >= trimmed_at - WINDOW_MS
    assert router.stats().models["a"].counters["held_in_flight"] == 1
    # the backend may count the flying call from any time until it answers: rpm 2 is full
    third = router.admit(1)
    assert isinstance(third, Wait) and third.reason == "rpm", third
    # answered without a receipt, it leaves at the next trim past its guard
    router.complete(flying.lease_id, 10, 40)
    until_redis_ms(router, held + WINDOW_MS + GUARD_MS + 1)
    assert isinstance(router.admit(1), Admission)
    assert router.redis.zscore(window, flying.lease_id) is None


@pytest.fixture
async def async_router(namespace: str, redis_url: str) -> Any:
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace,
                                                                  guard_ms=GUARD_MS))
    yield router
    await router.aclose()


async def test_admissions_wait_for_the_stamps_on_their_way(
    async_router: AsyncRouterClient, sync_router: RouterClient,
) -> None:
    router = async_router
    await router.set_quota("a", QUOTA)
    late = await router.admit(1)
    assert isinstance(late, Admission)
    window = router.core.keys.model("K_WIN", "a")
    await asyncio.to_thread(wait_past_its_window, sync_router, window, late.lease_id)

    # the fault: the stamp is held on its way to Redis (a slot migration refusing it)
    held, release = asyncio.Event(), asyncio.Event()
    real = router._scripts["sent"]

    async def delayed(**kwargs: Any) -> Any:
        held.set()
        await release.wait()
        return await real(**kwargs)

    router._scripts["sent"] = delayed  # type: ignore[assignment]
    stamp = asyncio.create_task(router.mark_sent([late.lease_id]))
    await asyncio.wait_for(held.wait(), 5)
    admit = asyncio.create_task(router.admit(1))
    # nothing signals an admission that was not sent: give it time to go out, then look
    await asyncio.sleep(0.3)
    assert not admit.done()
    assert sync_router.redis.zcard(window) == 1, "an admission ran before the stamp"

    release.set()
    assert await asyncio.wait_for(stamp, 5) == 1
    assert isinstance(await asyncio.wait_for(admit, 5), Admission)
    # the late call counts from its send: with it and the admission, rpm 2 is full
    third = await router.admit(1)
    assert isinstance(third, Wait) and third.reason == "rpm", third
