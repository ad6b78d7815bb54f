"""The backend client against the simulator: a 200 whose JSON body is cut short (a dropped
connection behind a proxy) is a retryable error, for one prompt and for every item of a
batch, never an answer and never an exception."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_llm_router.backend.calls import call_batch, call_single, http_client
from airflow_llm_router.backend.config import BackendConfig
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer
from llm_router_devkit.simulator.profile import ModelProfile


@pytest.fixture
def cutting_backend() -> Iterator[SimulatorServer]:
    """A simulator whose every accepted call answers 200 with half of its JSON body."""
    profile = SimulatorProfile(time_scale=600, truncate_rate=1.0,
                               models=[ModelProfile(name="m", median_s=1.0)])
    with SimulatorServer(profile) as sim:
        yield sim


async def test_a_cut_body_is_a_retryable_error(cutting_backend: SimulatorServer) -> None:
    config = BackendConfig(base_url=cutting_backend.url, timeout_s=10)
    async with await http_client(config, 4) as http:
        single = await call_single(http, config, model="m", prompt="hello")
        batch = await call_batch(http, config, model="m", prompts=["a", "b", "c"])
    assert (single.status, single.answer, single.retryable) == ("error", None, True)
    assert single.error == "HTTP 200 without a JSON 'answer' field"
    assert [(r.status, r.answer, r.retryable) for r in batch] == [("error", None, True)] * 3
    assert all(r.error and r.error.startswith("JSONDecodeError") for r in batch)
