"""BatchAdmitter routing: a drain's last prompts narrowed to the models that finish them
soonest, never made impossible by it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from airflow_llm_router.engine.client import AsyncRouterClient
from airflow_llm_router.engine.types import AdmitRequest, RouterSettings
from airflow_llm_router.solver.admitter import BatchAdmitter

BIG = {"rpm": 10**6, "tpm": 10**9, "max_concurrency": 10**5}


@pytest.fixture
async def admitter(namespace: str, redis_url: str) -> AsyncIterator[BatchAdmitter]:
    client = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    for model in ("a", "b", "c"):
        await client.set_quota(model, BIG)
    await client.set_quota("small", {**BIG, "tpm": 100})
    async with BatchAdmitter(client) as admitter:
        yield admitter
    await client.aclose()


async def _model(admitter: BatchAdmitter, request: AdmitRequest) -> str:
    lease = await admitter.admit(request, timeout_s=5)
    assert lease is not None
    return lease.model


async def test_routing_narrows_where_requests_go(admitter: BatchAdmitter) -> None:
    admitter.route_to(("b", "a"))  # fastest first: each goes to the first with room
    assert {await _model(admitter, AdmitRequest(10)) for _ in range(6)} == {"b"}
    # an ordered list keeps its order among the models left
    assert await _model(admitter, AdmitRequest(10, models=("c", "b", "a"))) == "b"
    # a prompt that only models outside the set allow still goes where it allows
    assert await _model(admitter, AdmitRequest(10, models=("c",))) == "c"
    admitter.route_to(None)
    assert "c" in {await _model(admitter, AdmitRequest(10)) for _ in range(12)}


async def test_a_narrowed_request_that_cannot_fit_is_asked_as_it_was(
    admitter: BatchAdmitter,
) -> None:
    admitter.route_to(("small",))  # its tpm of 100 can never take 500 tokens
    assert await _model(admitter, AdmitRequest(500)) in {"a", "b", "c"}
