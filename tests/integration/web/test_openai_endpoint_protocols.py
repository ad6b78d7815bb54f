"""The governed OpenAI-compatible endpoint in front of a backend of another protocol: the
``openai`` SDK as the client, the standalone server (uvicorn, its own process) in front of
the simulator's Anthropic face and its Models Backend face (``/single``), real Redis.
Answers translated and settled with the backend's usage (Anthropic's stream:
test_openai_endpoint.py), a backend's 429 as OpenAI's, and what a protocol cannot carry
refused before anything is admitted."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from airflow_llm_router.engine import RouterClient
from llm_router_devkit.simulator import SimulatorServer
from llm_router_devkit.stack import free_port
from tests.integration.web.test_openai_endpoint import (  # noqa: F401 (fixtures)
    MESSAGES,
    Serve,
    _client,
    _profile,
    _settled,
    _sim_model,
    serve,
    sim,
)

pytestmark = [pytest.mark.timeout(180)]

QUOTA = {"rpm": 100, "tpm": 100_000, "max_concurrency": 4}


@pytest.mark.parametrize("protocol", ["anthropic", "models_backend"])
def test_an_answer_is_translated_and_settled_with_its_usage(
        serve: Serve, sim: SimulatorServer, engine: RouterClient,  # noqa: F811
        protocol: str) -> None:
    engine.set_quota("m", QUOTA)
    with serve(sim, protocol=protocol) as url:
        answer = _client(url).chat.completions.create(model="m", messages=MESSAGES,
                                                      max_tokens=64, temperature=0.2
                                                      if protocol == "anthropic" else None)
    assert answer.object == "chat.completion"
    assert (answer.choices[0].message.content or "").startswith("[m] simulated answer")
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage is not None
    stats = _settled(engine)
    backend = _sim_model(sim)
    calls = sim.backend.stats()["calls"]
    assert calls["messages" if protocol == "anthropic" else "single"] == 1
    assert calls["chat_completions"] == 0
    assert stats.requests == 1 and stats.in_flight == 0
    # the window holds the real usage, as the backend counted it (the system prompt too)
    assert stats.tokens == answer.usage.total_tokens == backend["tokens_accepted"]


def test_a_models_backend_stream_is_its_answer_in_one_chunk(
        serve: Serve, sim: SimulatorServer, engine: RouterClient) -> None:  # noqa: F811
    engine.set_quota("m", QUOTA)
    with serve(sim, protocol="models_backend") as url:
        chunks = list(_client(url).chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=64, stream=True,
            stream_options={"include_usage": True}))
    assert (chunks[0].choices[0].delta.content or "").startswith("[m] simulated answer")
    usage = chunks[-1].usage
    assert usage is not None
    stats = _settled(engine)
    assert stats.requests == 1
    assert stats.tokens == _sim_model(sim)["tokens_accepted"] == usage.total_tokens


@pytest.mark.parametrize("protocol", ["anthropic", "models_backend"])
def test_a_backend_429_is_openais_rate_limit_error(
        serve: Serve, engine: RouterClient, protocol: str) -> None:  # noqa: F811
    """The backend allows one call a window, the quota more: its 429 reaches the client
    as OpenAI's, with its Retry-After. The backend's window is 10 s, so the second call
    meets the first's window however slowly a loaded machine sends it."""
    engine.set_quota("m", {**QUOTA, "window_s": 60})
    one_a_window = _profile(rpm=1).model_copy(update={"time_scale": 6})
    assert one_a_window.scaled_window_s == 10
    with SimulatorServer(one_a_window) as backend_sim, \
            serve(backend_sim, protocol=protocol) as url:
        client = _client(url)
        client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=16)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=16)
        backend = _sim_model(backend_sim)
    assert backend["rejected_429"] == 1
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "rate_limit_exceeded"
    assert error["type"] == "rate_limit_error"
    assert float(refused.value.response.headers["retry-after"]) > 0
    stats = _settled(engine)
    assert stats.requests == 2 and stats.in_flight == 0


def _refused(client: openai.OpenAI, **call: Any) -> dict[str, Any]:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", **{"messages": MESSAGES, **call})
    body = refused.value.body
    assert isinstance(body, dict) and body["code"] == "unsupported_parameter"
    return body


