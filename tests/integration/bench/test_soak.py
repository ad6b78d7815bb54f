"""The soak benchmark's quick mode, so the script cannot rot: 300 prompts through two real
drains with 5xx, timeouts, truncated JSON, a SIGKILLed drain and a Redis restart (see
``bench/soak.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]


def test_the_soak_quick_mode_passes_every_check(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, "-m", "bench.soak", "--prompts", "300",
                           "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=200, check=False)
    lines = done.stdout.splitlines()
    checks = [line for line in lines if line.startswith(("PASS ", "FAIL "))]
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    names = {line.split(":", 1)[0].split(" ", 1)[1] for line in checks}
    assert names == {"none lost", "none twice", "no window over target", "faults injected",
                     "solver_rss_mb flat", "redis_used_memory_mb flat"}, checks
    assert all(line.startswith("PASS ") for line in checks), checks
    summary = json.loads(out.read_text())
    assert all(summary["checks"].values()), summary["checks"]
    # The kill left work for the drain that took over, and every fault kind happened.
    assert summary["kill"]["stranded_claims"] > 0
    assert summary["counts"]["solved"] > summary["kill"]["solved"]
    assert min(summary["backend"][k] for k in ("errors", "timeouts", "truncated")) > 0
    assert summary["repeated"] <= summary["kill"]["in_flight"]


@pytest.mark.parametrize(("args", "line"), [
    (["--prompts", "3"], "error: --prompts must be >= 10, --time-scale > 0 and --fault-rate "
                         "in [0, 0.5]"),
    (["--fault-rate", "0.6"], "error: --prompts must be >= 10, --time-scale > 0 and "
                              "--fault-rate in [0, 0.5]"),
    (["--out", "/nonexistent-dir/soak.json"], "error: --out /nonexistent-dir/soak.json: no "
                                              "directory /nonexistent-dir; create it or pick "
                                              "another"),
])
def test_bad_options_are_one_error_line_and_exit_2(args: list[str], line: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.soak", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [line]
