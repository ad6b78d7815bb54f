"""The command line: profile loading and overrides (serving is covered by the HTTP tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_router_devkit.simulator.__main__ import _parser, load_profile, main
from llm_router_devkit.simulator.profile import SimulatorProfile


def test_print_default_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--print-default-profile"]) == 0
    assert SimulatorProfile.from_json(capsys.readouterr().out) == SimulatorProfile.default()


def test_command_line_overrides_the_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(SimulatorProfile.default(time_scale=10, seed=5).to_json())
    args = _parser().parse_args(["--profile", str(path), "--time-scale", "60", "--seed", "1"])
    profile = load_profile(args)
    assert (profile.time_scale, profile.seed) == (60, 1)
    kept = load_profile(_parser().parse_args(["--profile", str(path)]))
    assert (kept.time_scale, kept.seed) == (10, 5)


def test_truncate_rate_from_the_command_line() -> None:
    profile = load_profile(_parser().parse_args(["--truncate-rate", "0.05"]))
    assert profile.truncate_rate == 0.05
    assert load_profile(_parser().parse_args([])).truncate_rate == 0
