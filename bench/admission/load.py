"""The load: sync and asyncio callers looping admit -> complete against a live Redis, one
namespace per cell, and the cost-vs-limit check."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence

import redis
import redis.asyncio as aioredis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    AsyncRouterClient,
    Completion,
    Decision,
    RouterClient,
    RouterKeys,
    RouterSettings,
)
from bench.admission.model import (
    HUGE,
    SOCKET_TIMEOUT_S,
    TOKENS,
    CallLog,
    Cell,
    Clock,
    Result,
    Tally,
    connect,
)
from bench.admission.monitor import QUIET, Monitor, speed_probe, wait_quiet
from bench.admission.report import progress


def _new_requests(pending: list[AdmitRequest], size: int) -> list[AdmitRequest]:
    """Keep requests that were told to wait (same request id = same place in the queue)."""
    return pending + [AdmitRequest(TOKENS) for _ in range(size - len(pending))]


def _settle(log: CallLog, t0: float, pending: list[AdmitRequest], got: Sequence[Decision]
            ) -> tuple[list[Admission], list[AdmitRequest]]:
    t1 = time.perf_counter()
    admitted = [d for d in got if isinstance(d, Admission)]
    still = [r for r, d in zip(pending, got, strict=True) if not isinstance(d, Admission)]
    log.admits.append((t0, t1, len(admitted), len(still)))
    return admitted, still


def _completions(admitted: list[Admission]) -> list[Completion]:
    return [Completion(a.lease_id, TOKENS // 2, TOKENS // 2) for a in admitted]


def sync_caller(client: RouterClient, cell: Cell, clock: Clock, go: threading.Event) -> CallLog:
    log, pending = CallLog(), list[AdmitRequest]()
    got: Sequence[Decision]
    go.wait()
    while (t0 := time.perf_counter()) < clock.stop:
        pending = _new_requests(pending, cell.batch)
        if cell.batch == 1:
            got = [client.admit(TOKENS, request_id=pending[0].request_id)]
        else:
            got = client.admit_many(pending)
        admitted, pending = _settle(log, t0, pending, got)
        if not admitted:
            continue
        if cell.batch == 1:
            client.complete(admitted[0].lease_id, TOKENS // 2, TOKENS // 2)
        else:
            client.complete_many(_completions(admitted))
        log.completes.append(time.perf_counter())
    return log


async def async_caller(client: AsyncRouterClient, cell: Cell, clock: Clock) -> CallLog:
    log, pending = CallLog(), list[AdmitRequest]()
    got: Sequence[Decision]
    while (t0 := time.perf_counter()) < clock.stop:
        pending = _new_requests(pending, cell.batch)
        if cell.batch == 1:
            got = [await client.admit(TOKENS, request_id=pending[0].request_id)]
        else:
            got = await client.admit_many(pending)
        admitted, pending = _settle(log, t0, pending, got)
        if not admitted:
            continue
        if cell.batch == 1:
            await client.complete(admitted[0].lease_id, TOKENS // 2, TOKENS // 2)
        else:
            await client.complete_many(_completions(admitted))
        log.completes.append(time.perf_counter())
    return log


def run_sync(url: str, settings: RouterSettings, cell: Cell, warmup: float, seconds: float
             ) -> tuple[list[CallLog], Monitor]:
    pool = redis.ConnectionPool.from_url(url, max_connections=cell.callers + 8,
                                         socket_timeout=SOCKET_TIMEOUT_S)
    client = RouterClient(redis.Redis(connection_pool=pool), settings)
    clock, go, logs, errors = Clock(), threading.Event(), [], []

    def body() -> None:
        try:
            logs.append(sync_caller(client, cell, clock, go))
        except Exception as exc:  # a caller that dies would silently lower the rate
            errors.append(exc)

    threads = [threading.Thread(target=body, daemon=True) for _ in range(cell.callers)]
    for t in threads:
        t.start()
    clock.start = time.perf_counter() + warmup
    clock.end = clock.start + seconds
    monitor = Monitor(url, clock)
    monitor.start()
    go.set()
    for t in threads:
        t.join()
    pool.disconnect()
    monitor.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {cell.callers} callers failed") from errors[0]
    return logs, monitor


def run_async(url: str, settings: RouterSettings, cell: Cell, warmup: float, seconds: float,
              use_uvloop: bool = False) -> tuple[list[CallLog], Monitor]:
    async def main() -> tuple[list[CallLog], Monitor]:
        # one connection per coroutine: the pool must hold them all (redis-py's default is 100)
        pool = aioredis.ConnectionPool.from_url(url, max_connections=cell.callers + 8,
                                                socket_timeout=SOCKET_TIMEOUT_S)
        client = AsyncRouterClient(aioredis.Redis(connection_pool=pool), settings)
        clock = Clock(time.perf_counter() + warmup)
        clock.end = clock.start + seconds
        monitor = Monitor(url, clock)
        monitor.start()
        try:
            logs = await asyncio.gather(
                *(async_caller(client, cell, clock) for _ in range(cell.callers))
            )
        finally:
            await client.aclose()
            await pool.disconnect()
        await asyncio.to_thread(monitor.join)
        return list(logs), monitor

    if use_uvloop:
        import uvloop

        return uvloop.run(main())
    return asyncio.run(main())


# -- setup and cleanup ------------------------------------------------------------------


def cleanup(r: redis.Redis, settings: RouterSettings) -> int:
    """Delete every key of the namespace (SCAN + UNLINK)."""
    pattern = RouterKeys(settings.namespace).prefix + "*"
    n, batch = 0, []
    for key in r.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 500:
            n += r.unlink(*batch)
            batch = []
    if batch:
        n += r.unlink(*batch)
    return n


def prefill(client: RouterClient, count: int) -> None:
    """Admit and complete ``count`` requests, so the window log holds ``count`` entries."""
    step = 256 * 8
    for start in range(0, count, step):
        got = client.admit_many([AdmitRequest(TOKENS) for _ in range(min(step, count - start))])
        admitted = [d for d in got if isinstance(d, Admission)]
        client.complete_many(_completions(admitted))


def window_log_size(r: redis.Redis, settings: RouterSettings, model: str) -> int:
    return int(r.zcard(RouterKeys(settings.namespace).model("K_WIN", model)))


@contextlib.contextmanager
def namespace(url: str, cell: Cell, index: int
              ) -> Iterator[tuple[RouterSettings, redis.Redis]]:
    """A fresh namespace with the cell's quotas (and prefill); its keys deleted after."""
    settings = RouterSettings(namespace=f"bench-adm-{os.getpid()}-{index}")
    admin = connect(url)
    try:
        setup = RouterClient(admin, settings)
        for m in range(cell.models):
            setup.set_quota(f"m{m}", {**HUGE, "rpm": cell.rpm})
        prefill(setup, cell.prefill)
        yield settings, admin
    finally:
        cleanup(admin, settings)
        admin.close()


