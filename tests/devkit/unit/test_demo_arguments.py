"""The demo's numeric flags are checked before anything starts: one ``error:`` line naming
the flag and the range, exit 2, no service started, no file written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llm_router_devkit.demo.__main__ import main

BAD = [
    (["--prompts", "0"], "argument --prompts: 0 is out of range: give an integer >= 1"),
    (["--prompts", "many"], "argument --prompts: 'many' is not an integer >= 1"),
    (["--time-scale", "0"], "argument --time-scale: 0 is out of range: give a number > 0"),
    (["--time-scale", "nan"], "argument --time-scale: nan is out of range: give a number > 0"),
    (["--error-rate", "1.5"],
     "argument --error-rate: 1.5 is out of range: give a number from 0 to 1"),
    (["--error-rate", "-0.1"],
     "argument --error-rate: -0.1 is out of range: give a number from 0 to 1"),
    (["--fan-out", "-1"], "argument --fan-out: -1 is out of range: give an integer >= 0"),
    (["--claim-batch", "0"], "argument --claim-batch: 0 is out of range: give an integer >= 1"),
    (["--max-in-flight", "0"],
     "argument --max-in-flight: 0 is out of range: give an integer >= 1"),
    (["--time-budget-s", "inf"],
     "argument --time-budget-s: inf is out of range: give a number > 0"),
    (["--progress-interval", "-2"],
     "argument --progress-interval: -2 is out of range: give a number > 0"),
    (["--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[a[0] + "=" + a[1] for a, _ in BAD])
def test_a_number_out_of_range_is_one_error_line_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: {message} (see --help)\n"


@pytest.mark.parametrize("argv", [
    ["--error-rate", "0"], ["--error-rate", "1"], ["--fan-out", "0"], ["--prompts", "1"],
    ["--time-scale", "0.5"], ["--seed", "-3"], ["--no-yardstick"],
])
def test_the_ends_of_each_range_are_accepted(argv: list[str]) -> None:
    from llm_router_devkit.demo.__main__ import _parser

    args = _parser().parse_args(argv)
    assert args.no_yardstick is ("--no-yardstick" in argv)


def test_the_command_refuses_before_starting_anything(tmp_path: Path) -> None:
    """As a user runs it: the refusal comes before any service starts or file is written."""
    workdir = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "llm_router_devkit.demo", "--error-rate", "1.5",
         "--workdir", str(workdir)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: argument --error-rate: 1.5 is out of range: give a number from 0 to 1 "
        "(see --help)"]
    assert not workdir.exists()
