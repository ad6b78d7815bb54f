"""Admission engine benchmark: decisions per second and latency of one admission call.

Runs, against a live Redis, the matrix

    client (sync threads | asyncio coroutines) x callers (1, 16, 256)
    x models (10, 100) x mode (single ``admit`` | batched ``admit_many`` of 64)

Each caller loops admit -> complete (``complete_many`` for a batch) for a fixed time per
cell. Quotas are far above what the run can use, and requests allow any model, so every
call runs the weighted-fair selection over all models and is admitted: this measures the
cost of a decision, not waiting. Only admissions count in the rate; latency is measured
per admit call with ``time.perf_counter()`` (a batched call's latency is also reported
divided by its admissions). Redis server cost comes from ``INFO commandstats`` (time in
EVALSHA, and the ``redis.call()`` commands the scripts ran) and ``INFO cpu`` deltas.

Two extra checks: the cost of a decision at rpm=1,000 vs rpm=1,000,000 (60 s window, so
the window log holds many entries), and a sequential, one-caller breakdown of where Redis
time goes per operation.

    python bench/admission.py                   # full matrix (~3 s per cell), writes docs
    python bench/admission.py --quick           # ~1 s per cell
    python bench/admission.py --profile         # + cProfile of the client side

Every cell uses its own namespace, and its keys are deleted (SCAN + UNLINK) afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import hashlib
import io
import json
import math
import os
import platform
import pstats
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as ``python bench/admission.py`` from anywhere
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402

from airflow_llm_router.engine.client import AsyncRouterClient, RouterClient  # noqa: E402
from airflow_llm_router.engine.core import Completion  # noqa: E402
from airflow_llm_router.engine.keys import RouterKeys  # noqa: E402
from airflow_llm_router.engine.scripts import script_source  # noqa: E402
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings  # noqa: E402
from bench.common import write_section  # noqa: E402

SECTION = "## Admission engine"
TOKENS = 100  # estimate per request; settled as 50 in + 50 out
BATCH = 64
TAIL = 0.25  # s callers keep going after the interval, so it ends under full load
# redis-py 8 times a reply out after 5 s by default; 256 callers x batches over 100 models
# queue for longer than that on a saturated Redis
SOCKET_TIMEOUT_S = 120.0
HUGE = {"rpm": 10**9, "tpm": 10**12, "max_concurrency": 10**6, "window_s": 60}
TARGET_SINGLE_RATE = 5_000
TARGET_SINGLE_P99_MS = 5.0
TARGET_BATCH_RATE = 20_000


def connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S)


# -- cells and measurements -----------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    client: str  # "sync" | "async"
    callers: int
    models: int
    batch: int  # 1 = single admit(), else admit_many(batch)
    rpm: int = HUGE["rpm"]
    prefill: int = 0  # admissions put in the window log before measuring

    @property
    def mode(self) -> str:
        return "single" if self.batch == 1 else f"batch {self.batch}"


@dataclass
class Tally:
    """What the callers saw during the measured interval."""

    lat_admit: list[float] = field(default_factory=list)  # s per call that admitted
    lat_wait: list[float] = field(default_factory=list)  # s per call that admitted none
    per_admission: list[float] = field(default_factory=list)  # s per call / admissions
    admissions: int = 0
    waits: int = 0  # requests told to wait
    scripts: int = 0  # script calls (admit + complete) that ended in the interval

    @classmethod
    def of(cls, logs: Sequence[CallLog], start: float, end: float) -> Tally:
        """Calls that ended in [start, end)."""
        t = cls()
        for log in logs:
            for t0, t1, admitted, waited in log.admits:
                if not start <= t1 < end:
                    continue
                t.scripts += 1
                t.admissions += admitted
                t.waits += waited
                if admitted:
                    t.lat_admit.append(t1 - t0)
                    t.per_admission.append((t1 - t0) / admitted)
                else:
                    t.lat_wait.append(t1 - t0)
            t.scripts += sum(1 for t1 in log.completes if start <= t1 < end)
        return t


@dataclass
class CallLog:
    """Every call of one caller: (start, end, admitted, waited) per admit call."""

    admits: list[tuple[float, float, int, int]] = field(default_factory=list)
    completes: list[float] = field(default_factory=list)  # end of each complete call


@dataclass
class Clock:
    start: float = 0.0  # perf_counter() when measuring starts (after warm-up)
    end: float = 0.0  # when measuring ends; callers go on for TAIL s more

    @property
    def stop(self) -> float:
        return self.end + TAIL


class RedisCpu:
    """CPU seconds of redis-server's main thread, read from /proc when Redis is local (an
    instant read, unlike INFO, which queues behind the scripts under load), else INFO."""

    def __init__(self, r: redis.Redis) -> None:
        pid = r.info("server").get("process_id")
        self.main = Path(f"/proc/{pid}/task/{pid}/stat")
        self.proc = Path(f"/proc/{pid}/stat")
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.local = self.main.exists()

    def _stat(self, path: Path) -> float:
        fields = path.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime

    def read(self, r: redis.Redis) -> tuple[float, float]:
        """(main thread, whole process) CPU seconds; the process is nan if not local."""
        if self.local:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return self._stat(self.main), self._stat(self.proc)
            self.local = False
        cpu = r.info("cpu")
        return cpu.get("used_cpu_user_main_thread", cpu["used_cpu_user"]) + cpu.get(
            "used_cpu_sys_main_thread", cpu["used_cpu_sys"]
        ), float("nan")

    def machine(self) -> float:
        """Busy CPU seconds of the whole machine (all cores), from /proc/stat."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
            return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / self.tick
        return float("nan")


