"""``llm-router``: one command line that hands the rest of the line to its command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_llm_router.cli import main


def test_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: llm-router ") and "quotas:" in out and "serve:" in out


def test_a_command_gets_the_rest_of_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["quotas", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: llm-router quotas " in out and "{load,migrate,list,budget}" in out


@pytest.mark.parametrize(("command", "usage"), [
    ("quotas", "usage: llm-router quotas "), ("serve", "usage: llm-router serve ")])
def test_a_commands_help_names_the_command_as_typed(
        command: str, usage: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=r"^0$"):
        main([command, "--help"])
    assert capsys.readouterr().out.startswith(usage)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "the following arguments are required: command"),
    (["bogus"], "argument command: invalid choice: 'bogus'"),
    (["quotas", "bogus"], "argument command: invalid choice: 'bogus'"),
    (["serve"], "the following arguments are required: --port"),
])
def test_a_mistake_is_one_error_line_and_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=r"^2$"):
        main(argv)
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {message}") and line.endswith("(see --help)")


def test_python_dash_m_runs_the_same_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "airflow_llm_router.cli", "bogus"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: argument command: invalid choice: 'bogus' (choose from 'quotas', 'serve') "
        "(see --help)"]


def test_importing_the_command_line_does_not_import_airflow() -> None:
    """The devkit's demo takes ``CliParser`` from here, then configures Airflow: an Airflow
    imported before that would read the wrong configuration."""
    probe = "import sys, airflow_llm_router.cli; print('airflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["False"]
