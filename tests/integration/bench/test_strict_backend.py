"""The strict backend (``bench/strict_backend.py``) in its own process: it refuses the call
that would break a real limit with a 429 and ``Retry-After``, and its peaks are exact."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bench.strict_backend import StrictBackendProcess, peak_in_window

pytestmark = [pytest.mark.timeout(60)]

CONFIG: dict[str, Any] = {
    "seed": 7,
    "cap_field": "max_tokens",
    "models": {
        # a window long enough that the calls below all fall in one
        "r": {"rpm": 3, "tpm": None, "max_concurrency": None, "window_s": 30.0,
              "output_tokens": [5, 10], "latency_s": [0.0, 0.01]},
        "t": {"rpm": None, "tpm": 100, "max_concurrency": None, "window_s": 30.0,
              "output_tokens": [40, 40], "latency_s": [0.0, 0.0]},
        "c": {"rpm": None, "tpm": None, "max_concurrency": 1, "window_s": 1.0,
              "output_tokens": [1, 1], "latency_s": [1.0, 1.0]},
    },
}


@pytest.fixture(scope="module")
def backend() -> Iterator[str]:
    with StrictBackendProcess(CONFIG) as proc:
        yield proc.url


@pytest.fixture(autouse=True)
def _fresh(backend: str) -> None:
    httpx.post(f"{backend}/reset", timeout=5).raise_for_status()


def _single(url: str, model: str, prompt: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{url}/single", json={"model": model, "prompt": prompt, **extra},
                      timeout=10)


def test_the_call_over_rpm_is_a_429_with_retry_after_and_peaks_count_it(backend: str) -> None:
    started = time.monotonic()
    codes = [_single(backend, "r", f"prompt {i}").status_code for i in range(3)]
    refused = _single(backend, "r", "prompt 3")
    assert codes == [200, 200, 200]
    assert refused.status_code == 429
    # the window has room once the first call is 30 s old: ~30 s from now, never less
    waited = time.monotonic() - started
    assert 30 - waited - 1 <= float(refused.headers["retry-after-ms"]) / 1000 <= 30
    assert int(refused.headers["Retry-After"]) in (29, 30)
    assert refused.json()["reason"] == "requests"
    assert "x-received-ms" in refused.headers
    stats = httpx.get(f"{backend}/stats", timeout=5).json()["models"]["r"]
    assert stats["accepted"] == 3
    assert stats["rejected_429"] == 1
    assert stats["peak_requests"] == 3  # admitted: never over the real limit
    assert stats["peak_arrivals"] == 4  # what was sent, refused one included


def test_tokens_are_charged_at_arrival_and_the_output_cap_is_honoured(backend: str) -> None:
    prompt = "x" * 40  # 10 input tokens (4 characters a token)
    first = _single(backend, "t", prompt)
    assert first.json()["usage"] == {"input_tokens": 10, "output_tokens": 40}
    second = _single(backend, "t", prompt)  # 50 + 50 = 100 = tpm: still admitted
    assert second.status_code == 200
    over = _single(backend, "t", prompt)  # 150 > 100
    assert over.status_code == 429 and over.json()["reason"] == "tokens"
    capped = _single(backend, "t", "y" * 40, max_tokens=1)  # the cap field of the config
    assert capped.status_code == 429  # 11 tokens do not fit either: the window holds 100
    stats = httpx.get(f"{backend}/stats", timeout=5).json()["models"]["t"]
    assert stats["peak_tokens"] == 100
    assert stats["peak_arrival_tokens"] == 100 + 50 + 11
    assert stats["output_tokens"] == 80


def test_concurrency_limit_refuses_while_a_call_runs(backend: str) -> None:
    with httpx.Client(timeout=10) as client:
        slow: list[httpx.Response] = []
        t = threading.Thread(target=lambda: slow.append(
            client.post(f"{backend}/single", json={"model": "c", "prompt": "a"})))
        t.start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{backend}/stats", timeout=5).json()["models"]["c"]["accepted"] < 1:
            assert time.monotonic() < deadline, "the slow call never arrived"
        busy = client.post(f"{backend}/single", json={"model": "c", "prompt": "b"})
        t.join()
    assert slow[0].status_code == 200
    assert busy.status_code == 429 and busy.json()["reason"] == "concurrency"
    # room again when the running call ends: its 1 s latency less what had passed
    assert 0 < float(busy.headers["retry-after-ms"]) / 1000 <= 1.0
    stats = httpx.get(f"{backend}/stats", timeout=5).json()["models"]["c"]
    assert stats["peak_concurrency"] == 1


def test_peak_in_window_is_exact_on_half_open_windows() -> None:
    # (s - 1, s]: events at 0 and 1 are never in one window; 0.5, 1, 1.4 are
    assert peak_in_window([0.0, 0.5, 1.0, 1.4, 3.0], [1, 1, 1, 1, 1], 1.0) == 3
    assert peak_in_window([0.0, 1.0, 2.0], [5, 7, 1], 1.0) == 7
    assert peak_in_window([], [], 1.0) == 0


def test_batch_items_are_admitted_one_by_one_at_arrival(backend: str) -> None:
    items = [{"id": str(i), "model": "r", "prompt": f"batch {i}"} for i in range(4)]
    items.append({"id": "x", "model": "nope", "prompt": "?"})
    done = httpx.post(f"{backend}/batch", json={"items": items}, timeout=10)
    results = {r["id"]: r for r in done.json()["results"]}
    assert [results[str(i)]["status"] for i in range(4)] == [200, 200, 200, 429]
    assert results["3"]["reason"] == "requests" and results["3"]["retry_after_s"] > 29
    assert results["x"]["status"] == 404
    assert set(results["0"]["usage"]) == {"input_tokens", "output_tokens"}
    stats = httpx.get(f"{backend}/stats", timeout=5).json()["models"]["r"]
    assert (stats["accepted"], stats["rejected_429"], stats["peak_arrivals"]) == (3, 1, 4)
