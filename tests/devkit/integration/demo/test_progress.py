"""Progress lines: counts only, and a source that fails shows as '?'."""

from __future__ import annotations

import io

from llm_router_devkit.demo.progress import ProgressPrinter, progress_line


def test_line_shows_every_source() -> None:
    line = progress_line(12.34, 1000,
                         {"pending": 500, "claimed": 100, "solved": 390, "dead": 10},
                         {"admitted": 480, "waiting": 20}, {"in_flight": 90, "rejected_429": 0})
    assert line == ("[  12.3 s] solved 390/1000  pending 500  claimed 100  dead 10 | router: "
                    "admitted 480, waiting 20 | backend: in flight 90, 429s 0")


def test_unreadable_sources_show_a_question_mark() -> None:
    def broken() -> dict[str, int]:
        raise ConnectionError("down")

    out = io.StringIO()
    printer = ProgressPrinter(5, counts=lambda: {"solved": 5}, router=broken, backend=broken,
                              interval_s=3600, out=out)
    printer.start()
    printer.stop()  # prints the final line at once
    assert out.getvalue().strip().endswith(
        "solved 5/5  pending 0  claimed 0  dead 0 | router: admitted ?, waiting ? | "
        "backend: in flight ?, 429s ?")
