"""What the admission benchmark measures: a cell of the matrix, the Redis server's counters
before and after, the tallies and result, and the targets they are judged by."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

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


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``nan`` when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]




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
