"""The waiting-requests benchmark (``bench/waiting.py``) in a small size, so the script
cannot rot: every waiter is told to wait, and what it reports comes from its own Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("bound", ["concurrency", "rpm"])
def test_a_small_run_reports_the_cost_of_each_waiter(bound: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.waiting", "--waiters", "30",
                           "--models", "3", "--rounds", "3", "--bound", bound],
                          cwd=ROOT, capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert (result["waiters"], result["models"], result["rounds"], result["bound"]) == \
        (30, 3, 3, bound)
    assert result["redis_us_per_waiter"] > 0 and result["redis_ms_per_round"] > 0
    # each waiter is queued again with the model it now waits for: a ZADD of its rank and
    # one of its deadline (lib/waiters.lua), every round
    assert result["commands_per_waiter"]["zadd"] == pytest.approx(2.0, abs=0.2)


@pytest.mark.parametrize("option", ["--waiters", "--models", "--rounds"])
def test_a_count_below_one_is_one_error_line_and_exit_2(option: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.waiting", option, "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {option} 0: give at least 1"]