@dataclass
class Snapshot:
    commands: dict[str, dict[str, float]]
    redis_cpu: float  # main thread
    redis_proc: float  # whole redis-server process
    client_cpu: float
    machine: float  # every process on the machine
    at: float  # perf_counter() of the CPU readings

    @classmethod
    def take(cls, r: redis.Redis, cpu: RedisCpu) -> Snapshot:
        at, client_cpu, machine = time.perf_counter(), time.process_time(), cpu.machine()
        redis_cpu, redis_proc = cpu.read(r)
        # commandstats may answer late under load; only its ratios are used (see Result)
        commands = {k.removeprefix("cmdstat_"): v for k, v in r.info("commandstats").items()}
        return cls(commands, redis_cpu, redis_proc, client_cpu, machine, at)


@dataclass
class ServerDelta:
    lua_usec: float  # time Redis spent in EVALSHA
    lua_calls: int
    inner: dict[str, int]  # redis.call() commands run by the scripts, by name
    redis_cpu: float  # s of Redis main-thread CPU
    client_cpu: float  # s of this process's CPU
    other_cpu: float  # s of CPU used by every other process (neighbours disturb the cell)
    wall: float

    @classmethod
    def between(cls, a: Snapshot, b: Snapshot) -> ServerDelta:
        def calls(name: str, snap: Snapshot) -> int:
            return int(snap.commands.get(name, {}).get("calls", 0))

        ev_a, ev_b = a.commands.get("evalsha", {}), b.commands.get("evalsha", {})
        ignore = {"evalsha", "info", "script|load", "ping", "scan", "unlink", "hello"}
        inner = {
            name: calls(name, b) - calls(name, a)
            for name in b.commands
            if name not in ignore and calls(name, b) > calls(name, a)
        }
        return cls(
            lua_usec=ev_b.get("usec", 0) - ev_a.get("usec", 0),
            lua_calls=int(ev_b.get("calls", 0) - ev_a.get("calls", 0)),
            inner=inner,
            redis_cpu=b.redis_cpu - a.redis_cpu,
            client_cpu=b.client_cpu - a.client_cpu,
            other_cpu=(b.machine - a.machine) - (b.redis_proc - a.redis_proc)
            - (b.client_cpu - a.client_cpu),
            wall=b.at - a.at,
        )


@dataclass
class Result:
    cell: Cell
    seconds: float
    tally: Tally
    server: ServerDelta
    window_log: int = 0  # entries in the model's window log at the end (limit check)
    probe_ms: float = float("nan")  # speed probe just before the cell (see speed_probe)

    @property
    def rate(self) -> float:
        return self.tally.admissions / self.seconds

    @property
    def decision_rate(self) -> float:
        return (self.tally.admissions + self.tally.waits) / self.seconds

    @property
    def foreign(self) -> bool:
        """Other clients ran scripts on this Redis meanwhile (server columns inflated)."""
        extra = self.server.lua_calls - self.tally.scripts
        return extra > 0.05 * self.tally.scripts + 2 * self.cell.callers

    @property
    def lua_per_script(self) -> float:
        return self.server.lua_usec / max(1, self.server.lua_calls)

    @property
    def lua_per_admission(self) -> float:
        """Redis time in scripts per admission. The async client merges concurrent calls
        into fewer scripts, so this divides the server's own total, not per-call figures
        times our call count."""
        return self.server.lua_usec / max(1, self.tally.admissions)

    @property
    def lua_per_decision(self) -> float:
        return self.server.lua_usec / max(1, self.tally.admissions + self.tally.waits)


