"""The core promise under load: many threads and coroutines, short windows, several windows.

The test keeps its own log of every admission and completion, stamped with the Redis
server's clock inside the same MULTI/EXEC as the decision, and checks it: no sliding window
over rpm or tpm (actual tokens), never more calls in flight than the cap, and each model's
binding limit used to at least 90 % while work waits for it.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import redis.asyncio as aioredis

from airflow_llm_router.engine import Completion, RouterClient
from airflow_llm_router.engine.scripts import OPERATIONS, script_source
from airflow_llm_router.engine.types import AdmitRequest, RouterSettings
from tests.integration.engine.logging_clients import (
    LoggedAsyncRouterClient,
    LoggedRouterClient,
    TrafficLog,
    max_in_window,
    max_overlap,
)

WINDOW_S = 2.0
RUN_S = 4 * WINDOW_S + 0.5
QUOTAS = {
    "rpm-bound": {"rpm": 40, "tpm": 10**6, "max_concurrency": 64, "window_s": WINDOW_S},
    "tpm-bound": {"rpm": 10**4, "tpm": 4000, "max_concurrency": 64, "window_s": WINDOW_S},
    "conc-bound": {"rpm": 10**5, "tpm": 10**8, "max_concurrency": 4, "window_s": WINDOW_S},
}
ESTIMATE = 100
THREADS = 6
COROUTINES = 16


#: Each caller always asks for the same thing, so every model always has work waiting.
KINDS: list[tuple[str, ...] | None] = [None, ("rpm-bound",), ("tpm-bound",), ("conc-bound",)]


def _request(seed: int) -> AdmitRequest:
    return AdmitRequest(ESTIMATE, models=KINDS[seed % len(KINDS)])


def _sync_caller(client: RouterClient, stop_at: float, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        lease = client.wait_for_admission(_request(seed), timeout_s=stop_at - time.monotonic())
        if lease is None:
            return
        time.sleep(rng.uniform(0.02, 0.08))  # the model call
        actual = rng.randint(60, ESTIMATE)
        client.complete(lease.lease_id, actual // 2, actual - actual // 2)


async def _async_callers(redis_url: str, settings: RouterSettings, log: TrafficLog,
                         shas: dict[str, str], stop_at: float) -> None:
    client = LoggedAsyncRouterClient(
        aioredis.Redis.from_url(redis_url, max_connections=64), settings, log=log, shas=shas)

    async def caller(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop_at:
            lease = await client.wait_for_admission(
                _request(seed), timeout_s=max(0.001, stop_at - time.monotonic()))
            if lease is None:
                return
            await asyncio.sleep(rng.uniform(0.02, 0.08))
            actual = rng.randint(60, ESTIMATE)
            await client.complete_many(
                [Completion(lease.lease_id, actual // 2, actual - actual // 2)])

    try:
        await asyncio.gather(*(caller(1000 + i) for i in range(COROUTINES)))
    finally:
        await client.aclose()


def test_limits_hold_and_binding_limits_stay_busy(namespace: str, redis_url: str) -> None:
    settings = RouterSettings(namespace=namespace, guard_ms=50, lease_ttl_s=10)
    log = TrafficLog()
    admin = RouterClient.from_url(redis_url, settings)
    for model, quota in QUOTAS.items():
        admin.set_quota(model, quota)
    shas = {op: admin.redis.script_load(script_source(op)) for op in OPERATIONS}
    clients = [LoggedRouterClient(admin.redis, settings, log=log) for _ in range(THREADS)]

    stop_at = time.monotonic() + RUN_S
    threads = [threading.Thread(target=_sync_caller, args=(c, stop_at, i))
               for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    asyncio.run(_async_callers(redis_url, settings, log, shas, stop_at))
    for t in threads:
        t.join(timeout=30)
    admin.close()

    window_us = int(WINDOW_S * 1_000_000)
    all_times = [e.admitted_us for e in log.entries.values()]
    start = min(all_times)
    span_us = 4 * window_us
    for model, quota in QUOTAS.items():
        entries = log.for_model(model)
        times = [e.admitted_us for e in entries]
        assert max_in_window(times, [1] * len(times), window_us) <= quota["rpm"], model
        tokens = [e.tokens for e in entries]
        assert max_in_window(times, tokens, window_us) <= quota["tpm"], model
        intervals = [(e.admitted_us, e.completed_us or 2**62) for e in entries]
        assert max_overlap(intervals) <= quota["max_concurrency"], model

        inside = [e for e in entries if start <= e.admitted_us < start + span_us]
        if model == "rpm-bound":
            used = len(inside) / (quota["rpm"] * 4)
        elif model == "tpm-bound":
            used = sum(e.tokens for e in inside) / (quota["tpm"] * 4)
        else:
            busy = sum(min(e.completed_us or start + span_us, start + span_us) - e.admitted_us
                       for e in inside)
            used = busy / (quota["max_concurrency"] * span_us)
        print(f"{model}: binding limit used {used:.1%}")
        assert used >= 0.90, f"{model}: binding limit used {used:.1%}"


def test_lowered_quota_is_obeyed_from_the_next_admission(namespace: str, redis_url: str) -> None:
    """Callers keep asking while rpm drops from 40 to 10: every admission after the change
    sees at most 10 admissions in its window, the old ones included."""
    settings = RouterSettings(namespace=namespace, guard_ms=20)
    log = TrafficLog()
    admin = RouterClient.from_url(redis_url, settings)
    quota = {"rpm": 40, "tpm": 10**6, "max_concurrency": 100, "window_s": 1.0}
    admin.set_quota("m", quota)
    clients = [LoggedRouterClient(admin.redis, settings, log=log) for _ in range(4)]
    stop_at = time.monotonic() + 3.5
    changed: list[int] = []

    def caller(client: RouterClient) -> None:
        while time.monotonic() < stop_at:
            lease = client.wait_for_admission(AdmitRequest(1), stop_at - time.monotonic())
            if lease is not None:
                client.complete(lease.lease_id, 1, 0)

    threads = [threading.Thread(target=caller, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    while len(log.entries) < 40:  # the first window is full at the old quota
        time.sleep(0.005)
    seconds, micros = admin.redis.time()
    changed.append(seconds * 1_000_000 + micros)
    admin.set_quota("m", {**quota, "rpm": 10})
    for t in threads:
        t.join(timeout=30)
    admin.close()

    times = [e.admitted_us for e in log.for_model("m")]
    after = [t for t in times if t > changed[0]]
    assert len(after) >= 20  # admissions went on at the new rate
    for t in after:
        in_window = sum(1 for u in times if t - 1_000_000 < u <= t)
        assert in_window <= 10, f"{in_window} admissions in the window ending {t}"
