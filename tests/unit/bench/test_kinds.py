"""The task-kind benchmark's command line and report (the drains themselves run on demand)."""

from __future__ import annotations

import pytest

from bench import kinds


def test_bad_options_end_in_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert kinds.main(["--tpm", "100", "--cap", "2000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--tpm" in err[0]


def test_report_compares_each_mode_with_the_worst_case() -> None:
    opts = kinds._parser().parse_args([])
    rows = [
        {"mode": "worst_case", "makespan_s": 30.0, "mean_in_flight": 4.0, "rejected_429": 0,
         "peak_tokens_in_window": 10_000, "estimates": {"model": 900}},
        {"mode": "per_model", "makespan_s": 25.0, "mean_in_flight": 4.5, "rejected_429": 9,
         "peak_tokens_in_window": 11_900, "estimates": {"model": 1600}},
        {"mode": "per_kind", "makespan_s": 20.0, "mean_in_flight": 5.0, "rejected_429": 2,
         "peak_tokens_in_window": 11_950,
         "estimates": {"model": 1500, "essay": 1400, "summary": 60}},
    ]
    text = kinds.report(opts, rows)
    assert "| worst_case | 30.0 | 1.00x | 4.0 | 0 | 10000 / 12000 | 2000 (cap) | 0.0 |" in text
    assert ("| per_kind | 20.0 | 1.50x | 5.0 | 2 | 11950 / 12000 | "
            "1500; essay 1400; summary 60 | 0.0 |") in text
    assert "(+25%)" in text and "33% shorter" in text
