"""Benchmarks' bad input and missing pieces end as a CLI does: one ``error:`` line naming
the option or the missing piece and its fix, and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("src", ["nodir", "name=", "=.", "this=/nonexistent"])
def test_lead_start_refuses_a_source_that_is_no_checkout(
        src: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.lead_start import parse

    with pytest.raises(SystemExit) as done:
        parse(["--src", src])
    assert done.value.code == 2
    line = _one_error_line(capsys)
    assert f"--src {src!r}" in line and "NAME=DIR" in line


def test_e2e_docs_without_matplotlib_is_one_error_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.e2e import plots
    from bench.e2e.analyse import analyse_dir

    if plots.available():
        pytest.skip("matplotlib is installed: --docs draws its plots")
    with pytest.raises(SystemExit) as done:
        analyse_dir(tmp_path, docs=True)
    assert done.value.code == 2
    line = _one_error_line(capsys)
    assert "matplotlib" in line and f"--analyse {tmp_path}" in line
