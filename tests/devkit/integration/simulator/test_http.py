"""The simulator through real HTTP, at high time scales so the whole file runs in seconds."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer, count_input_tokens
from tests.devkit.integration.simulator.helpers import ServeFactory, model


def test_health_and_single_happy_path() -> None:
    with SimulatorServer(SimulatorProfile.default(time_scale=600, seed=1)) as sim:
        assert httpx.get(f"{sim.url}/health").json()["status"] == "ok"
        prompt = "Summarise the quarterly report in three bullet points."
        body = {"model": "flash", "prompt": prompt, "max_output_tokens": None}
        first = httpx.post(f"{sim.url}/single", json=body)
        second = httpx.post(f"{sim.url}/single", json=body)
    assert first.status_code == 200
    data = first.json()
    assert set(data) == {"model", "answer", "usage", "latency_s"}
    assert data["model"] == "flash"
    assert data["usage"]["input_tokens"] == count_input_tokens(prompt)
    assert data["usage"] == second.json()["usage"]  # deterministic per prompt
    assert 1.0 / 600 <= data["latency_s"] <= 30.0 / 600


def test_same_seed_gives_same_usage_across_servers() -> None:
    bodies = [{"model": "coder", "prompt": f"task {i}"} for i in range(5)]
    usages = []
    for _ in range(2):
        with SimulatorServer(SimulatorProfile.default(time_scale=6000, seed=9)) as sim:
            usages.append([httpx.post(f"{sim.url}/single", json=b).json()["usage"]
                           for b in bodies])
    assert usages[0] == usages[1]


def test_unknown_model_and_bad_bodies(serve: ServeFactory) -> None:
    sim = serve(time_scale=600, models=[model("m")])
    missing = httpx.post(f"{sim.url}/single", json={"model": "nope", "prompt": "p"})
    assert missing.status_code == 404
    assert missing.json()["error"] == "unknown_model"
    for bad in ({"model": "m"}, {"prompt": "p"}, {"model": "m", "prompt": 3},
                {"model": "m", "prompt": "p", "max_output_tokens": 0}):
        assert httpx.post(f"{sim.url}/single", json=bad).status_code == 422
    assert httpx.post(f"{sim.url}/batch", json={"items": [{"id": "1"}]}).status_code == 422


async def _post_many(url: str, bodies: list[dict[str, object]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=10) as client:
        return list(await asyncio.gather(*(client.post(url, json=b) for b in bodies)))


async def test_rpm_exceeded_gives_429_with_retry_after_and_is_counted(
    serve: ServeFactory,
) -> None:
    # Scaled window of 10 s: long enough that every request lands in one window.
    sim = serve(time_scale=6, models=[model("m", median_s=0.06, rpm=3)])
    bodies: list[dict[str, object]] = [{"model": "m", "prompt": f"p{i}"} for i in range(7)]
    responses = await _post_many(f"{sim.url}/single", bodies)
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 3 + [429] * 4
    refused = next(r for r in responses if r.status_code == 429)
    assert 9 <= int(refused.headers["Retry-After"]) <= 10
    assert 9000 <= int(refused.headers["retry-after-ms"]) <= 10000
    body = refused.json()
    assert (body["error"], body["reason"], body["model"]) == ("rate_limited", "rpm", "m")
    assert 9.0 <= body["retry_after_s"] <= 10.0
    stats = httpx.get(f"{sim.url}/stats").json()
    m = stats["models"]["m"]
    assert (m["requests"], m["accepted"], m["rejected_429"], m["completed"]) == (7, 3, 4, 3)
    assert m["violations"] == {"rpm": 4, "tpm": 0, "concurrency": 0, "total": 4}
    assert m["peak_offered_requests_in_window"] == 7
    assert m["peak_accepted_requests_in_window"] == 3
    assert stats["time_scale"] == 6 and stats["scaled_window_s"] == 10
    assert stats["totals"]["violations"] == 4


async def test_tpm_exceeded_gives_429(serve: ServeFactory) -> None:
    sim = serve(time_scale=6, models=[model("m", median_s=0.06, tpm=30,
                                            output_tokens_mean=10, output_tokens_sigma=0)])
    prompt = "x" * 40  # 10 input + 10 output tokens
    responses = await _post_many(f"{sim.url}/single",
                                 [{"model": "m", "prompt": prompt} for _ in range(3)])
    assert sorted(r.status_code for r in responses) == [200, 429, 429]
    m = httpx.get(f"{sim.url}/stats").json()["models"]["m"]
    assert m["violations"]["tpm"] == 2
    assert m["tokens_accepted"] == 20
    assert m["peak_offered_tokens_in_window"] == 60


async def test_concurrency_limit_gives_429(serve: ServeFactory) -> None:
    sim = serve(time_scale=60, models=[model("slow", median_s=24, max_concurrency=2)])
    bodies: list[dict[str, object]] = [{"model": "slow", "prompt": f"p{i}"} for i in range(3)]
    responses = await _post_many(f"{sim.url}/single", bodies)
    assert sorted(r.status_code for r in responses) == [200, 200, 429]
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["reason"] == "concurrency"
    assert 0 < refused.json()["retry_after_s"] <= 0.4
    assert refused.headers["Retry-After"] == "1"
    m = httpx.get(f"{sim.url}/stats").json()["models"]["slow"]
    assert m["peak_concurrency"] == 2
    assert m["violations"]["concurrency"] == 1
    assert m["in_flight"] == 0


def test_batch_waits_for_the_slowest_and_reports_each_item(serve: ServeFactory) -> None:
    sim = serve(
        time_scale=60,
        models=[model("fast", median_s=0.6), model("slow", median_s=18),
                model("scarce", median_s=0.6, rpm=1)],
    )
    items = [
        {"id": "a", "model": "fast", "prompt": "one"},
        {"id": "b", "model": "slow", "prompt": "two"},
        {"id": "c", "model": "scarce", "prompt": "three"},
        {"id": "d", "model": "scarce", "prompt": "four"},
        {"id": "e", "model": "missing", "prompt": "five"},
    ]
    started = time.monotonic()
    response = httpx.post(f"{sim.url}/batch", json={"items": items}, timeout=10)
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    results = {r["id"]: r for r in response.json()["results"]}
    assert [r["id"] for r in response.json()["results"]] == ["a", "b", "c", "d", "e"]
    assert {k: r["status"] for k, r in results.items()} == {
        "a": 200, "b": 200, "c": 200, "d": 429, "e": 404,
    }
    assert elapsed >= 0.3  # the slow item: 18 s / 60
    assert results["b"]["latency_s"] == 0.3
    assert set(results["a"]) == {"id", "status", "answer", "usage", "latency_s"}
    assert results["d"]["error"] == "rate_limited" and results["d"]["retry_after_s"] > 0
    stats = httpx.get(f"{sim.url}/stats").json()
    assert stats["calls"] == {"single": 0, "batch": 1, "batch_items": 5, "chat_completions": 0,
                              "messages": 0}
    assert stats["models"]["scarce"]["violations"]["rpm"] == 1


def test_error_rate_one_gives_500s(serve: ServeFactory) -> None:
    sim = serve(time_scale=600, error_rate=1.0, models=[model("m")])
    response = httpx.post(f"{sim.url}/single", json={"model": "m", "prompt": "p"})
    assert response.status_code == 500
    assert response.json()["error"] == "internal_error"
    batch = httpx.post(f"{sim.url}/batch", json={"items": [{"id": "1", "model": "m",
                                                            "prompt": "q"}]})
    assert batch.json()["results"] == [{"id": "1", "status": 500, "error": "internal_error"}]
    m = httpx.get(f"{sim.url}/stats").json()["models"]["m"]
    assert (m["accepted"], m["errors"], m["completed"]) == (2, 2, 0)


def test_timeout_rate_one_hangs_then_504(serve: ServeFactory) -> None:
    sim = serve(time_scale=60, timeout_rate=1.0, timeout_s=6, models=[model("m")])
    started = time.monotonic()
    response = httpx.post(f"{sim.url}/single", json={"model": "m", "prompt": "p"})
    assert response.status_code == 504
    assert time.monotonic() - started >= 0.1
    assert httpx.get(f"{sim.url}/stats").json()["models"]["m"]["timeouts"] == 1


def test_truncate_rate_one_answers_200_with_a_cut_json_body(serve: ServeFactory) -> None:
    sim = serve(time_scale=600, truncate_rate=1.0, models=[model("m"), model("n")])
    response = httpx.post(f"{sim.url}/single", json={"model": "m", "prompt": "p"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.text.startswith('{"model": "m", "answer"')
    with pytest.raises(json.JSONDecodeError):
        response.json()
    # the headers come before the body: the receipt is readable when the body is not
    assert float(response.headers["x-received-ms"]) > 0
    m = httpx.get(f"{sim.url}/stats").json()["models"]["m"]
    assert (m["accepted"], m["completed"], m["truncated"]) == (1, 0, 1)


def test_one_truncated_item_cuts_the_whole_batch(serve: ServeFactory) -> None:
    sim = serve(time_scale=600, models=[model("m"), model("n")])
    profile = httpx.get(f"{sim.url}/profile").json()
    assert profile["truncate_rate"] == 0
    clean = httpx.post(f"{sim.url}/batch", json={"items": [
        {"id": "1", "model": "m", "prompt": "q"}]})
    assert clean.json()["results"][0]["status"] == 200
    cut = serve(time_scale=600, truncate_rate=0.5, models=[model("m"), model("n")])
    items = [{"id": str(i), "model": "m", "prompt": f"q{i}"} for i in range(12)]
    response = httpx.post(f"{cut.url}/batch", json={"items": items})
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()
    assert float(response.headers["x-received-ms"]) > 0
    m = httpx.get(f"{cut.url}/stats").json()["models"]["m"]
    assert (m["accepted"], m["completed"], m["truncated"]) == (12, 0, 12)


def test_a_retry_of_a_failed_prompt_can_succeed(serve: ServeFactory) -> None:
    sim = serve(time_scale=6000, error_rate=0.5, models=[model("m")])
    body = {"model": "m", "prompt": "p"}
    with httpx.Client(base_url=sim.url) as client:
        codes = [client.post("/single", json=body).status_code for _ in range(20)]
        assert set(codes) == {200, 500}
        client.post("/stats/reset")
        again = [client.post("/single", json=body).status_code for _ in range(20)]
    assert again == codes  # same attempts, same faults after a reset


async def test_timeline_shape_and_reset(serve: ServeFactory) -> None:
    sim = serve(time_scale=60, models=[model("m", median_s=0.6, rpm=4), model("n")])
    await _post_many(f"{sim.url}/single", [{"model": "m", "prompt": f"p{i}"} for i in range(6)])
    line = httpx.get(f"{sim.url}/timeline", params={"bucket_s": 0.25}).json()
    assert line["bucket_s"] == 0.25 and line["bucket_provider_s"] == 15
    assert set(line["models"]) == {"m", "n"}
    m = line["models"]["m"]
    assert len(m["requests"]) == len(m["tokens"]) == len(m["rejected"]) == line["n_buckets"]
    assert (sum(m["requests"]), sum(m["rejected"])) == (4, 2)
    assert sum(line["models"]["n"]["requests"]) == 0
    assert httpx.get(f"{sim.url}/timeline", params={"bucket_s": 0}).status_code == 422
    assert httpx.get(f"{sim.url}/timeline").json()["bucket_s"] == 1.0  # one scaled window
    assert httpx.post(f"{sim.url}/stats/reset").status_code == 200
    m_stats = httpx.get(f"{sim.url}/stats").json()["models"]["m"]
    assert (m_stats["requests"], m_stats["peak_offered_requests_in_window"]) == (0, 0)


def test_put_limits_applies_at_the_next_arrival(serve: ServeFactory) -> None:
    sim = serve(time_scale=6, models=[model("m", median_s=0.06)])
    url = f"{sim.url}/limits/m"
    assert httpx.put(f"{sim.url}/limits/nope", json={"rpm": 1}).status_code == 404
    assert httpx.put(url, json={"rpm": 0}).status_code == 422
    assert httpx.put(url, json={"rpm": "many"}).status_code == 422
    assert httpx.put(url, json={"colour": 1}).status_code == 422
    changed = httpx.put(url, json={"rpm": 1, "max_concurrency": 3})
    assert changed.json() == {"model": "m",
                              "limits": {"rpm": 1, "tpm": None, "max_concurrency": 3}}
    assert httpx.get(f"{sim.url}/limits").json()["m"]["rpm"] == 1
    first = httpx.post(f"{sim.url}/single", json={"model": "m", "prompt": "a"})
    second = httpx.post(f"{sim.url}/single", json={"model": "m", "prompt": "b"})
    assert (first.status_code, second.status_code) == (200, 429)
    assert httpx.get(f"{sim.url}/stats").json()["models"]["m"]["limits"]["rpm"] == 1
    assert httpx.get(f"{sim.url}/profile").json()["models"][0]["rpm"] == 1



def test_server_stops_cleanly_and_frees_its_port() -> None:
    server = SimulatorServer(SimulatorProfile.default(time_scale=600))
    with pytest.raises(RuntimeError):
        _ = server.url
    with server as sim:
        url = sim.url
        assert httpx.get(f"{url}/health").status_code == 200
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=1)
