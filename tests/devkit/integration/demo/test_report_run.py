"""The demo's report on a backend that fails some calls, run as a user runs it: the
backend's 500s show in the progress lines, and the admissions beyond one per task are
accounted for by hedges (read from the drain's own summaries) and retries."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

TASKS = 200


def test_errors_retries_and_hedges_are_in_the_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llm_router_devkit.demo", "--prompts", str(TASKS),
         "--time-scale", "20", "--error-rate", "0.1", "--no-yardstick",
         "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=360, cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = done.stdout
    assert done.returncode == 0, (out[-3000:], done.stderr[-3000:])

    last_progress = [line for line in out.splitlines() if line.startswith("[")][-1]
    errors_seen = re.search(r"500s (\d+)$", last_progress)
    assert errors_seen and int(errors_seen.group(1)) > 0, last_progress

    calls = re.search(rf"calls: the router admitted (\d+) for {TASKS} tasks", out)
    hedges = re.search(r"  hedges: (\d+) prompts", out)  # a number: the summaries were read
    retries = re.search(r"  retries: (\d+) calls failed \(the backend answered 500 to (\d+)"
                        r"\) and (\d+) got a 429", out)
    assert calls and hedges and retries, out[-3000:]
    admitted, hedged = int(calls.group(1)), int(hedges.group(1))
    failed, answered_500, limited = (int(g) for g in retries.groups())
    # the same backend count, read after the last progress line (a straggler may end later)
    assert answered_500 >= int(errors_seen.group(1))
    assert failed >= 1 and answered_500 >= 1
    # every task was admitted at least once, and each admission beyond one per task was a
    # hedge or followed a failed or refused call
    assert TASKS <= admitted <= TASKS + hedged + failed + limited, out[-3000:]
    assert "reference schedules: skipped (--no-yardstick)" in out
