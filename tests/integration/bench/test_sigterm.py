"""A benchmark ended by SIGTERM (``timeout``, a cancelled CI job, ``kill <pid>``) stops the
services it started, as it does on Ctrl-C: run as a user runs it (``python -m bench.<name>``
in its own process), terminated mid-drain, then none of its redis-server, simulator or API
processes is left and it exits 143 with one line saying so.

Three entry points: ``bench.solver_cpu`` goes through ``bench.common.guarded``, ``bench.ingest``
through ``bench.common.interruptible`` around its ``main`` (and also runs the standalone API),
``bench.lead_start`` through ``interruptible`` around its runs (each a lead process of its
own session, beside the simulator).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from llm_router_devkit.stack import descendants, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]

#: What each kind of service the benchmarks start looks like in its command line.
KINDS = {
    # redis-server rewrites its title: "/usr/bin/redis-server 127.0.0.1:<port>"
    "redis": lambda argv: Path(argv[0].split()[0]).name == "redis-server",
    "simulator": lambda argv: "llm_router_devkit.simulator" in argv,
    "api": lambda argv: "airflow_llm_router.web" in argv,
}


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot), None once it is gone or a
    zombie: with the pid it names one process, even if the pid were reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields[19]


def _services(pid: int) -> dict[str, list[int]]:
    """The services below ``pid``, by kind."""
    found: dict[str, list[int]] = {}
    for child in descendants(pid):
        argv = _argv(child)
        for kind, matches in KINDS.items():
            if argv and matches(argv):
                found.setdefault(kind, []).append(child)
    return found


def _calls_seen(simulator_pid: int) -> int:
    """Requests the simulator has had so far (0 while it is not answering yet)."""
    argv = _argv(simulator_pid)
    port = argv[argv.index("--port") + 1]
    try:
        stats = httpx.get(f"http://127.0.0.1:{port}/stats", timeout=2).json()
    except httpx.HTTPError:
        return 0
    return int(stats["totals"].get("requests", 0))


@pytest.mark.parametrize(("args", "kinds"), [
    pytest.param(["bench.solver_cpu", "--tasks", "50000", "--max-in-flight", "1",
                  "--prompt-chars", "10", "--runs", "1"], {"redis", "simulator"},
                 id="solver_cpu"),
    pytest.param(["bench.ingest", "--runs", "1", "--in-flight", "40"],
                 {"redis", "simulator", "api"}, id="ingest"),
    # the lead's own process is killed at its first call, and the next run starts one
    pytest.param(["bench.lead_start", "--runs", "50"], {"simulator"}, id="lead_start"),
])
def test_sigterm_mid_drain_stops_every_service_and_exits_143(
        tmp_path: Path, args: list[str], kinds: set[str]) -> None:
    err_path = tmp_path / "stderr.txt"
    with open(tmp_path / "stdout.txt", "wb") as out, open(err_path, "wb") as err:
        # its own session, so only the SIGTERM below reaches it (as ``kill <pid>``), and a
        # failed test can end whatever is left of its group
        bench = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=out,
                                 stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    started: dict[int, str | None] = {}
    try:
        def draining() -> dict[str, list[int]] | None:
            assert bench.poll() is None, err_path.read_text()[-3000:]
            services = _services(bench.pid)
            if set(services) != kinds or not _calls_seen(services["simulator"][0]):
                return None
            return services

        services = wait_for(f"{args[0]}'s services up and its drain calling the simulator",
                            draining, 150.0, 0.2)
        started = {pid: _start_time(pid) for pid in descendants(bench.pid)}
        assert all(started.values()), started

        mark = time.monotonic()
        os.kill(bench.pid, signal.SIGTERM)
        code = bench.wait(timeout=60)
        stopped_s = time.monotonic() - mark
        left = {pid: _argv(pid) for pid, at in started.items() if _start_time(pid) == at}
    finally:
        if bench.poll() is None:  # the test failed before the SIGTERM, or it did not stop
            started.update({pid: _start_time(pid) for pid in descendants(bench.pid)})
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
        for pid, at in started.items():  # what a failed run left behind
            if at is not None and _start_time(pid) == at:
                os.kill(pid, signal.SIGKILL)

    stderr = err_path.read_text()
    print(f"{args[0]}: {sorted(services)} stopped {stopped_s:.1f} s after SIGTERM")
    assert (code, left) == (143, {}), stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "terminated; services stopped", stderr[-3000:]
