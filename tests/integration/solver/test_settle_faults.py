"""Faults in the solver's bookkeeping after a call: a backend answer whose usage or headers
the engine cannot take, a lease whose heartbeat fails for something else than a Redis
outage. Each prompt must still end solved, each lease settled (its slot free now, not at
its expiry), every error logged, and no such fault may fail the other prompts.

The backend is a tiny real HTTP server in a thread of the test process, answering each
prompt as the test says; the router is the real engine on the real Redis.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import airflow.configuration  # noqa: F401 (see below)
import pytest
import redis

from airflow_llm_router.backend import BackendConfig, http_client
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings
from airflow_llm_router.solver import session, upkeep
from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.solver.session import solve_items, solving
from airflow_llm_router.solver.settings import SolveSettings
from airflow_llm_router.solver.upkeep import Progress, keep_alive
from airflow_llm_router.tokens import count_input_tokens
from tests.integration.solver.stub_backend import Reply, serve

# Airflow replaces the root logger's handlers when it is first imported (the solver's
# metrics import it): imported here, at collection, it cannot drop caplog's handler mid-test.

#: the output cap sent with every call: admission reserves exactly input + CAP
CAP = 20
QUOTA = {"rpm": 10_000, "tpm": 10**7, "max_concurrency": 100, "window_s": 60}

def _ok(usage: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Reply:
    return 200, headers or {}, {"answer": "yes",
                                "usage": usage or {"input_tokens": 3, "output_tokens": 4}}


async def _solve(namespace: str, redis_url: str, url: str, prompts: list[str],
                 ) -> tuple[list[SolveResult], RouterStats]:
    """Solve ``prompts`` on model "m" through the real solver; the results and the
    engine's stats once the solver has closed (every settlement sent)."""
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace,
                                                                  cooldown_ms=50))
    try:
        await router.set_quota("m", QUOTA)
        config = BackendConfig(base_url=url, timeout_s=10)
        items = [SolveItem(key=str(i), prompt=p, request_id=f"r{i}", models=("m",))
                 for i, p in enumerate(prompts)]
        settings = SolveSettings(max_in_flight=50, backoff_s=0.01, max_output_tokens=CAP)
        async with (await http_client(config, 16) as http,
                    solving(router, http, config, settings, time.time() + 30) as solver):
            results = await solve_items(solver, items)
        return results, await router.stats()
    finally:
        await router.aclose()


BAD_USAGE = [
    {"input_tokens": -5, "output_tokens": 3},
    {"input_tokens": 3, "output_tokens": True},
    {"input_tokens": "12", "output_tokens": 4},
]