def test_what_a_protocol_cannot_carry_is_refused_and_nothing_admitted(
        serve: Serve, sim: SimulatorServer, engine: RouterClient) -> None:  # noqa: F811
    engine.set_quota("m", QUOTA)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    with serve(sim, protocol="anthropic") as url:
        client = _client(url)
        assert _refused(client, tools=[tool])["param"] == "tools"
        assert _refused(client, response_format={"type": "json_object"})["param"] == \
            "response_format"
        assert _refused(client, messages=[{"role": "user", "content": [image]}]
                        )["param"] == "messages.0.content.0"
        assert _refused(client, messages=[*MESSAGES, {"role": "tool", "content": "x",
                                                      "tool_call_id": "c"}]
                        )["param"] == "messages.2.tool_call_id"
    stats = engine.stats().models["m"]
    assert stats.requests == 0 and stats.in_flight == 0
    assert sim.backend.stats()["calls"]["messages"] == 0


def test_options_models_backend_has_no_field_for_are_refused(
        serve: Serve, sim: SimulatorServer, engine: RouterClient) -> None:  # noqa: F811
    engine.set_quota("m", QUOTA)
    with serve(sim, protocol="models_backend") as url:
        client = _client(url)
        assert _refused(client, temperature=0.5)["param"] == "temperature"
        assert _refused(client, stop=["\n"])["param"] == "stop"
    assert engine.stats().models["m"].requests == 0
    assert sim.backend.stats()["calls"]["single"] == 0


def test_without_max_tokens_the_anthropic_connection_cap_is_sent_and_reserved(
        serve: Serve, sim: SimulatorServer, engine: RouterClient) -> None:  # noqa: F811
    """Anthropic requires max_tokens: a request without one gets the connection's
    ``max_output_tokens`` (256), and admission reserves it, so a tpm too small for it
    refuses the call before the backend sees it."""
    engine.set_quota("m", {**QUOTA, "tpm": 200})
    with serve(sim, protocol="anthropic") as url, pytest.raises(openai.BadRequestError) as over:
        _client(url).chat.completions.create(model="m", messages=MESSAGES)
    body = over.value.body
    assert isinstance(body, dict) and body["code"] == "tokens_over_quota"
    assert sim.backend.stats()["calls"]["messages"] == 0


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_stream_that_fails_is_an_error_and_keeps_its_reservation(
        serve: Serve, engine: RouterClient, protocol: str) -> None:  # noqa: F811
    """A stream that ends in an ``error`` event failed, as a 5xx would have: it counts
    towards the breaker, and its usage is unknown. Anthropic's never reaches
    ``message_delta``: all it counted is ``message_start``'s, whose output tokens are a
    placeholder (1), not what the model spent. The lease keeps its reservation (the
    output cap), never less."""
    engine.set_quota("m", QUOTA)
    failing = _profile().model_copy(update={"error_rate": 1.0, "error_delay_s": 0.0})
    with SimulatorServer(failing) as failing_sim, serve(failing_sim, protocol=protocol) \
            as url, pytest.raises(openai.APIError, match="simulated provider error"):
        list(_client(url).chat.completions.create(model="m", messages=MESSAGES,
                                                  max_tokens=64, stream=True))
    stats = _settled(engine)
    assert stats.requests == 1 and stats.in_flight == 0
    assert stats.output_tokens == 64
    assert stats.counters.get("errors") == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_backend_that_does_not_answer_is_a_502_streamed_or_not(
        serve: Serve, engine: RouterClient, stream: bool) -> None:  # noqa: F811
    """Nothing listens at the backend's address: the client gets the endpoint's own 502
    (``backend_unavailable``, what failed), not a backend answer it never sent."""
    engine.set_quota("m", QUOTA)
    with serve(f"http://127.0.0.1:{free_port()}", protocol="anthropic") as url, \
            pytest.raises(openai.InternalServerError) as failed:
        _client(url).chat.completions.create(model="m", messages=MESSAGES, max_tokens=16,
                                             stream=stream)
    assert failed.value.status_code == 502
    error = failed.value.body
    assert isinstance(error, dict) and error["code"] == "backend_unavailable"
    assert error["message"].startswith("the backend did not answer: ")
    stats = _settled(engine)
    assert stats.requests == 1 and stats.in_flight == 0
