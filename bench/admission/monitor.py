"""Watching the machine while the benchmark runs: a monitor thread, a speed probe and a wait
for a quiet machine, and the facts of the machine the figures come from."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import redis

from airflow_llm_router.engine.scripts import script_source
from bench.admission.model import Clock, RedisCpu, ServerDelta, Snapshot, connect, pct

ROOT = Path(__file__).resolve().parents[2]


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


PROBE_LOOPS = 2_000_000


def speed_probe(r: redis.Redis) -> float:
    """ms Redis takes for a fixed Lua loop: constant on a steady machine, so it shows how
    fast the machine was at the time (a VM's speed can drift with its host's load)."""
    t0 = time.perf_counter()
    r.eval("local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 0", 0,
           PROBE_LOOPS)
    return (time.perf_counter() - t0) * 1e3


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
