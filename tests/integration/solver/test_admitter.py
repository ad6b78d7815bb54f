"""The solver's batched admission against the real Redis: what it leaves in the engine."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings
from airflow_llm_router.solver.admitter import BatchAdmitter

pytestmark = pytest.mark.timeout(60)


class SlowWithdrawals(AsyncRouterClient):
    """The real client on a Redis slow to withdraw (loaded, or loading the script first:
    the flaky test failed so on a fresh machine)."""

    async def cancel(self, request_ids: Sequence[str]) -> int:
        await asyncio.sleep(0.05)
        return await super().cancel(request_ids)


@pytest.fixture
async def client(namespace: str, redis_url: str):
    client = SlowWithdrawals.from_url(redis_url, RouterSettings(namespace=namespace))
    yield client
    await client.aclose()


async def test_requests_past_their_deadline_are_withdrawn_before_their_callers_hear(
    client: AsyncRouterClient,
) -> None:
    """A drain whose deadline passes gets None for its waiting prompts and closes its
    admitter at once. The withdrawal from the engine's waiters is done by then: were it
    still under way, the close would cut it, and the engine would hold the model's
    capacity back for those waiters (nobody) until their own deadline. Found as a flaky
    ``test_deadline_returns_unadmitted_items_unfinished`` (15 waiters left)."""
    await client.set_quota("a", {"rpm": 1, "tpm": 10**6, "max_concurrency": 10})
    assert isinstance(await client.admit(10), Admission)  # the window's only request
    async with BatchAdmitter(client) as admitter:
        waits = [asyncio.create_task(
            admitter.admit(AdmitRequest(10, request_id=f"late-{i}"), timeout_s=0.3))
            for i in range(15)]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        # closed as soon as a caller has heard, as a drain closes once it has its answers
    assert [await w for w in waits] == [None] * 15
    assert (await client.stats()).waiting == 0