def measure(url: str, cell: Cell, settings: RouterSettings, admin: redis.Redis,
            warmup: float, seconds: float, use_uvloop: bool = False) -> Result:
    if QUIET["max_wait_s"] > 0:
        wait_quiet(QUIET["max_wait_s"])
    probe = speed_probe(admin)
    if cell.client == "sync":
        logs, monitor = run_sync(url, settings, cell, warmup, seconds)
    else:
        logs, monitor = run_async(url, settings, cell, warmup, seconds, use_uvloop)
    # everything over the interval between the two server snapshots
    start, end = monitor.interval
    tally = Tally.of(logs, start, end)
    log = window_log_size(admin, settings, "m0")
    return Result(cell, end - start, tally, monitor.delta(), window_log=log, probe_ms=probe)


def run_cell(url: str, cell: Cell, index: int, warmup: float, seconds: float,
             use_uvloop: bool = False) -> Result:
    with namespace(url, cell, index) as (settings, admin):
        return measure(url, cell, settings, admin, warmup, seconds, use_uvloop)


def limit_check(args: argparse.Namespace) -> list[list[Result]]:
    """rpm=1,000 vs rpm=1,000,000 (empty log, then a log of ``fill`` entries), one model,
    60 s window, 16 async callers, single admits; the three interleaved, repeated."""
    fill = 30_000 if args.quick else 100_000
    full_rpm = Cell("async", 16, 1, 1, rpm=1_000)
    empty = Cell("async", 16, 1, 1, rpm=10**6)
    big = Cell("async", 16, 1, 1, rpm=10**6, prefill=fill)
    runs: list[list[Result]] = [[], [], []]
    go = (args.warmup, args.duration, args.uvloop)
    with namespace(args.url, full_rpm, 1000) as lo, namespace(args.url, big, 1001) as hi:
        for k in range(args.limit_repeats):
            runs[0].append(measure(args.url, full_rpm, *lo, *go))
            progress(runs[0][-1])
            with namespace(args.url, empty, 1002 + k) as fresh:
                runs[1].append(measure(args.url, empty, *fresh, *go))
            progress(runs[1][-1])
            runs[2].append(measure(args.url, big, *hi, *go))
            progress(runs[2][-1])
    return runs
