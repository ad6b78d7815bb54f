"""The lead-start benchmark (``bench/lead_start.py``) on a checkout whose DAG file cannot
be imported: the lead's process ends before its first mark, and the run ends with one
``error:`` line and status 2, naming the option that shows why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_DSN, REDIS_URL

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[3]


def test_a_lead_that_dies_before_starting_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "example_dags").mkdir()
    (tmp_path / "example_dags" / "llm_router_drain.py").write_text(
        "raise RuntimeError('this DAG file does not import')\n")
    done = subprocess.run(
        [sys.executable, "-m", "bench.lead_start", "--src", f"broken={tmp_path}",
         "--runs", "1", "--redis-url", REDIS_URL, "--postgres-dsn", POSTGRES_DSN,
         "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    assert done.stderr.strip().splitlines() == [
        f"error: the lead's process of {tmp_path} ended before it started; run it again "
        "with --verbose to see why"], done.stderr[-2000:]
