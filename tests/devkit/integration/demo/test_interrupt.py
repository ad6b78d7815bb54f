"""The demo's command line off the happy path: Ctrl-C or SIGTERM in the middle of a drain,
and options it cannot use. Run as a user runs it (``python -m llm_router_devkit.demo`` in its own
process, embedded Redis and PostgreSQL), not in-process."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_router_devkit.demo.__main__ import AS_IS_REFUSAL
from llm_router_devkit.stack import group_members, wait_for
from tests.devkit.integration.interrupting_child import sigint_as_in_a_terminal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

_ENDPOINT = re.compile(r"^(redis|postgres): embedded .* (?:redis://)?127\.0\.0\.1:(\d+)",
                       re.MULTILINE)
_SIMULATOR = re.compile(r"^simulator: .* at http://127\.0\.0\.1:(\d+) \(own process\)",
                        re.MULTILINE)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(("signum", "code_after", "last_line"), [
    # Ctrl-C signals the terminal's foreground group: the demo and everything it started
    pytest.param(signal.SIGINT, 130, "interrupted; services stopped", id="ctrl-c"),
    # SIGTERM (``kill <pid>``, ``timeout``, a supervisor) reaches the demo alone
    pytest.param(signal.SIGTERM, 143, "terminated; services stopped", id="sigterm"),
])
def test_ctrl_c_or_sigterm_mid_drain_stops_every_service(
        tmp_path: Path, signum: signal.Signals, code_after: int, last_line: str) -> None:
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err, sigint_as_in_a_terminal():
        # Its own session, as a terminal's foreground job (killpg below for Ctrl-C).
        demo = subprocess.Popen(
            [sys.executable, "-m", "llm_router_devkit.demo", "--prompts", "5000",
             "--workdir", str(tmp_path / "demo")],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
            cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        def drain_running() -> bool:
            assert demo.poll() is None, err_path.read_text()[-3000:]
            return bool(re.search(r"solved [1-9]\d*/5000", out_path.read_text()))

        wait_for("the drain to solve its first tasks", drain_running, 120.0, 0.2)
        ports = {name: int(port) for name, port in
                 _ENDPOINT.findall(out_path.read_text())}
        simulator = _SIMULATOR.search(out_path.read_text())
        assert simulator, out_path.read_text()
        ports["simulator"] = int(simulator.group(1))
        assert set(ports) == {"redis", "postgres", "simulator"}, out_path.read_text()
        assert all(listening(port) for port in ports.values()), ports

        mark = time.monotonic()
        if signum == signal.SIGINT:
            os.killpg(demo.pid, signum)
        else:
            os.kill(demo.pid, signum)
        code = demo.wait(timeout=60)
        stopped_s = time.monotonic() - mark
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()

    stderr = err_path.read_text()
    print(f"stopped {stopped_s:.1f} s after {signum.name}")
    assert code == code_after, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert lines[-1] == last_line, stderr[-3000:]
    # where the backlog stood, said once before the services stopped
    said = [line for line in lines if line.startswith("interrupted: ")]
    assert len(said) == 1 and re.search(r"\d+ of 5000 tasks solved, \d+ dead; (the solvers "
                                        r"handed back their claims: \d+ pending$|\d+ pending, "
                                        r"\d+ still claimed)", said[0].split("; stopping")[0]), \
        stderr[-3000:]
    # The embedded servers are gone: nothing listens on their ports, nothing of the
    # demo's process group is left.
    assert not [name for name, port in ports.items() if listening(port)], ports
    assert not group_members(demo.pid)


def test_a_dags_folder_without_the_dag_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llm_router_devkit.demo", "--dags-folder", str(tmp_path),
         "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: --dags-folder: {tmp_path} has no llm_router_drain.py; give the "
                     f"folder of the example DAGs (default: {_repo_dags()})"], done.stderr
    assert not (tmp_path / "demo").exists()  # refused before anything started


def test_the_old_design_is_no_demo_mode_and_the_refusal_points_to_the_benchmark(
        tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llm_router_devkit.demo", "--dag", "as_is_baseline",
         "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [f"error: argument --dag: {AS_IS_REFUSAL} (see --help)"]
    assert "python -m bench.e2e --designs as-is router" in AS_IS_REFUSAL
    assert not (tmp_path / "demo").exists()  # refused before anything started


def _repo_dags() -> Path:
    return Path(__file__).resolve().parents[4] / "example_dags"
