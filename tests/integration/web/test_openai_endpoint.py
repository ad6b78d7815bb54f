"""The governed OpenAI-compatible endpoint with real parts: the ``openai`` SDK as the client,
the standalone server (uvicorn, its own process) in front of the simulator's OpenAI face,
real Redis. Answers and usage settled, streaming (a client that leaves mid-stream too),
the 429 after the wait, bad input refused with nothing admitted, and concurrent callers
over a small quota: no 429 at the backend, no window over its target."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.stats import ModelStats
from llm_router_devkit.api_server import standalone_api
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer
from llm_router_devkit.simulator.faces import face_connection
from llm_router_devkit.simulator.profile import ModelProfile
from tests.integration.web.standalone import ROUTER_CONN, TOKEN_CONN, run_cli, server_env
from tests.integration.web.test_standalone import one_error_line

pytestmark = [pytest.mark.timeout(180)]

TOKEN = secrets.token_urlsafe(24)
BACKEND_CONN = "llmr_openai_backend"
MESSAGES: list[Any] = [{"role": "system", "content": "Answer briefly."},
                       {"role": "user", "content": "Summarise the ticket in one line, please."}]

Serve = Callable[..., AbstractContextManager[str]]


def _profile(rpm: int | None = None) -> SimulatorProfile:
    """One model ``m``: calls of 12-50 ms, a provider window of 1 s (time scale 60)."""
    model = ModelProfile(name="m", median_s=1.5, min_s=0.7, max_s=3.0, rpm=rpm,
                         output_tokens_mean=40, output_tokens_max=120)
    return SimulatorProfile(time_scale=60, seed=5, models=[model])


@pytest.fixture
def serve(tmp_path: Path, namespace: str) -> Serve:
    """Start the standalone server on the test's namespace in front of ``sim``'s face for
    ``protocol`` (or of a base URL), with extra options; its base URL while the block
    runs."""

    @contextmanager
    def run(sim: SimulatorServer | str, *options: str, protocol: str = "openai",
            ) -> Iterator[str]:
        env = server_env(tmp_path, namespace, TOKEN)
        cap = 256 if protocol == "anthropic" else None  # Anthropic's API requires one
        url = sim if isinstance(sim, str) else sim.url
        env["AIRFLOW_CONN_" + BACKEND_CONN.upper()] = json.dumps(
            face_connection(url, protocol, timeout_s=30, max_output_tokens=cap))
        with standalone_api(env, ["--token-conn-id", TOKEN_CONN, "--conn-id", ROUTER_CONN,
                                  "--backend-conn-id", BACKEND_CONN, *options],
                            tmp_path / "api.log") as url:
            yield url

    return run


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(_profile()) as server:
        yield server


def _client(url: str, key: str = TOKEN, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60,
                         **kwargs)


def _settled(engine: RouterClient, model: str = "m", timeout_s: float = 20) -> ModelStats:
    """The model's stats once no call is in flight (a stream's lease settles as its last
    event goes out; the client may have read that event first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = engine.stats().models[model]
        if stats.in_flight == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def _sim_model(sim: SimulatorServer) -> dict[str, Any]:
    return dict(sim.backend.stats()["models"]["m"])