async def test_an_answer_with_bad_usage_is_solved_and_counted_at_its_estimate(
        namespace: str, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Negative, boolean or textual token counts are "usage unknown": the lease is settled
    (none left in flight), the window keeps the reservation (never less), one warning per
    answer names the field and never the prompt. A negative count once failed the
    settlement in the background, silently, and its slot stayed held until the lease
    expired; ``true`` made the settle script fail the same way."""
    prompts = [f"question {i}: " + "why " * i for i in range(30)]

    def answer(doc: dict[str, Any]) -> Reply:
        return _ok(BAD_USAGE[int(doc["prompt"].split()[1].rstrip(":")) % len(BAD_USAGE)])

    caplog.set_level(logging.WARNING)
    with serve(answer) as server:
        results, stats = await _solve(namespace, redis_url, server.url, prompts)
    assert [r.status for r in results] == ["solved"] * len(prompts), results
    m = stats.models["m"]
    assert m.in_flight == 0, "a lease with a bad usage was left unsettled"
    assert m.tokens >= sum(count_input_tokens(p) + CAP for p in prompts), m
    assert all(r.input_tokens is None and r.output_tokens is None for r in results)
    warned = [r.getMessage() for r in caplog.records
              if r.name == "airflow_llm_router.backend.protocols.base"]
    assert len(warned) == len(prompts), warned
    assert sum("usage.input_tokens is -5," in w for w in warned) == 10, warned
    assert sum("usage.output_tokens is True," in w for w in warned) == 10, warned
    assert sum("usage.input_tokens is '12'," in w for w in warned) == 10, warned
    assert not any("question" in w or "why" in w for w in warned), warned


@pytest.mark.parametrize("fault", ["429 with Retry-After: inf", "200 with x-received-ms: inf"])
async def test_a_settlement_that_fails_fails_no_prompt_and_frees_its_slot(
        namespace: str, redis_url: str, caplog: pytest.LogCaptureFixture, fault: str) -> None:
    """One prompt's first answer carries a header the engine cannot take (an infinite
    time): its settlement raises, not for a Redis outage. A 429's settlement is awaited
    before the retry; it once failed the whole ``solve_items`` (every other prompt of the
    drain with it). An answer's settlement runs in the background; it once died
    silently, its slot held until the lease expired. Now the error is logged with the
    lease, the lease is settled again with its outcome only, and every prompt is solved."""
    prompts = [f"prompt {i}" for i in range(20)]
    seen: set[str] = set()

    def answer(doc: dict[str, Any]) -> Reply:
        first = doc["prompt"] not in seen
        seen.add(doc["prompt"])
        if doc["prompt"] != "prompt 7" or not first:
            return _ok()
        if fault.startswith("429"):
            return 429, {"Retry-After": "inf"}, {"detail": "slow down"}
        return _ok(headers={"x-received-ms": "inf"})

    caplog.set_level(logging.WARNING)
    with serve(answer) as server:
        results, stats = await _solve(namespace, redis_url, server.url, prompts)
    assert [r.status for r in results] == ["solved"] * len(prompts), results
    assert results[7].calls == (2 if fault.startswith("429") else 1)
    assert stats.models["m"].in_flight == 0, "the failed settlement's lease is still held"
    failed = [r for r in caplog.records if "settlement failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]
    assert failed[0].levelno == logging.ERROR and "m#" in failed[0].getMessage()
    # Retry-After: inf overflows the ms it is sent in; x-received-ms: inf is refused by
    # name (Completion.received_at_s)
    assert failed[0].exc_info is not None
    assert failed[0].exc_info[0] is (OverflowError if fault.startswith("429") else ValueError)
    assert fault.startswith("429") or "received_at_s" in str(failed[0].exc_info[1])
    assert not any("not settled" in r.getMessage() for r in caplog.records)


async def test_a_heartbeat_that_fails_is_logged_and_the_others_go_on(
        namespace: str, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A live lease whose model's key is damaged (not a sorted set: the heartbeat script
    fails with WRONGTYPE, not a Redis outage) once ended the heartbeat loop at its first
    round, and with it the drain. Now each round's failure is logged with its traceback,
    the loop goes on, and the healthy lease beside it is still heartbeated."""
    settings = RouterSettings(namespace=namespace, lease_ttl_s=1.5)
    router = AsyncRouterClient.from_url(redis_url, settings)
    keys = RouterKeys(namespace)
    raw = redis.Redis.from_url(redis_url)
    try:
        await router.set_quota("m", QUOTA)
        lease = (await router.admit_many([AdmitRequest(10)]))[0]
        assert isinstance(lease, Admission)
        raw.set(keys.model("K_LIVE", "broken"), "not a sorted set")
        progress = Progress(total=1, live={lease.lease_id, "broken#1"})
        live_key = keys.model("K_LIVE", "m")
        expiries = [raw.zscore(live_key, lease.lease_id)]
        caplog.set_level(logging.WARNING)
        loop = asyncio.create_task(keep_alive(router, progress))
        try:
            deadline = time.monotonic() + 8
            # two rounds of heartbeats, each past the damaged lease (in either order)
            while len(expiries) < 3 or len(_broken(caplog)) < 2:
                assert not loop.done(), f"the heartbeat loop ended: {loop.exception()!r}"
                assert time.monotonic() < deadline, expiries
                await asyncio.sleep(0.05)
                now = raw.zscore(live_key, lease.lease_id)
                if now != expiries[-1]:
                    expiries.append(now)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    finally:
        raw.delete(keys.model("K_LIVE", "broken"))
        raw.close()
        await router.aclose()
    assert expiries == sorted(expiries)
    assert all(r.exc_info is not None for r in _broken(caplog))


def _broken(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "broken#1: heartbeat failed" in r.getMessage()]


async def test_a_helper_loop_that_ignores_its_cancellation_does_not_hold_the_solver(
        namespace: str, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A drain once never ended under load: its progress loop went on after its
    cancellation (a call beneath it swallowed it) and closing the solver waited for it for
    ever. A loop that ignores its cancellation (here the progress loop, replaced by one that
    does) is now left behind with a warning after HELPER_STOP_S."""
    release, running = asyncio.Event(), asyncio.Event()

    async def stubborn(*_args: object) -> None:
        running.set()
        while not release.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue  # what the call beneath it did

    caplog.set_level(logging.WARNING)
    monkeypatch.setattr(session, "report", stubborn)
    monkeypatch.setattr(upkeep, "HELPER_STOP_S", 0.5)
    router = AsyncRouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    config = BackendConfig(base_url="http://127.0.0.1:9", timeout_s=1)
    try:
        async with await http_client(config, 4) as http:
            started = time.monotonic()
            async with solving(router, http, config, SolveSettings(), time.time() + 30):
                await running.wait()
            closed_s = time.monotonic() - started
    finally:
        release.set()
        await router.aclose()
    assert closed_s < 5, closed_s
    assert any("did not stop within" in r.getMessage() for r in caplog.records)
