"""Plot series and the docs section rewrite (no drawing)."""

from __future__ import annotations

import pytest

from bench.e2e.plots import progress_series, traffic_series
from bench.e2e.report import BEGIN, END, replace_section


def test_traffic_series_uses_the_target_in_force() -> None:
    raw = {
        "window_s": 2.0,
        "backend": {
            "timeline": {"bucket_s": 1.0, "models": {"x": {
                "requests": [1, 1, 1, 1], "tokens": [10, 10, 10, 10],
                "rejected": [0, 1, 0, 0], "limits": {}}}},
            "limits": {"x": {"rpm": 1, "tpm": 100, "max_concurrency": None}}},
        "events": [{"event": "quota_change", "at": 2.0, "model": "x",
                    "limits": {"rpm": 1, "tpm": None, "max_concurrency": None},
                    "before": {"rpm": 2, "tpm": 100, "max_concurrency": None}}],
    }
    s = traffic_series(raw, "x", 0.0, 3.0)
    assert s["t"] == [1.0, 2.0, 3.0, 4.0]
    assert s["rpm"] == pytest.approx([50, 200, 200, 200])  # rpm 2 until 2 s, then 1
    assert s["tpm"] == pytest.approx([10, 20, 20, 20])  # tpm unchanged
    assert s["offered"] == pytest.approx([50, 300, 300, 200])


def test_progress_series_counts_answers_over_time() -> None:
    rows = [{"solved": 12.0}, {"solved": None}, {"solved": 11.0}]
    assert progress_series(rows, 10.0) == ([1.0, 2.0], [1, 2])


def test_replace_section_appends_then_replaces_only_its_part() -> None:
    text = "# Benchmarks\n\n## Other\nkeep me\n"
    first = replace_section(text, "one", "## E2E")
    assert first.startswith(text.rstrip()) and f"## E2E\n\n{BEGIN}\none\n{END}" in first
    again = replace_section(first + "\n## After\nand me\n", "two", "## E2E")
    assert "one" not in again and "two" in again
    assert "keep me" in again and "and me" in again and again.count("## E2E") == 1
