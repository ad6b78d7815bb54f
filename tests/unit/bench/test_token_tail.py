"""The token-tail model (``bench/token_tail.py``) in a small size: the same seed gives the
same drains, the output tail leaves fewer of them with a 429 than the largest overrun alone
and sends fewer calls for it, and bad input is one error line."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from bench.token_tail import Head, Learned, drain, overrun_head, tail_head
from llm_router_devkit.simulator.profile import SimulatorProfile

ROOT = Path(__file__).resolve().parents[3]
CODER = {m.name: m for m in SimulatorProfile.default().models}["coder"]


def _drains(head: Head, n: int) -> tuple[int, int]:
    rng = random.Random(7)
    refused = calls = 0
    for _ in range(n):
        times, sent = drain(CODER, 60.0, 0.15, 240.0, head, Learned(1600, 180.0), rng)
        refused += bool(times)
        calls += sent
    return refused, calls


def test_the_tail_leaves_fewer_drains_with_a_429_for_fewer_calls() -> None:
    overrun = _drains(overrun_head, 150)
    tail = _drains(tail_head(3.0, 3.0), 150)
    assert overrun == _drains(overrun_head, 150)  # the seed decides
    assert tail[0] < overrun[0] / 2, (tail, overrun)
    assert 0.9 * overrun[1] < tail[1] < overrun[1], (tail, overrun)


def test_a_learned_tail_is_the_fit_once_64_answers_were_seen() -> None:
    learned = Learned(prior=100, halve_s=60.0)
    for out in [100] * 63 + [200]:
        learned.settle(0.0, out, 0)
    assert learned.log_sd is not None and learned.log_sd > 0
    room = tail_head(3.0, 3.0)(learned, 0.0, learned.estimate)
    assert 0 < room < 2 * learned.estimate  # the fit, not 3x the estimate


@pytest.mark.parametrize(("args", "line"), [
    (["--model", "nope"], "error: --model nope: give one of flash-mini, flash, chat-small, "
                          "chat-medium, chat-large, coder, long-context, reasoner-small, "
                          "reasoner-large, premium-scarce"),
    (["--drains", "0"], "error: --drains 0: give at least 1"),
])
def test_bad_input_is_one_error_line_and_exit_2(args: list[str], line: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.token_tail", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [line]