class Monitor(threading.Thread):
    """Takes the server snapshots at the start and the end of the measured interval."""

    def __init__(self, url: str, clock: Clock) -> None:
        super().__init__(daemon=True)
        self.redis = connect(url)
        self.cpu = RedisCpu(self.redis)
        self.clock = clock
        self.snaps: list[Snapshot] = []

    def run(self) -> None:
        for at in (self.clock.start, self.clock.end):
            time.sleep(max(0.0, at - time.perf_counter()))
            self.snaps.append(Snapshot.take(self.redis, self.cpu))
        self.redis.close()

    def delta(self) -> ServerDelta:
        return ServerDelta.between(*self.snaps)

    @property
    def interval(self) -> tuple[float, float]:
        return self.snaps[0].at, self.snaps[1].at


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``nan`` when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


# -- the callers ------------------------------------------------------------------------


def _new_requests(pending: list[AdmitRequest], size: int) -> list[AdmitRequest]:
    """Keep requests that were told to wait (same request id = same place in the queue)."""
    return pending + [AdmitRequest(TOKENS) for _ in range(size - len(pending))]


def _settle(log: CallLog, t0: float, pending: list[AdmitRequest], got: list
            ) -> tuple[list[Admission], list[AdmitRequest]]:
    t1 = time.perf_counter()
    admitted = [d for d in got if isinstance(d, Admission)]
    still = [r for r, d in zip(pending, got, strict=True) if not isinstance(d, Admission)]
    log.admits.append((t0, t1, len(admitted), len(still)))
    return admitted, still