def test_an_answer_and_its_usage_are_settled(serve: Serve, sim: SimulatorServer,
                                             engine: RouterClient) -> None:
    engine.set_quota("m", {"rpm": 100, "tpm": 100_000, "max_concurrency": 4})
    with serve(sim) as url:
        client = _client(url)
        assert [m.id for m in client.models.list().data] == ["m"]
        answer = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=64)
    assert answer.choices[0].message.content
    assert answer.usage is not None
    stats = _settled(engine)
    backend = _sim_model(sim)
    assert stats.requests == 1 and stats.in_flight == 0
    # the window holds the real usage, as the backend counted it
    assert stats.tokens == answer.usage.total_tokens == backend["tokens_accepted"]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_stream_is_relayed_and_settled_from_its_usage_chunk(
        serve: Serve, sim: SimulatorServer, engine: RouterClient, protocol: str) -> None:
    """OpenAI's chunks as sent; Anthropic's events as OpenAI chunks (role, content,
    finish reason), settled from the stream's own usage (``message_delta``)."""
    engine.set_quota("m", {"rpm": 100, "tpm": 100_000, "max_concurrency": 4})
    with serve(sim, protocol=protocol) as url:
        client = _client(url)
        plain = list(client.chat.completions.create(model="m", messages=MESSAGES,
                                                    max_tokens=64, stream=True))
        with_usage = list(client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=64, stream=True,
            stream_options={"include_usage": True}))
    for chunks in (plain, with_usage):
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.startswith("[m] simulated answer")
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finishes[-1] in ("stop", "length") and finishes.count(None) == len(finishes) - 1
    # the usage chunk, asked of the backend for settling, reaches only the client that asked
    assert all(c.usage is None for c in plain)
    usage = with_usage[-1].usage
    assert usage is not None and with_usage[-1].choices == []
    stats = _settled(engine)
    assert stats.requests == 2 and stats.in_flight == 0
    assert stats.tokens == _sim_model(sim)["tokens_accepted"] == 2 * usage.total_tokens


def test_a_client_that_leaves_mid_stream_still_settles(
        serve: Serve, engine: RouterClient) -> None:
    engine.set_quota("m", {"rpm": 100, "tpm": 100_000, "max_concurrency": 4})
    slow = ModelProfile(name="m", median_s=60, min_s=30, max_s=90, output_tokens_mean=40,
                        output_tokens_max=120)  # 1.5-4.5 s at this scale: still running
    # when the test reads in_flight, even after a loaded machine's pause
    with SimulatorServer(SimulatorProfile(time_scale=20, seed=5, models=[slow])) as sim, \
            serve(sim) as url, httpx.Client(base_url=url, timeout=30) as http:
        body = {"model": "m", "messages": MESSAGES, "max_tokens": 64, "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=body,
                         headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status_code == 200
            first = next(response.iter_lines())  # the role chunk: the call is under way
            assert first.startswith("data: ")
            assert engine.stats().models["m"].in_flight == 1
        # the client is gone; the router reads the backend's stream to its end
        stats = _settled(engine)
        backend = _sim_model(sim)
    assert stats.in_flight == 0 and backend["completed"] == 1
    assert stats.tokens == backend["tokens_accepted"]


def test_no_room_within_the_wait_is_a_429_with_retry_after(
        serve: Serve, sim: SimulatorServer, engine: RouterClient) -> None:
    engine.set_quota("m", {"rpm": 1, "tpm": 100_000, "max_concurrency": 4, "window_s": 60})
    with serve(sim, "--max-wait-s", "0.5") as url:
        client = _client(url)
        client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=16)
        began = time.monotonic()
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=16)
        waited = time.monotonic() - began
    assert waited >= 0.5
    assert refused.value.status_code == 429
    assert refused.value.response.headers["retry-after"] == "1"
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "rate_limit_exceeded"
    assert _sim_model(sim)["requests"] == 1 and engine.stats().models["m"].requests == 1


