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


@pytest.mark.parametrize(("module", "args", "names"), [
    ("scale", ["--ab", "main", "--rounds", "0"], "--rounds"),
    ("scale", ["--calls", "0"], "--calls"),
    ("scale", ["--models", "10", "0"], "--models"),
    ("endpoint_overhead", ["--rounds", "0"], "--rounds"),
    ("endpoint_overhead", ["--clients", "0"], "--clients"),
    ("endpoint_overhead", ["--seconds", "0"], "--seconds"),
    ("endpoint_overhead", ["--rate", "-1"], "--rate"),
    ("litellm_side_by_side", ["--calls", "5"], "--calls"),
    ("litellm_side_by_side", ["--sides", "router,nginx"], "--sides"),
    ("cluster_loss", ["--runs", "0"], "--runs"),
    ("cluster_loss", ["--clients", "0"], "--clients"),
    ("backlog", ["--chunk", "0"], "--chunk"),
    ("backlog_drain", ["--max-in-flight", "0"], "--max-in-flight"),
    ("backlog_drain", ["--every", "0"], "--every"),
    ("backlog_drain", ["--replot", "run.json"], "--replot"),
    ("backlog_drain", ["--replot", "/nonexistent/run.json", "--plot", "x.png"], "--replot"),
    ("triggerers", ["--fast", "4", "--tasks", "1000001"], "--tasks"),
    ("surfaces", ["--calls", "0"], "--calls"),
    ("surfaces", ["--models", "0"], "--models"),
])
def test_a_bad_count_is_refused_before_anything_starts(
        module: str, args: list[str], names: str, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    main = importlib.import_module(f"bench.{module}").main
    assert main(args) == 2
    assert names in _one_error_line(capsys)


def test_litellm_side_by_side_without_its_virtualenv_is_one_error_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.litellm_side_by_side import main
    from llm_router_devkit.litellm_proxy import LITELLM_VENV_ENV

    monkeypatch.delenv(LITELLM_VENV_ENV, raising=False)
    assert main(["--sides", "litellm"]) == 2
    assert "scripts/litellm_venv.sh" in _one_error_line(capsys)


def test_cluster_loss_writes_under_bench_out_from_any_directory() -> None:
    from bench.cluster_loss import OUT
    from bench.common import OUT_DIR

    assert OUT == OUT_DIR / "cluster_loss.json" and OUT.is_absolute()