def _completions(admitted: list[Admission]) -> list[Completion]:
    return [Completion(a.lease_id, TOKENS // 2, TOKENS // 2) for a in admitted]


def sync_caller(client: RouterClient, cell: Cell, clock: Clock, go: threading.Event) -> CallLog:
    log, pending = CallLog(), []
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
    log, pending = CallLog(), []
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


PROBE_LOOPS = 2_000_000


def speed_probe(r: redis.Redis) -> float:
    """ms Redis takes for a fixed Lua loop: constant on a steady machine, so it shows how
    fast the machine was at the time (a VM's speed can drift with its host's load)."""
    t0 = time.perf_counter()
    r.eval("local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 0", 0,
           PROBE_LOOPS)
    return (time.perf_counter() - t0) * 1e3


@contextlib.contextmanager
def namespace(url: str, cell: Cell, index: int):
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


QUIET = {"max_wait_s": 0.0, "waited_s": 0.0}  # set from --quiet-wait


def wait_quiet(max_wait_s: float, busy_limit: float = 0.15) -> float:
    """Wait (up to ``max_wait_s``) until other processes, Redis included, use less than
    ``busy_limit`` of a core: neighbours' test runs would otherwise take CPU from the cell."""
    tick = os.sysconf("SC_CLK_TCK")
    start = time.perf_counter()

    def busy() -> float:
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tick

    with contextlib.suppress(OSError, ValueError, IndexError):
        while time.perf_counter() - start < max_wait_s:
            m0, c0, t0 = busy(), time.process_time(), time.perf_counter()
            time.sleep(0.5)
            other = (busy() - m0) - (time.process_time() - c0)
            if other / (time.perf_counter() - t0) < busy_limit:
                break
    waited = time.perf_counter() - start
    QUIET["waited_s"] += waited
    return waited


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


# -- where Redis time goes: one caller, each operation on its own ----------------------


@dataclass
class OpCost:
    op: str
    models: int
    per_call: int  # admissions (or completions) per script call
    lua_us: float  # Redis time in the script, per admission
    wall_us: float  # client wall time per call, per admission
    redis_calls: float  # redis.call() commands per admission
    top: list[tuple[str, float]]  # most frequent commands, per admission
    foreign: bool


def _measure_op(r: redis.Redis, fn: Callable[[], Any], calls: int, per_call: int, op: str,
                models: int) -> OpCost:
    cpu = RedisCpu(r)
    a = Snapshot.take(r, cpu)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    wall = time.perf_counter() - t0
    d = ServerDelta.between(a, Snapshot.take(r, cpu))
    n = calls * per_call
    top = sorted(d.inner.items(), key=lambda kv: -kv[1])[:6]
    return OpCost(op, models, per_call, d.lua_usec / n, wall / n * 1e6,
                  sum(d.inner.values()) / n, [(k, v / n) for k, v in top],
                  foreign=d.lua_calls > calls * 1.05 + 2)


def _op_costs(r: redis.Redis, c: RouterClient, models: int, singles: int) -> list[OpCost]:
    leases: list[str] = []
    batches: list[list] = []
    nb = max(4, singles // 16)

    def admit() -> None:
        leases.append(c.admit(TOKENS).lease_id)

    def admit_many() -> None:
        batches.append(c.admit_many([AdmitRequest(TOKENS) for _ in range(BATCH)]))

    costs = [_measure_op(r, admit, singles, 1, "admit", models)]
    it = iter(leases)
    costs.append(_measure_op(r, lambda: c.complete(next(it), 50, 50), singles, 1, "complete",
                             models))
    costs.append(_measure_op(r, admit_many, nb, BATCH, "admit_many", models))
    bt = iter(batches)
    costs.append(_measure_op(r, lambda: c.complete_many(_completions(next(bt))), nb, BATCH,
                             "complete_many", models))
    return costs


def breakdown(url: str, quick: bool) -> list[OpCost]:
    """Per operation, sequentially: Redis time and ``redis.call()`` commands per admission."""
    out = []
    for models in (10, 100):
        settings = RouterSettings(namespace=f"bench-adm-{os.getpid()}-ops{models}")
        r = connect(url)
        c = RouterClient(r, settings)
        try:
            for m in range(models):
                c.set_quota(f"m{m}", HUGE)
            c.complete(c.admit(TOKENS).lease_id)  # load the scripts
            if QUIET["max_wait_s"] > 0:
                wait_quiet(QUIET["max_wait_s"])
            out += _op_costs(r, c, models, 200 if quick else 600)
        finally:
            cleanup(r, settings)
            r.close()
    return out


def profile_client(url: str, seconds: float) -> str:
    """cProfile of one sync caller (10 models, admit -> complete): where the client spends."""
    settings = RouterSettings(namespace=f"bench-adm-{os.getpid()}-prof")
    r = connect(url)
    c = RouterClient(r, settings)
    try:
        for m in range(10):
            c.set_quota(f"m{m}", HUGE)
        prof, end = cProfile.Profile(), time.perf_counter() + seconds
        prof.enable()
        while time.perf_counter() < end:
            c.complete(c.admit(TOKENS).lease_id, 50, 50)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(22)
        return buf.getvalue()
    finally:
        cleanup(r, settings)
        r.close()


# -- machine facts ----------------------------------------------------------------------


def machine_facts(url: str) -> dict[str, Any]:
    r = connect(url)
    try:
        info = r.info("server")
        rtts = []
        for _ in range(2000):
            t0 = time.perf_counter()
            r.ping()
            rtts.append(time.perf_counter() - t0)
    finally:
        r.close()
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        import hiredis

        hiredis_version = hiredis.__version__
    except ImportError:
        hiredis_version = "not installed"
    return {
        "engine": engine_version(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "hiredis": hiredis_version,
        "redis_server": info["redis_version"],
        "ping_p50_ms": pct(rtts, 50) * 1e3,
        "ping_p99_ms": pct(rtts, 99) * 1e3,
    }


def engine_version() -> str:
    """The commit measured, and a hash of the admit script as assembled (engine edits
    that are not committed yet change it)."""
    script = hashlib.sha1(script_source("admit").encode()).hexdigest()[:10]
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                                "airflow_llm_router/engine"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"admit script {script}"
    return f"commit {commit}{' + uncommitted engine edits' if dirty else ''}, admit script {script}"


# -- reporting --------------------------------------------------------------------------


def _ms(x: float) -> str:
    return "—" if x != x else f"{x * 1e3:.2f}"


def _us(x: float) -> str:
    return "—" if x != x else f"{x * 1e6:.0f}"


def _share(x: float) -> str:
    return "—" if x != x else f"{max(0.0, x):.0%}"


def bound(res: Result) -> str:
    redis_busy = res.server.redis_cpu / res.server.wall
    client_busy = res.server.client_cpu / res.server.wall
    if redis_busy >= 0.85 and client_busy >= 0.85:
        return "both"
    if redis_busy >= 0.85:
        return "Redis"
    if client_busy >= 0.85:
        return "client"
    return "round trips"


def matrix_table(results: list[Result]) -> str:
    head = (
        "| client | callers | models | mode | admissions/s | call p50 ms | call p99 ms "
        "| per admission p50 / p99 µs | Redis Lua µs / adm | Redis CPU | client CPU | bound "
        "| other CPU | Lua probe ms | measured s |\n"
        "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|\n"
    )
    rows = []
    for r in results:
        t, c = r.tally, r.cell
        per = (f"{_us(pct(t.per_admission, 50))} / {_us(pct(t.per_admission, 99))}"
               if c.batch > 1 else "—")
        mark = " †" if r.foreign else ""
        rows.append(
            f"| {c.client} | {c.callers} | {c.models} | {c.mode} | {r.rate:,.0f} "
            f"| {_ms(pct(t.lat_admit, 50))} | {_ms(pct(t.lat_admit, 99))} | {per} "
            f"| {r.lua_per_admission:.1f}{mark} "
            f"| {r.server.redis_cpu / r.server.wall:.0%} "
            f"| {r.server.client_cpu / r.server.wall:.0%} | {bound(r)} "
            f"| {_share(r.server.other_cpu / r.server.wall)} | {r.probe_ms:.0f} "
            f"| {r.seconds:.1f} |"
        )
    return head + "\n".join(rows) + "\n"


def limit_table(runs: list[list[Result]]) -> str:
    head = (
        "| model rpm | window log at end | decisions/s | admissions/s | waits/s "
        "| admit p50 / p99 ms | wait p50 / p99 ms | Redis Lua µs / decision, median (min, max) "
        "| runs |\n"
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n"
    )
    rows = []
    for results in runs:
        r = median_run(results)
        t = r.tally
        luas = [x.lua_per_decision for x in results]
        rows.append(
            f"| {r.cell.rpm:,} | {r.window_log:,} | {r.decision_rate:,.0f} | {r.rate:,.0f} "
            f"| {t.waits / r.seconds:,.0f} "
            f"| {_ms(pct(t.lat_admit, 50))} / {_ms(pct(t.lat_admit, 99))} "
            f"| {_ms(pct(t.lat_wait, 50))} / {_ms(pct(t.lat_wait, 99))} "
            f"| {_spread(luas, '.0f')}{' †' if any(x.foreign for x in results) else ''} "
            f"| {len(results)} |"
        )
    return head + "\n".join(rows) + "\n"


def median_run(results: list[Result]) -> Result:
    """The run with the median Redis cost per decision."""
    ordered = sorted(results, key=lambda x: x.lua_per_decision)
    return ordered[(len(ordered) - 1) // 2]


def ops_table(costs: list[OpCost]) -> str:
    head = (
        "| operation | models | per call | Redis Lua µs / adm | client wall µs / adm "
        "| redis.call()s / adm | most frequent (per admission) |\n"
        "|---|--:|--:|--:|--:|--:|---|\n"
    )
    rows = []
    for c in costs:
        top = ", ".join(f"{k} {v:.1f}" for k, v in c.top)
        rows.append(
            f"| {c.op} | {c.models} | {c.per_call} | {c.lua_us:.1f}{' †' if c.foreign else ''} "
            f"| {c.wall_us:.0f} | {c.redis_calls:.1f} | {top} |"
        )
    return head + "\n".join(rows) + "\n"


def find(results: list[Result], **want: Any) -> Result | None:
    for r in results:
        if all(getattr(r.cell, k) == v for k, v in want.items()):
            return r
    return None


def _spread(values: list[float], fmt: str) -> str:
    ordered = sorted(values)
    mid, lo, hi = (format(x, fmt) for x in (pct(ordered, 50), ordered[0], ordered[-1]))
    return f"{mid} ({lo}, {hi})"


def _meets(batch: int, rate: float, p99_ms: float) -> bool:
    if batch == 1:
        return rate >= TARGET_SINGLE_RATE and p99_ms < TARGET_SINGLE_P99_MS
    return rate >= TARGET_BATCH_RATE


def target_table(runs: dict[int, list[Result]]) -> str:
    """The issue's targets, judged on the run least disturbed by other processes (the
    engine's capacity), with the median of all runs beside it."""
    head = (
        "| target (10 models, 16 async callers) | runs | quietest run: admissions/s "
        "| its call p99 ms | its other CPU | all runs: admissions/s median (min, max) "
        "| call p99 ms median (min, max) | verdict |\n"
        "|---|--:|--:|--:|--:|--:|--:|---|\n"
    )
    rows = []
    for batch, results in sorted(runs.items()):
        if not results:
            continue
        rates = [r.rate for r in results]
        p99s = [pct(r.tally.lat_admit, 99) * 1e3 for r in results]
        quiet = min(results, key=lambda r: r.server.other_cpu / r.server.wall)
        q_p99 = pct(quiet.tally.lat_admit, 99) * 1e3
        if batch == 1:
            goal = (f"single `admit` >= {TARGET_SINGLE_RATE:,}/s at p99 < "
                    f"{TARGET_SINGLE_P99_MS:g} ms")
        else:
            goal = f"`admit_many({batch})` >= {TARGET_BATCH_RATE:,} admissions/s"
        hits = sum(1 for r, q in zip(rates, p99s, strict=True) if _meets(batch, r, q))
        ok = _meets(batch, quiet.rate, q_p99)
        rows.append(
            f"| {goal} | {len(results)} | {quiet.rate:,.0f} | {q_p99:.2f} "
            f"| {_share(quiet.server.other_cpu / quiet.server.wall)} "
            f"| {_spread(rates, ',.0f')} | {_spread(p99s, '.2f')} "
            f"| **{'met' if ok else 'missed'}** (met in {hits} of {len(results)} runs) |"
        )
    return head + "\n".join(rows) + "\n"


def interpretation(results: list[Result], limits: list[list[Result]], costs: list[OpCost]
                   ) -> str:
    out = []
    by_bound: dict[str, int] = {}
    for r in results:
        by_bound[bound(r)] = by_bound.get(bound(r), 0) + 1
    out.append(
        "- Bottleneck (\"bound\": the side whose CPU was >= 85 % busy): "
        + ", ".join(f"{k} in {v} cells" for k, v in sorted(by_bound.items()))
        + ". Where Redis is the bound, the rate is capped near 1,000,000 / (Redis Lua µs "
        "per admission): the scripts' cost, not the Python client, sets the ceiling."
    )
    for models in (10, 100):
        ops = {c.op: c for c in costs if c.models == models}
        if {"admit", "admit_many", "complete", "complete_many"} <= ops.keys():
            a, b = ops["admit"], ops["admit_many"]
            c, d = ops["complete"], ops["complete_many"]
            out.append(
                f"- {models} models, one caller: an `admit` costs Redis {a.lua_us:.0f} µs "
                f"({a.redis_calls:.0f} `redis.call`s) of {a.wall_us:.0f} µs wall, its "
                f"`complete` {c.lua_us:.0f} µs ({c.redis_calls:.0f} calls); in batches of "
                f"{BATCH}, {b.lua_us:.0f} µs ({b.redis_calls:.0f} calls) per admission and "
                f"{d.lua_us:.0f} µs per completion. A call reads every quota once (one "
                "HGETALL) and a model's state only when it tries that model, so batching "
                "amortises the fixed part; what stays per request is the fair-share pick "
                "over the models and the reservation itself."
            )
    if len(limits) >= 3 and all(limits):
        lo, empty, full = (median_run(x) for x in limits)
        grew = full.lua_per_decision / max(1e-9, empty.lua_per_decision)
        verdict = ("does not grow with the window log" if grew < 1.25
                   else f"grew {grew:.1f}x with the window log")
        out.append(
            f"- Cost vs limit: at rpm={empty.cell.rpm:,} a decision cost Redis "
            f"{empty.lua_per_decision:.0f} µs with {empty.window_log:,} entries in the window "
            f"log and {full.lua_per_decision:.0f} µs with {full.window_log:,}: the cost "
            f"{verdict}. At rpm={lo.cell.rpm:,} the window is full, so decisions are Waits "
            f"({lo.lua_per_decision:.0f} µs: a Wait reads up to 256 window entries to "
            "compute when capacity frees; bounded, not growing with the limit)."
        )
    every = results + [r for rs in limits for r in rs]
    probes = [r.probe_ms for r in every if r.probe_ms == r.probe_ms]
    if probes:
        out.append(
            f"- Machine speed: the Lua probe took {min(probes):.0f} to {max(probes):.0f} ms "
            f"across cells ({max(probes) / min(probes) - 1:.0%} spread): compare cells with "
            "that in mind, and prefer the repeated target runs for verdicts."
        )
    if any(r.foreign for r in every) or any(c.foreign for c in costs):
        out.append("- † other clients ran scripts on this Redis during that measurement, so "
                   "its server-side figures are inflated.")
    return "\n".join(out) + "\n"


def render(args: argparse.Namespace, facts: dict[str, Any], results: list[Result],
           limits: list[list[Result]], costs: list[OpCost], targets: dict[int, list[Result]]
           ) -> str:
    cmd = " ".join(["python bench/admission.py", *args.argv])
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""{SECTION}

Decisions per second and latency of the Redis admission engine (`engine/`), one admission
call at a time, on the local Redis.

- Command: `{cmd}` (run {when}); {args.duration:g} s measured per cell after
  {args.warmup:g} s warm-up, stretched where one round of every caller's call takes long
  (column "measured s") so the interval holds several rounds.
- Machine: {facts['nproc']} CPUs ({facts['cpu']}), shared by Redis and the benchmark;
  load average at the start {facts['load']}.
- Software: Python {facts['python']}, redis-py {facts['redis_py']} with hiredis
  {facts['hiredis']}, Redis {facts['redis_server']} at `{args.url}` (PING p50
  {facts['ping_p50_ms']:.3f} ms, p99 {facts['ping_p99_ms']:.3f} ms).
- Engine measured: {facts['engine']}.

### Method

- Each caller loops `admit` -> `complete` (single) or `admit_many({BATCH})` ->
  `complete_many` (batched). Sync: one thread per caller, one `RouterClient`; asyncio: one
  coroutine per caller on one event loop, one `AsyncRouterClient` whose pool holds a
  connection per coroutine.
- Quotas are far above what the run uses (rpm 1e9, tpm 1e12, concurrency 1e6, 60 s
  window) and every request allows any model (`models=None`), so each decision runs the
  weighted-fair selection over all models and admits: this is the cost of a decision,
  not waiting.
- Rate counts admissions only; latency is the wall time of one admit call
  (`perf_counter`, including event-loop/GIL queueing); "per admission" divides a batched
  call's latency by its admissions. The loop also pays for `complete`.
- Redis Lua µs / adm: time Redis spent in EVALSHA (admit and complete scripts) per
  admission, from `INFO commandstats`. Redis CPU / client CPU: main-thread CPU of
  redis-server (from /proc) and CPU of the benchmark process over wall time (100 % = one
  core). "bound" names the side that was >= 85 % busy; "round trips" means neither was.
  "other CPU": what every other process on the machine used meanwhile (from /proc/stat);
  more than a few % means neighbours took CPU from Redis or the client in that cell.
  "Lua probe ms": time of a fixed Lua loop on this Redis just before the cell; it would
  be constant on a steady machine, so its spread is the machine's speed drift (a VM).
- Before each cell the benchmark waited up to {args.quiet_wait:g} s for other processes
  to go idle (other engineers' test runs share this machine); it waited
  {QUIET['waited_s']:.0f} s in all.

### Results

{matrix_table(results)}
### Cost does not grow with the limit

One model, 60 s window, 16 async callers, single `admit`; each caller retries a waiting
request with the same request id (as a waiting prompt does) without sleeping. At
rpm=1,000 the window fills during warm-up, so decisions are Waits; at rpm=1,000,000 once
from an empty window log and once after filling it with admissions (count below). The
three are interleaved and repeated; each row shows the run with the median cost.

{limit_table(limits)}
### Where Redis time goes (one sync caller, sequential, per operation)

{ops_table(costs)}
### Targets

Each target cell was run {max((len(v) for v in targets.values()), default=0)} times (its
matrix run plus interleaved repeats) and is judged on the run in which other processes
used the least CPU, as the engine's capacity on this machine; the median of all runs is
beside it.

{target_table(targets)}
### Interpretation

{interpretation(results, limits, costs)}"""


# -- main -------------------------------------------------------------------------------


def matrix(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for client in args.clients:
        for callers in args.callers:
            for models in args.models:
                for batch in (1, BATCH):
                    cells.append(Cell(client, callers, models, batch))
    return cells


def progress(res: Result) -> None:
    t, c = res.tally, res.cell
    print(
        f"  {c.client:5} {c.callers:>3} callers {c.models:>3} models {c.mode:>8}: "
        f"{res.rate:>9,.0f} adm/s  p50 {_ms(pct(t.lat_admit, 50))} ms  "
        f"p99 {_ms(pct(t.lat_admit, 99))} ms  waits {t.waits}  "
        f"lua {res.lua_per_decision:.1f} µs/decision  [{bound(res)}]  "
        f"other CPU {_share(res.server.other_cpu / res.server.wall)}",
        flush=True,
    )


def timing(cell: Cell, done: list[Result], args: argparse.Namespace) -> tuple[float, float]:
    """Warm-up and measured time of a cell. When one round of every caller's call takes a
    while (256 callers x a batch over 100 models: seconds), both are stretched so the
    interval holds several rounds, estimated from the one-caller cell of the same kind."""
    one = find(done, client=cell.client, callers=1, models=cell.models, batch=cell.batch)
    round_s = pct(one.tally.lat_admit, 50) * cell.callers if one else 0.0
    if round_s != round_s:  # nan: no admission measured
        round_s = 0.0
    warmup = max(args.warmup, 1.5 * round_s)
    seconds = max(args.duration, min(4 * round_s, 12.0))
    return warmup, seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--quick", action="store_true", help="~1 s per cell")
    p.add_argument("--duration", type=float, help="measured seconds per cell (default 3)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md",
                   help="Markdown file to write the section into")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--json", type=Path, help="also dump raw figures here")
    p.add_argument("--clients", nargs="+", default=["sync", "async"])
    p.add_argument("--callers", nargs="+", type=int, default=[1, 16, 256])
    p.add_argument("--models", nargs="+", type=int, default=[10, 100])
    p.add_argument("--uvloop", action="store_true", help="run the asyncio cells on uvloop")
    p.add_argument("--target-repeats", type=int,
                   help="extra runs of the two target cells (default 3, --quick 2)")
    p.add_argument("--limit-repeats", type=int,
                   help="runs of each cost-vs-limit case (default 3, --quick 2)")
    p.add_argument("--quiet-wait", type=float,
                   help="before each cell, wait up to this many s for other processes to "
                   "go (nearly) idle (default 5, --quick 2; 0 = don't)")
    p.add_argument("--profile", action="store_true",
                   help="also print a cProfile of the client side (one sync caller)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.duration is None:
        args.duration = 1.0 if args.quick else 3.0
    args.warmup = 0.3 if args.quick else 0.5
    if args.target_repeats is None:
        args.target_repeats = 2 if args.quick else 3
    if args.limit_repeats is None:
        args.limit_repeats = 2 if args.quick else 3
    if args.quiet_wait is None:
        args.quiet_wait = 2.0 if args.quick else 5.0
    QUIET["max_wait_s"] = args.quiet_wait
    return args


def repeat_targets(args: argparse.Namespace, results: list[Result]) -> dict[int, list[Result]]:
    """Run the target cells again (machine speed drifts on a VM): median over all runs."""
    runs: dict[int, list[Result]] = {}
    for batch in (1, BATCH):
        found = find(results, client="async", callers=16, models=10, batch=batch)
        runs[batch] = [found] if found else []
    for k in range(args.target_repeats):
        for batch in (1, BATCH):
            res = run_cell(args.url, Cell("async", 16, 10, batch), 2000 + 2 * k + batch,
                           args.warmup, args.duration, args.uvloop)
            runs[batch].append(res)
            progress(res)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    facts = machine_facts(args.url)
    print(f"machine: {json.dumps(facts)}", flush=True)
    cells = matrix(args)
    print(f"matrix: {len(cells)} cells x {args.duration:g} s", flush=True)
    results: list[Result] = []
    for i, cell in enumerate(cells):
        warmup, seconds = timing(cell, results, args)
        results.append(run_cell(args.url, cell, i, warmup, seconds, args.uvloop))
        progress(results[-1])
    print("cost vs limit:", flush=True)
    limits = limit_check(args)
    print("target cells, repeated:", flush=True)
    targets = repeat_targets(args, results)
    print("per-operation breakdown:", flush=True)
    costs = breakdown(args.url, args.quick)
    text = render(args, facts, results, limits, costs, targets)
    print("\n" + text)
    if args.profile:
        print(profile_client(args.url, 2.0))
    if not args.no_write:
        write_section(args.out, SECTION, text)
        print(f"wrote {SECTION!r} into {args.out}")
    if args.json:
        args.json.write_text(json.dumps({
            "facts": facts,
            "cells": [_raw(r) for r in results],
            "limits": [[_raw(r) for r in rs] for rs in limits],
            "targets": {str(b): [_raw(r) for r in rs] for b, rs in targets.items()},
            "ops": [c.__dict__ for c in costs],
        }, indent=1, default=str))
    return 0


def _raw(r: Result) -> dict[str, Any]:
    t = r.tally
    return {
        **r.cell.__dict__, "seconds": r.seconds, "admissions": t.admissions,
        "waits": t.waits, "rate": r.rate,
        "p50_ms": pct(t.lat_admit, 50) * 1e3, "p99_ms": pct(t.lat_admit, 99) * 1e3,
        "wait_p50_ms": pct(t.lat_wait, 50) * 1e3, "wait_p99_ms": pct(t.lat_wait, 99) * 1e3,
        "lua_usec": r.server.lua_usec, "lua_calls": r.server.lua_calls,
        "my_scripts": t.scripts, "redis_cpu_s": r.server.redis_cpu,
        "client_cpu_s": r.server.client_cpu, "wall_s": r.server.wall,
        "window_log": r.window_log, "inner": r.server.inner, "probe_ms": r.probe_ms,
        "other_cpu_s": r.server.other_cpu,
    }


if __name__ == "__main__":
    sys.exit(main())