def test_bad_input_is_refused_as_openai_does_and_nothing_is_admitted(
        serve: Serve, sim: SimulatorServer, engine: RouterClient) -> None:
    engine.set_quota("m", {"rpm": 100, "tpm": 1000, "max_concurrency": 4})
    with serve(sim, "--max-body-bytes", "4096") as url:
        keyless = httpx.post(f"{url}/v1/chat/completions", timeout=30,
                             json={"model": "m", "messages": MESSAGES})
        assert keyless.status_code == 401
        assert keyless.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError) as wrong:
            _client(url, key=TOKEN[:-1] + ("y" if TOKEN.endswith("x") else "x")
                    ).chat.completions.create(model="m", messages=MESSAGES)
        assert isinstance(wrong.value.body, dict)
        assert wrong.value.body["code"] == "invalid_api_key"
        client = _client(url)
        with pytest.raises(openai.NotFoundError) as unknown:
            client.chat.completions.create(model="nope", messages=MESSAGES)
        assert isinstance(unknown.value.body, dict)
        assert unknown.value.body["code"] == "model_not_found"
        with pytest.raises(openai.BadRequestError) as over:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=5000)
        assert isinstance(over.value.body, dict) and over.value.body["param"] == "max_tokens"
        with pytest.raises(openai.APIStatusError) as large:
            client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": "x" * 5000}])
        assert large.value.status_code == 413
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(model="m", messages=[])
        assert isinstance(bad.value.body, dict) and bad.value.body["param"] == "messages"
        with pytest.raises(openai.BadRequestError) as priority:
            client.chat.completions.create(model="m", messages=MESSAGES,
                                           extra_headers={"X-LLM-Router-Priority": "urgent"})
        assert isinstance(priority.value.body, dict)
        assert priority.value.body["param"] == "X-LLM-Router-Priority"
    stats = engine.stats().models["m"]
    assert stats.requests == 0 and stats.in_flight == 0
    assert sim.backend.stats()["calls"]["chat_completions"] == 0


def test_concurrent_callers_over_a_small_quota_never_exceed_it(
        serve: Serve, engine: RouterClient) -> None:
    """16 callers, 48 calls (a third streamed), two server processes, a quota of 6 calls a
    window at the backend's own limit: every call answered, none refused by the backend,
    no window over its target."""
    calls = 48
    with SimulatorServer(_profile(rpm=6)) as sim:
        window_s = sim.backend.profile.scaled_window_s
        engine.set_quota("m", {"rpm": 6, "tpm": 1_000_000, "max_concurrency": 6,
                               "window_s": window_s})
        with serve(sim, "--workers", "2", "--max-wait-s", "60") as url:
            async def drive() -> list[int]:
                client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN,
                                            max_retries=0, timeout=120)
                gate = asyncio.Semaphore(16)

                async def one(i: int) -> int:
                    async with gate:
                        if i % 3 == 0:
                            stream = await client.chat.completions.create(
                                model="m", messages=MESSAGES, max_tokens=64, stream=True)
                            return len([chunk async for chunk in stream])
                        answer = await client.chat.completions.create(
                            model="m", messages=MESSAGES, max_tokens=64)
                        return 1 if answer.choices[0].message.content else 0

                try:
                    return await asyncio.gather(*(one(i) for i in range(calls)))
                finally:
                    await client.close()

            began = time.monotonic()
            answered = asyncio.run(drive())
            took = time.monotonic() - began
        backend = _sim_model(sim)
    assert all(answered) and len(answered) == calls
    assert backend["accepted"] == calls and backend["rejected_429"] == 0
    assert backend["violations"]["total"] == 0, backend["violations"]
    assert backend["peak_accepted_requests_in_window"] <= 6
    # the quota, not the server, set the pace: 48 calls at 6 a window take 7+ windows
    assert took >= 7 * window_s


def test_a_missing_or_invalid_backend_connection_fails_at_start(
        tmp_path: Path, namespace: str) -> None:
    base = ["--port", "0", "--token-conn-id", TOKEN_CONN, "--conn-id", ROUTER_CONN,
            "--backend-conn-id", BACKEND_CONN]
    env = server_env(tmp_path, namespace, TOKEN)
    missing = one_error_line(run_cli(base, env))
    assert BACKEND_CONN in missing and "--backend-conn-id" in missing
    env["AIRFLOW_CONN_" + BACKEND_CONN.upper()] = json.dumps(
        {"conn_type": "models_backend", "host": "http://127.0.0.1:9",
         "extra": {"protocol": "grpc"}})
    other = one_error_line(run_cli(base, env))
    assert "extra.protocol" in other and "grpc" in other
    assert "--max-wait-s" in one_error_line(run_cli([*base, "--max-wait-s", "soon"], env))
