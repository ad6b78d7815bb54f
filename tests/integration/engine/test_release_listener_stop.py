"""Closing a client never hangs on its release subscription.

Seen on a Redis Cluster whose slot moved every 50 ms for a whole drain: the cancelled
listener stayed in redis-py's pub/sub read, ``ReleaseListener.stop`` waited for it without
bound, so the drain, every answer written, never ended; and ``stop`` swallowed the
caller's own cancellation. The stubborn read is played here by a task that ignores its
cancellation, beside the real subscription on real Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from airflow_llm_router.engine import AsyncRouterClient, RouterSettings, releases

pytestmark = pytest.mark.timeout(60)


async def _ignores_cancel(release: asyncio.Event, cancelled: asyncio.Event) -> None:
    while not release.is_set():
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.set()


@pytest.fixture
async def stubborn(namespace: str, redis_url: str,
                   monkeypatch: pytest.MonkeyPatch,
                   ) -> AsyncIterator[tuple[AsyncRouterClient, asyncio.Event]]:
    """A router client whose release listener will not end when cancelled, and the event
    set once it has been cancelled."""
    monkeypatch.setattr(releases, "STOP_WAIT_S", 0.3)
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    await router.releases.start()
    real = router.releases._task
    assert real is not None
    release, cancelled = asyncio.Event(), asyncio.Event()
    router.releases._task = asyncio.create_task(_ignores_cancel(release, cancelled))
    yield router, cancelled
    release.set()
    real.cancel()
    await asyncio.gather(real, return_exceptions=True)
    await router.aclose()


async def test_stop_gives_up_on_a_listener_that_ignores_its_cancellation(
        stubborn: tuple[AsyncRouterClient, asyncio.Event],
        caplog: pytest.LogCaptureFixture) -> None:
    router, cancelled = stubborn
    started = time.monotonic()
    await asyncio.wait_for(router.releases.stop(), 10)
    assert cancelled.is_set()
    assert time.monotonic() - started < 5
    assert "did not end within" in caplog.text


async def test_the_callers_cancellation_goes_through_stop(
        stubborn: tuple[AsyncRouterClient, asyncio.Event],
        monkeypatch: pytest.MonkeyPatch) -> None:
    router, cancelled = stubborn
    monkeypatch.setattr(releases, "STOP_WAIT_S", 30.0)
    stopping = asyncio.create_task(router.releases.stop())
    await cancelled.wait()  # stop() has cancelled the listener and waits for it
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stopping, 10)
