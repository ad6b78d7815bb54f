"""A progress line every few seconds while the DAG runs: counts only, never prompt text."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TextIO

__all__ = ["ProgressPrinter", "progress_line"]


def progress_line(
    elapsed_s: float,
    total: int,
    counts: Mapping[str, int] | None,
    router: Mapping[str, int] | None,
    backend: Mapping[str, int] | None,
) -> str:
    """One line; a source that could not be read shows ``?``.

    :param counts: task store statuses (``pending``, ``claimed``, ``solved``, ``dead``).
    :param router: ``admitted`` (since the start) and ``waiting`` (now).
    :param backend: ``in_flight`` (now) and ``rejected_429`` (since the start).
    """

    def get(doc: Mapping[str, int] | None, key: str) -> str:
        return "?" if doc is None else str(doc.get(key, 0))

    return (
        f"[{elapsed_s:6.1f} s] solved {get(counts, 'solved')}/{total}  "
        f"pending {get(counts, 'pending')}  claimed {get(counts, 'claimed')}  "
        f"dead {get(counts, 'dead')} | router: admitted {get(router, 'admitted')}, "
        f"waiting {get(router, 'waiting')} | backend: in flight {get(backend, 'in_flight')}, "
        f"429s {get(backend, 'rejected_429')}"
    )


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # a probe must never break the run; the line shows "?"
        return None


class ProgressPrinter:
    """Prints :func:`progress_line` every ``interval_s`` on a daemon thread until stopped.

    Each reader is called on that thread (give it its own connections) and returns the
    mapping :func:`progress_line` expects; an exception shows as ``?``.
    """

    def __init__(
        self,
        total: int,
        *,
        counts: Callable[[], Mapping[str, int]],
        router: Callable[[], Mapping[str, int]],
        backend: Callable[[], Mapping[str, int]],
        interval_s: float = 2.0,
        out: TextIO | None = None,
    ) -> None:
        self.total = total
        self._readers = (counts, router, backend)
        self.interval_s = interval_s
        self._out = out
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def _print(self) -> None:
        import sys

        counts, router, backend = (_safe(read) for read in self._readers)
        line = progress_line(time.monotonic() - self._start, self.total, counts, router, backend)
        out = self._out or sys.stdout
        print(line, file=out, flush=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._print()

    def start(self) -> ProgressPrinter:
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="llmr-demo-progress",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and print one last line."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        self._thread = None
        self._print()

    def __enter__(self) -> ProgressPrinter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
