"""The demo's report on a backend that fails some calls, run as a user runs it: it leads
with the run timed as the benchmarks' headline is, against the yardstick; the backend's
500s show in the progress lines, and the admissions beyond one per task are accounted for
by hedges (read from the drain's own summaries) and retries."""

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
         "--time-scale", "20", "--error-rate", "0.1",
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
    _assert_timed_as_the_headline(out)


def _seconds(pattern: str, out: str) -> float:
    found = re.search(pattern, out)
    assert found, (pattern, out[-3000:])
    return float(found.group(1))


def _assert_timed_as_the_headline(out: str) -> None:
    """The report's first lines: the run from the DAG run's start, the first claim and the
    first call (with what that leaves out), each as a share of the reference's, the LP
    bound's and the preference-keeping reference's speed, all printed to 0.1 s and 1 %."""
    report = out[out.index("This run, timed as the benchmarks' headline is"):]
    wall = _seconds(r"DAG run finished: success in ([\d.]+) s", out)
    lp = _seconds(r"LP lower bound: ([\d.]+) s", report)
    ref = _seconds(r"reference schedule: ([\d.]+) s", report)
    kept = _seconds(r"reference with preferences kept: ([\d.]+) s", report)
    shares = r" = (\d+)% of the reference's speed, (\d+)% of the LP bound's, (\d+)% of the " \
        r"preference-keeping reference's\n"
    lines = {}
    for key, label in (("start", "from the DAG run's start"),
                       ("claim", "from the first claim"),
                       ("call", r"from the first call at the backend \(the makespan\)")):
        found = re.search(rf"\n  {label}: ([\d.]+) s{shares}", report)
        assert found, (label, report[:1500])
        lines[key] = (float(found.group(1)), [int(g) for g in found.groups()[1:]])
    start, claim, call = (lines[k][0] for k in ("start", "claim", "call"))
    # the run starts, then a solver claims, then a call reaches the backend; and the DAG
    # run's start is inside dag.test(), whose wall time ends after the last answer. The
    # first call is the start of its 50 ms bucket, so it may read up to 50 ms before the
    # call (and the claim, which comes 0.05-0.2 s before it): one printed digit of slack
    assert 0 < call <= claim + 0.1 + 1e-9, (call, claim)
    assert claim <= start <= wall, (claim, start, wall)
    left_out = _seconds(r"it leaves out the DAG run's start to the first call, ([\d.]+) s here",
                        report)
    # three figures rounded to 0.1 s from start - call, start and call: one digit apart
    assert abs(left_out - (start - call)) <= 0.1 + 1e-9
    for made, got in lines.values():
        for yardstick, share in zip((ref, lp, kept), got, strict=True):
            # each figure was rounded to 0.1 s and the share to 1 %: the share of the
            # unrounded figures lies between these
            low, high = (yardstick - 0.05) / (made + 0.05), (yardstick + 0.05) / (made - 0.05)
            assert low - 0.005 <= share / 100 <= high + 0.005, (made, yardstick, share)
