"""Progress lines: counts only, and a source that fails shows as '?'."""

from __future__ import annotations

import io
import threading

from llm_router_devkit.demo.progress import Heartbeat, ProgressPrinter, progress_line


def test_line_shows_every_source() -> None:
    line = progress_line(12.34, 1000,
                         {"pending": 500, "claimed": 100, "solved": 390, "dead": 10},
                         {"admitted": 480, "waiting": 20},
                         {"in_flight": 90, "rejected_429": 0, "errors": 7})
    assert line == ("[  12.3 s] solved 390/1000  pending 500  claimed 100  dead 10 | router: "
                    "admitted 480, waiting 20 | backend: in flight 90, 429s 0, 500s 7")


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
        "backend: in flight ?, 429s ?, 500s ?")


def test_a_long_step_is_never_silent() -> None:
    """Each step is said as it starts, and a step still running is said again each
    interval: the yardstick's minutes of computing show as lines, not as silence."""
    lines: list[str] = []
    beat_seen = threading.Event()

    def say(line: str) -> None:
        lines.append(line)
        if "still computing" in line:
            beat_seen.set()

    with Heartbeat(2, 0.01, say) as beat:
        beat.step("the LP lower bound")
        assert beat_seen.wait(30), lines  # a step outlasting the interval is reported
        beat.step("the reference schedule")
    assert lines[0].startswith("  [1/2] the LP lower bound (")
    assert any(x.startswith("  [1/2] still computing the LP lower bound (") for x in lines)
    assert any(x.startswith("  [2/2] the reference schedule (") for x in lines)
    assert beat._thread is None  # joined on the way out: no line after the computation
