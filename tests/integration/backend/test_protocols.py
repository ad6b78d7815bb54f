"""One call in each backend protocol, against the simulator's face for it over HTTP: the
answer and usage read where the protocol puts them, call options passed through, the
rate-limit headers and 429s read as each protocol spells them, errors classified alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from airflow_llm_router.backend.calls import CallResult, call_batch, call_single
from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.session import http_client
from airflow_llm_router.tokens import count_input_tokens
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer
from llm_router_devkit.simulator.profile import ModelProfile

PROMPT = "Summarise the ticket in one line, please."
SYSTEM = "You answer in French, briefly and politely."
PROTOCOLS = ("models_backend", "openai", "anthropic")


def _profile(**overrides: Any) -> SimulatorProfile:
    model = ModelProfile(name="m", median_s=1.0, min_s=0.5, max_s=2.0, rpm=2,
                         output_tokens_mean=50, output_tokens_max=200)
    return SimulatorProfile(time_scale=600, seed=11, models=[model], **overrides)


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    """A simulator stating its limits in headers: rpm 2 for a window of 0.1 s."""
    with SimulatorServer(_profile(rate_limit_headers=True)) as server:
        yield server


def config_for(protocol: str, url: str, **extra: Any) -> BackendConfig:
    """The protocol's base URL on the simulator: OpenAI's includes the version."""
    base = f"{url}/v1" if protocol == "openai" else url
    cap = {"max_output_tokens": 64} if protocol == "anthropic" else {}
    return BackendConfig(base_url=base, protocol=protocol, timeout_s=10,
                         **{**cap, **extra})  # type: ignore[arg-type]


async def _calls(config: BackendConfig, n: int, **kwargs: Any) -> list[CallResult]:
    async with await http_client(config, 4) as http:
        return [await call_single(http, config, model=kwargs.pop("model", "m"),
                                  prompt=f"{PROMPT} {i}", **kwargs) for i in range(n)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_answer_usage_and_stated_limits(sim: SimulatorServer, protocol: str) -> None:
    first, second, third = await _calls(config_for(protocol, sim.url), 3,
                                        max_output_tokens=40)
    assert first.status == "ok" and first.answer and "simulated answer" in first.answer
    assert first.input_tokens == count_input_tokens(f"{PROMPT} 0")
    assert first.output_tokens is not None and 0 < first.output_tokens <= 40
    assert first.signals is not None and first.signals.limit_requests == 2
    assert first.signals.received_at_s is not None and first.arrival_delay_s is not None
    # the second call uses the window's last request: nothing remains until the reset
    assert second.status == "ok" and second.signals is not None
    assert second.signals.hold_s is not None and 0 < second.signals.hold_s <= 0.2
    # the third is refused, with the provider's Retry-After
    assert (third.status, third.retryable) == ("rate_limited", True)
    assert third.retry_after_s is not None and 0 < third.retry_after_s <= 0.2
    assert third.signals is not None and third.signals.limit_requests == 2


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_call_options_are_passed_through(sim: SimulatorServer, protocol: str) -> None:
    """The system message reaches the provider (charged as input); temperature, top_p and
    stop sequences are taken."""
    options = {"system": SYSTEM, "temperature": 0.2, "top_p": 0.9, "stop": ["\n\n"]}
    (result,) = await _calls(config_for(protocol, sim.url), 1, options=options)
    assert result.status == "ok", result
    assert result.input_tokens == count_input_tokens(f"{PROMPT} 0") + \
        count_input_tokens(SYSTEM)


async def test_models_backend_refuses_options_it_cannot_send(sim: SimulatorServer) -> None:
    (result,) = await _calls(config_for("models_backend", sim.url), 1,
                             options={"system": SYSTEM})
    assert (result.status, result.retryable) == ("rejected", False)
    assert result.error is not None and "metadata.llm_call.system" in result.error
    assert httpx.get(f"{sim.url}/stats").json()["calls"]["single"] == 0  # never sent


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_unknown_model_is_the_models_fault_and_a_cut_body_retryable(protocol: str) -> None:
    """Each protocol's 404 for a model the provider does not have is ``unknown_model``:
    the solver takes the model out of rotation and sends the prompt elsewhere."""
    with SimulatorServer(_profile(truncate_rate=1.0)) as sim:
        config = config_for(protocol, sim.url)
        (unknown,) = await _calls(config, 1, model="nope")
        (cut,) = await _calls(config, 1)
    assert unknown.status == "unknown_model"
    assert unknown.error is not None and unknown.error.startswith("HTTP 404")
    assert (cut.status, cut.answer, cut.retryable) == ("error", None, True)


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_batch_goes_as_single_calls(protocol: str) -> None:
    """Without a batch endpoint, ``call_batch`` sends each prompt as its own call, at once,
    each with its own cap; the send callback fires once, after the last is sent."""
    sent: list[int] = []
    with SimulatorServer(_profile()) as sim:
        config = config_for(protocol, sim.url)
        async with await http_client(config, 4) as http:
            results = await call_batch(http, config, model="m", prompts=["a", "b"],
                                       caps=[5, 7], on_sent=lambda: sent.append(1))
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.output_tokens is not None and r.output_tokens <= cap
            for r, cap in zip(results, [5, 7], strict=True)] == [True, True]
    assert sent == [1]


async def test_anthropic_version_is_sent_unless_the_connection_sets_it(
    sim: SimulatorServer,
) -> None:
    (default,) = await _calls(config_for("anthropic", sim.url), 1)
    (own,) = await _calls(config_for("anthropic", sim.url,
                                     headers={"Anthropic-Version": "2023-06-01"}), 1)
    assert default.status == own.status == "ok"
